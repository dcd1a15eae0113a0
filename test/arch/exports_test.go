package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// exportsChecked are the packages whose exported top-level identifiers
// must have a user in another package (production or test code of any
// other package, e2e included). api/ is the documented API and stays whole;
// commands (package main) export nothing.
var exportsChecked = []string{"crdt", "enforce", "model", "store", "gossip", "kube", "daemon", "reach", "cli",
	"internal/metricsreg", "internal/version"}

// maxUnusedExports is the ratchet on exported top-level identifiers
// without a user outside their package (issue 31: 233 before, 220 once the
// dead ones went; 227 after the Globalnet-mesh merge added kube.GlobalIP*,
// kube.PodGlobalIP, kube.GlobalIngress* and daemon.ReadyAdvertise; 226
// once the mirror and the outputs moved from daemon to model; 224 after
// the CLI split, the typed policy references and the applier's change
// sets). Most
// that remain are types and constants that appear in another exported
// signature (a caller uses them without naming them) or
// enumerations; each is still a candidate to unexport. Lower this number
// when you unexport or delete one; never raise it: give a new export an
// outside user or keep it unexported.
const maxUnusedExports = 224

// TestNoNewUnusedExports fails when the number of exported top-level funcs,
// types, vars and consts of the checked packages that only their own
// package (its tests included) uses grows. Methods and fields are not
// checked (that needs type information, and a method often satisfies an
// interface). The check is syntactic: a use is a selector pkg.Name on an
// import of the package, from a file of another directory.
func TestNoNewUnusedExports(t *testing.T) {
	unused := unusedExports(t)
	switch {
	case len(unused) > maxUnusedExports:
		t.Errorf("%d exported identifiers have no user outside their package (at most %d): give the new one an outside user, or unexport it:\n  %s",
			len(unused), maxUnusedExports, strings.Join(unused, "\n  "))
	case len(unused) < maxUnusedExports:
		t.Logf("only %d exported identifiers without an outside user: lower maxUnusedExports to %d", len(unused), len(unused))
	}
}

// unusedExports returns "pkg.Name" for every exported top-level identifier
// of the checked packages that no other package selects, sorted.
func unusedExports(t *testing.T) []string {
	t.Helper()
	exported := map[string][]string{} // import path -> names
	for _, pkg := range exportsChecked {
		exported[module+"/"+pkg] = declaredExports(t, filepath.Join("..", "..", pkg))
	}
	used := selectedNames(t, exported)
	var out []string
	for _, pkg := range exportsChecked {
		for _, n := range exported[module+"/"+pkg] {
			if !used[module+"/"+pkg+"."+n] {
				out = append(out, pkg+"."+n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// declaredExports returns the exported top-level names declared in the
// non-test files of dir.
func declaredExports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		for _, d := range file.Decls {
			names = append(names, exportedOf(d)...)
		}
	}
	return names
}

// exportedOf returns the exported names a top-level declaration declares
// (methods excluded).
func exportedOf(d ast.Decl) []string {
	var out []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil && d.Name.IsExported() {
			out = append(out, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					out = append(out, s.Name.Name)
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						out = append(out, n.Name)
					}
				}
			}
		}
	}
	return out
}

// selectedNames walks every Go file of the module (tests and e2e included)
// and returns "importpath.Name" for each selector on an import of one of
// the packages, from a file of another directory.
func selectedNames(t *testing.T, exported map[string][]string) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	root := filepath.Join("..", "..")
	for _, path := range moduleGoFiles(t) {
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		if err := selectorsIn(path, module+"/"+filepath.ToSlash(dir), exported, used); err != nil {
			t.Fatal(err)
		}
	}
	return used
}

// selectorsIn adds to used the selections on the file's imports of the
// checked packages, except imports of the file's own package (self).
func selectorsIn(path, self string, exported map[string][]string, used map[string]bool) error {
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	alias := map[string]string{} // local name -> import path
	for _, imp := range file.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if _, ok := exported[p]; !ok || p == self {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		alias[name] = p
	}
	if len(alias) == 0 {
		return nil
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && alias[x.Name] != "" {
				used[alias[x.Name]+"."+sel.Sel.Name] = true
			}
		}
		return true
	})
	return nil
}
