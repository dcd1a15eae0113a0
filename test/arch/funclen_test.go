package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines bounds every function of the daemon and gossip packages
// (non-test files), from its `func` line to its closing brace: a long
// function is a part that wants its own type (issue 14, "the daemon as
// composed parts", "gossip by concern").
const maxFuncLines = 60

// funcLenPackages are the packages the bound applies to.
var funcLenPackages = []string{"daemon", "gossip"}

// funcLenAllowed lists the declared wiring tables (package/Func or
// package/Type.Method) allowed to be longer, each with its reason. Keep it
// short: an entry is a promise that the function is a flat table, not logic.
// Empty today: every function of daemon/ and gossip/ fits.
var funcLenAllowed = map[string]string{}

// TestFunctionLength fails when a function of those packages grows over
// maxFuncLines lines, unless it is a declared wiring table.
func TestFunctionLength(t *testing.T) {
	seen := map[string]bool{}
	for _, pkg := range funcLenPackages {
		files, err := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", pkg, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			for name, n := range funcLengths(t, f) {
				key := pkg + "/" + name
				seen[key] = true
				if _, ok := funcLenAllowed[key]; ok {
					continue
				}
				if n > maxFuncLines {
					t.Errorf("%s: %s is %d lines (max %d): split it into parts, or declare it a wiring table in funcLenAllowed with a reason",
						filepath.Base(f), key, n, maxFuncLines)
				}
			}
		}
	}
	var stale []string
	for k := range funcLenAllowed {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("funcLenAllowed names functions that no longer exist; remove them: %v", stale)
	}
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
