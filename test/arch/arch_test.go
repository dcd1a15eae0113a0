// Package arch holds tests of the project's shape: which package may import
// which. The table below is the one in docs/ARCHITECTURE.md ("Package
// rules"); a change to either must change both.
package arch

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
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

// m names coastguard packages.
func m(pkgs ...string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = module + "/" + p
	}
	return out
}

// every coastguard top-level package directory: a rule that lists all of
// them forbids any coastguard import.
var allPackages = []string{"api", "crdt", "enforce", "model", "store", "gossip", "kube", "daemon", "reach", "cli", "internal", "cmd", "test"}

// except returns allPackages without the given ones.
func except(keep ...string) []string {
	var out []string
	for _, p := range allPackages {
		if !slices.Contains(keep, p) {
			out = append(out, p)
		}
	}
	return out
}

const clientGo = "k8s.io/client-go"

var rules = []rule{
	{"crdt", append(m(except()...), clientGo, "net/http"),
		"crdt is the pure replicated state: no I/O, no Kubernetes client, no other coastguard package"},
	{"enforce", append(m("model", "gossip", "store", "kube", "daemon", "reach", "cli", "cmd", "test"), clientGo),
		"enforce is the pure translator: MCNP + inventory -> NetworkPolicies"},
	{"model", append(m(except("api", "crdt", "enforce")...), clientGo),
		"model is the one pure producer of what a cluster applies: replicated entries -> enforce view -> guarded outputs"},
	{"model/modeltest", append(m(except("api", "crdt")...), clientGo),
		"modeltest is test fixtures over replicated values; only tests import it"},
	{"gossip", append(m("api", "store", "enforce", "model", "kube", "daemon", "reach", "cli", "cmd", "test"), clientGo),
		"gossip moves crdt deltas through the gossip.Replica interface; it knows nothing of Kubernetes, policy or the store"},
	{"gossip/sim", append(m("api", "enforce", "model", "kube", "daemon", "reach", "cli", "cmd", "test"), clientGo),
		"the simulator runs gossip nodes over in-memory replicas, without Kubernetes"},
	{"store", append(m("api", "gossip", "enforce", "model", "kube", "daemon", "reach", "cli", "cmd", "test"), clientGo),
		"store persists crdt state; it knows nothing of the network or Kubernetes"},
	{"api/v1", append(m(except("api")...), clientGo),
		"api holds CRD types only"},
	{"api/mcs/v1alpha1", append(m(except("api")...), clientGo),
		"api holds CRD types only"},
	{"kube", m("model", "gossip", "store", "daemon", "reach", "cli", "cmd", "test"),
		"kube adapts Kubernetes objects; wiring belongs to daemon"},
	{"daemon", m("reach", "cli", "cmd", "test", "model/modeltest"),
		"daemon is one coastguardd: it never runs the plugin's parts"},
	{"reach", append(m(except()...), clientGo),
		"reach is the pure reachability engine over compiled rules"},
	{"cli", m("gossip", "store", "daemon", "cmd", "test"),
		"the plugin reads clusters through their apiservers; it never runs a daemon's parts"},
	{"internal/metricsreg", m(except()...),
		"one registration policy, below every package"},
	{"internal/version", m(except()...),
		"the build's version, below every package"},
	{"cmd/coastguardd", m("test", "gossip/sim", "model/modeltest"),
		"the daemon binary ships no test harness and no simulator"},
	{"cmd/kubectl-coastguard", m("gossip", "store", "daemon", "test"),
		"the plugin binary is cli/ alone"},
	{"gossip/sim/cmd/gossipsim", append(m("api", "enforce", "model", "kube", "daemon", "reach", "cli", "test"), clientGo),
		"the simulator's command line"},
}

// unruled are the packages without an import rule, each with its reason.
// TestEveryPackageHasARule keeps every other package of the module covered.
var unruled = map[string]string{
	"cmd/coastguard-bench":           "make bench measures every layer, the e2e harness included",
	"deploy":                         "tests of the manifests only",
	"hack/crdschema":                 "a generator run by make generate",
	"hack/nemesis-report":            "turns nemesis runs into RELIABILITY.md tables",
	"hack/release":                   "release tooling",
	"test/arch":                      "these tests",
	"test/demo":                      "make demo: wires the harness",
	"test/harness":                   "the e2e harness starts real daemons",
	"test/harness/internal/podagent": "a pod's agent in the harness",
	"test/harness/internal/probe":    "the harness's packet probe",
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

// TestEveryPackageHasARule fails when a package of the module has no import
// rule and is not declared unruled (with a reason), and when either table
// names a package that does not exist.
func TestEveryPackageHasARule(t *testing.T) {
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	have := map[string]bool{}
	for _, r := range rules {
		have[r.pkg] = true
	}
	listed := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		p = strings.TrimPrefix(p, module+"/")
		listed[p] = true
		if _, ok := unruled[p]; !have[p] && !ok {
			t.Errorf("package %s has no import rule: add one to rules (and to docs/ARCHITECTURE.md, \"Package rules\"), or declare it in unruled with a reason", p)
		}
	}
	for p := range have {
		if !listed[p] {
			t.Errorf("rules names %s, which is not a package of the module", p)
		}
	}
	for p := range unruled {
		if !listed[p] {
			t.Errorf("unruled names %s, which is not a package of the module", p)
		}
	}
}
