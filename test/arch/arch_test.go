// Package arch holds tests of the project's shape: which package may import
// which. The table below is the one in docs/ARCHITECTURE.md ("Package
// rules"); a change to either must change both.
package arch

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/coastguard-mcnp/coastguard"

// rule forbids a package (and everything it imports) from depending on any
// of the forbidden import paths or the packages below them.
type rule struct {
	pkg       string
	forbidden []string
	why       string
}

var rules = []rule{
	{"crdt", []string{module + "/gossip", module + "/store", module + "/enforce", module + "/kube", module + "/daemon", "k8s.io/client-go", "net/http"},
		"crdt is the pure replicated state: no I/O, no Kubernetes client"},
	{"enforce", []string{module + "/gossip", module + "/store", module + "/kube", module + "/daemon", "k8s.io/client-go"},
		"enforce is the pure translator: MCNP + inventory -> NetworkPolicies"},
	{"gossip", []string{module + "/enforce", module + "/kube", module + "/daemon", "k8s.io/client-go"},
		"gossip moves crdt deltas; it knows nothing of Kubernetes or policy"},
	{"store", []string{module + "/gossip", module + "/enforce", module + "/kube", module + "/daemon", "k8s.io/client-go"},
		"store persists crdt state; it knows nothing of the network or Kubernetes"},
	{"api/v1", []string{module + "/crdt", module + "/enforce", module + "/gossip", module + "/store", module + "/kube", module + "/daemon", "k8s.io/client-go"},
		"api holds CRD types only"},
	{"kube", []string{module + "/gossip", module + "/store", module + "/daemon"},
		"kube adapts Kubernetes objects; wiring belongs to daemon"},
	{"reach", []string{module + "/crdt", module + "/gossip", module + "/store", module + "/enforce", module + "/kube", module + "/daemon", module + "/cli", "k8s.io/client-go"},
		"reach is the pure reachability engine over compiled rules"},
	{"cli", []string{module + "/gossip", module + "/store", module + "/daemon"},
		"the plugin reads clusters through their apiservers; it never runs a daemon's parts"},
	{"internal/metricsreg", []string{module + "/api", module + "/crdt", module + "/gossip", module + "/store", module + "/enforce", module + "/kube", module + "/daemon", module + "/reach", module + "/cli"},
		"one registration policy, below every package"},
	{"internal/version", []string{module + "/api", module + "/crdt", module + "/gossip", module + "/store", module + "/enforce", module + "/kube", module + "/daemon", module + "/reach", module + "/cli"},
		"the build's version, below every package"},
}

type listed struct {
	ImportPath string
	Deps       []string
}

// deps returns the transitive dependencies of ./pkg, test files excluded.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps", "./"+pkg)
	cmd.Dir = "../.."
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list ./%s: %v\n%s", pkg, err, errb.String())
	}
	var l listed
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("decode go list output for %s: %v", pkg, err)
	}
	if l.ImportPath != module+"/"+pkg {
		t.Fatalf("go list answered for %q, want %q", l.ImportPath, module+"/"+pkg)
	}
	return l.Deps
}

func TestImportRules(t *testing.T) {
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			bad := violations(deps(t, r.pkg), r.forbidden)
			if len(bad) > 0 {
				t.Errorf("%s must not import %v (%s); it depends on:\n  %s", r.pkg, r.forbidden, r.why, strings.Join(bad, "\n  "))
			}
		})
	}
}

// violations returns the dependencies that a rule forbids, sorted.
func violations(deps, forbidden []string) []string {
	var bad []string
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				bad = append(bad, d)
				break
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// TestRulesCatchAViolation guards the matcher and the listing: daemon wires
// everything together, so crdt's rule applied to daemon's dependencies must
// name gossip, store, enforce, kube and client-go.
func TestRulesCatchAViolation(t *testing.T) {
	bad := violations(deps(t, "daemon"), rules[0].forbidden)
	for _, want := range []string{module + "/gossip", module + "/store", module + "/enforce", module + "/kube", "k8s.io/client-go/kubernetes"} {
		found := false
		for _, b := range bad {
			if b == want {
				found = true
			}
		}
		if !found {
			t.Errorf("crdt's rule applied to daemon should flag %s; flagged %v", want, bad)
		}
	}
	if got := violations([]string{module + "/gossipx"}, []string{module + "/gossip"}); len(got) != 0 {
		t.Errorf("a sibling path with a shared prefix is not a violation: %v", got)
	}
}
