package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines bounds every function of every production package (non-test
// files of every package but test/..., hack/... and deploy), from its
// `func` line to its closing brace: a long function is a part that wants a
// name of its own (issue 14 for daemon/ and gossip/, issue 31 for all).
const maxFuncLines = 60

// funcLenSkipped are the directory trees that hold no production code.
var funcLenSkipped = []string{"test", "hack", "deploy", "testdata"}

// funcLenAllowed lists the declared wiring tables (dir/Func or
// dir/Type.Method) allowed to be longer, each with its reason. Keep it
// short: an entry is a promise that the function is a flat table, not logic.
var funcLenAllowed = map[string]string{
	"cmd/coastguardd/options": "the flag table: one entry per flag (name, env vars, help, setter, config-file getter)",
}

// funcLenPending lists functions over the bound, each with why it is not
// split yet. It held the 16 left when the rule was extended to every
// package (issue 31); all are split now. Keep it empty: split instead.
var funcLenPending = map[string]string{}

// TestFunctionLength fails when a production function grows over
// maxFuncLines lines, unless it is a declared wiring table or pending.
func TestFunctionLength(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range productionFiles(t) {
		dir := filepath.ToSlash(filepath.Dir(f))
		for name, n := range funcLengths(t, filepath.Join("..", "..", f)) {
			key := dir + "/" + name
			seen[key] = true
			_, allowed := funcLenAllowed[key]
			_, pending := funcLenPending[key]
			if n > maxFuncLines && !allowed && !pending {
				t.Errorf("%s: %s is %d lines (max %d): split it into parts, or declare it a wiring table in funcLenAllowed with a reason",
					f, key, n, maxFuncLines)
			}
			if pending && n <= maxFuncLines {
				t.Errorf("%s is %d lines now: delete it from funcLenPending", key, n)
			}
		}
	}
	var stale []string
	for _, m := range []map[string]string{funcLenAllowed, funcLenPending} {
		for k := range m {
			if !seen[k] {
				stale = append(stale, k)
			}
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("funcLenAllowed or funcLenPending names functions that no longer exist; remove them: %v", stale)
	}
}

// productionFiles returns the module's non-test Go files outside
// funcLenSkipped, relative to the module root.
func productionFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	var out []string
	for _, path := range moduleGoFiles(t) {
		rel, _ := filepath.Rel(root, path)
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		if strings.HasSuffix(rel, "_test.go") || slices.Contains(funcLenSkipped, top) {
			continue
		}
		out = append(out, rel)
	}
	if len(out) < 100 {
		t.Fatalf("found only %d production files: the walk is broken", len(out))
	}
	return out
}

// funcLengths returns the length in lines of every function declared in
// the file, keyed by Func or Type.Method.
func funcLengths(t *testing.T, path string) map[string]int {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	out := map[string]int{}
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		name := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) == 1 {
			name = recvType(fn.Recv.List[0].Type) + "." + name
		}
		out[name] = fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
	}
	return out
}

// recvType names a method's receiver type without pointer or type parameters.
func recvType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvType(x.X)
	case *ast.IndexExpr:
		return recvType(x.X)
	case *ast.IndexListExpr:
		return recvType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return fmt.Sprintf("%T", e)
}
