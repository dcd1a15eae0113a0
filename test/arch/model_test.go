package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modelImports are the only imports model's own files may name: pure
// standard packages, the Kubernetes types, and api, crdt and enforce. A
// transitive rule cannot say "no I/O, no clock, no goroutines" (the
// Kubernetes types pull in net/http), so this test looks at model's source.
var modelImports = []string{
	"cmp", "encoding/json", "errors", "fmt", "maps", "slices", "sort", "strconv", "strings",
	"k8s.io/api/", "k8s.io/apimachinery/",
	module + "/api/", module + "/crdt", module + "/enforce",
}

// TestModelIsPure: model imports only modelImports and starts no
// goroutine (docs/ARCHITECTURE.md, "One model").
func TestModelIsPure(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .GoFiles "\n"}}`, "../../model").Output()
	if err != nil {
		t.Fatalf("go list model: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) == 0 {
		t.Fatal("model has no files")
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join("../../model", name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !allowedModelImport(p) {
				t.Errorf("model/%s imports %s: model is pure (no I/O, clock, goroutines or Kubernetes client)", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: model starts a goroutine; callers may overlap work through a model.Pipeline", fset.Position(g.Pos()))
			}
			return true
		})
	}
}

func allowedModelImport(p string) bool {
	for _, a := range modelImports {
		if p == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(p, a)) {
			return true
		}
	}
	return false
}
