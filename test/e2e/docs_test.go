//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// Runnable documentation.
//
// A fenced block of the docs below is run by TestDocs when the line before
// it (blank lines aside) is a marker:
//
//	<!-- runnable: SCENARIOS [each-cluster] [file=PATH] [dir=DIR] -->
//
//   - SCENARIOS: comma-separated names from docScenarios. Each scenario is
//     a fresh set of clusters (c1, c2, c3, or c1 alone; the kubeconfig
//     contexts are named after them) on which its blocks run in the order
//     of docFiles, then of lines: the order a reader follows. Scenarios run
//     in parallel.
//   - each-cluster: the block is written for c1 and the docs say to repeat
//     it in every cluster; it runs once per cluster with the word c1
//     replaced by that cluster's name (in file= as well).
//   - file=PATH: the block (any language) is not run but written to PATH,
//     as the docs tell the reader to save it (a kustomization, say).
//   - dir=DIR: run in DIR of the work directory instead of the work
//     directory itself (dir=coastguard: the repository root, for commands
//     written relative to a checkout).
//
// A block runs as `bash -euo pipefail` in a work directory holding the
// repository as ./coastguard (the docs' layout: your repository with
// coastguard checked out in it), with kubectl, helm (the pinned one),
// coastguardd and kubectl-coastguard first on PATH, and KUBECONFIG merging
// the clusters' contexts (current context c1). A failing block fails the
// test with its file:line and output. Blocks that need what the harness
// does not have (an image registry, DNS, a kubelet to exec into, minutes of
// waiting) stay unmarked; the test lists them.

// docFiles are the documents whose blocks may be marked, in reading order.
var docFiles = []string{"README.md", "docs/OPERATIONS.md", "docs/UNINSTALL.md"}

// docBlock is one marked fenced block.
type docBlock struct {
	file      string // relative to the repository root
	line      int    // 1-based line of the opening fence
	lang      string
	scenarios []string
	each      bool
	writeTo   string
	dir       string
	body      string
}

func (b docBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docMarker matches a runnable marker; group 1 is what follows the colon.
var docMarker = regexp.MustCompile(`^\s*<!--\s*runnable:\s*(.*?)\s*-->\s*$`)

// parseRunnable returns the marked blocks of one document and the lines of
// its unmarked sh/bash blocks. A marker that is not followed by a fenced
// block, an unknown scenario or option, or a marked non-shell block
// without file= is an error.
func parseRunnable(root, rel string, known map[string]bool) (blocks []docBlock, unmarked []int, err error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	var pending *docBlock
	var errs []error
	bad := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", rel, line, fmt.Sprintf(format, args...)))
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimSpace(l)
		if m := docMarker.FindStringSubmatch(l); m != nil {
			if pending != nil {
				bad(pending.line, "runnable marker not followed by a fenced block")
			}
			pending = &docBlock{file: rel, line: i + 1}
			for _, tok := range strings.Fields(m[1]) {
				switch k, v, hasV := strings.Cut(tok, "="); {
				case tok == "each-cluster":
					pending.each = true
				case hasV && k == "file" && v != "":
					pending.writeTo = v
				case hasV && k == "dir" && v != "":
					pending.dir = v
				case hasV:
					bad(i+1, "unknown marker option %q", tok)
				default:
					for _, s := range strings.Split(tok, ",") {
						if !known[s] {
							bad(i+1, "unknown scenario %q", s)
						}
						pending.scenarios = append(pending.scenarios, s)
					}
				}
			}
			if len(pending.scenarios) == 0 {
				bad(i+1, "runnable marker names no scenario")
			}
			continue
		}
		if !strings.HasPrefix(trimmed, "```") {
			if pending != nil && trimmed != "" {
				bad(pending.line, "runnable marker not followed by a fenced block")
				pending = nil
			}
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
		start := i + 1
		var body strings.Builder
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			bl := lines[i]
			n := min(indent, len(bl)-len(strings.TrimLeft(bl, " ")))
			body.WriteString(bl[n:] + "\n")
		}
		if i == len(lines) {
			bad(start, "unterminated fenced block")
		}
		shell := lang == "sh" || lang == "bash"
		if pending == nil {
			if shell {
				unmarked = append(unmarked, start)
			}
			continue
		}
		b := *pending
		pending = nil
		b.line, b.lang, b.body = start, lang, body.String()
		if !shell && b.writeTo == "" {
			bad(start, "marked block is %q, not sh or bash, and has no file=", lang)
		}
		blocks = append(blocks, b)
	}
	if pending != nil {
		bad(pending.line, "runnable marker not followed by a fenced block")
	}
	return blocks, unmarked, errors.Join(errs...)
}

// docScenario is one run of marked blocks on fresh clusters.
type docScenario struct {
	name     string
	clusters []string
	// controllerManager: for `kubectl rollout status` (the DaemonSet
	// controller observes the spec; with no nodes it schedules nothing)
	// and `kubectl delete` of a namespace (the namespace controller).
	controllerManager bool
	// setup creates what the docs assume exists before their first step.
	setup func(t *testing.T, ctx context.Context, env *harness.Env)
	// check looks at what the blocks left behind.
	check func(t *testing.T, ctx context.Context, env *harness.Env, work string)
	// never may not appear in any block's output.
	never []string
	// hooks do, between blocks, what the harness's clusters lack: a
	// kubelet running the installed DaemonSet's pods, say.
	hooks func(env *harness.Env, tools docToolPaths) []docHook
}

// docHook runs once, before the first block whose text contains before.
// A hook that never ran fails the scenario: its block was changed.
type docHook struct {
	before string
	run    func(t *testing.T, ctx context.Context)
}

// docRequired are blocks that must stay marked: (scenario, file, a
// substring of the block). Without it, deleting a marker would silently
// stop testing the documented install.
var docRequired = []struct{ scenario, file, contains string }{
	{"helm", "docs/OPERATIONS.md", "create secret generic coastguard-gossip-key"},
	{"helm", "docs/OPERATIONS.md", "coastguardd keys generate"},
	{"helm", "docs/OPERATIONS.md", "helm --kube-context c1 install coastguard"},
	{"helm", "docs/OPERATIONS.md", "helm template coastguard"},
	{"helm", "docs/OPERATIONS.md", "kubectl coastguard status --wait"},
	{"helm", "docs/OPERATIONS.md", "apply -k coastguard/examples/eu-1"},
	{"helm", "docs/OPERATIONS.md", "coastguardd keys rotate"},
	{"helm", "docs/UNINSTALL.md", "helm --kube-context c1 uninstall coastguard"},
	{"helm", "docs/UNINSTALL.md", "get secret coastguard-signing-key -o yaml"},
	{"helm", "docs/UNINSTALL.md", "delete coastguardclusters --all"},
	{"kustomize", "docs/OPERATIONS.md", "create secret generic coastguard-gossip-key"},
	{"kustomize", "docs/OPERATIONS.md", "COASTGUARD_CLUSTER_ID=c1"}, // step 5's overlay, file=
	{"kustomize", "docs/OPERATIONS.md", "apply --server-side -k clusters/c1"},
	{"kustomize", "docs/OPERATIONS.md", "delete -k clusters/c3"},
	{"kustomize", "docs/UNINSTALL.md", "delete -k clusters/c1"},
	{"readme", "README.md", "render --input examples"},
	{"readme", "README.md", "apply -k examples/eu-1"},
}

var (
	gvrCRD  = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	gvrMCNP = schema.GroupVersionResource{Group: "networking.submariner.io", Version: "v1", Resource: "multiclusternetworkpolicies"}
	gvrSubm = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "clusters"}
)

const mcnpCRD = "multiclusternetworkpolicies.networking.submariner.io"

// submarinerStandIn installs what a Submariner cluster set with Lighthouse
// provides that coastguard's manifests use: the CRDs (ServiceExport,
// Submariner's Cluster, ClusterProperty, and the Prometheus Operator's
// for monitoring) and Submariner's namespace.
func submarinerStandIn(t *testing.T, ctx context.Context, env *harness.Env) {
	require.NoError(t, env.InstallCRDs(ctx, filepath.Join("testdata", "crds")))
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, submarinerNS, nil))
	}
}

var docScenarios = []docScenario{
	{
		// docs/OPERATIONS.md steps 4 and "Or with Helm" in every cluster,
		// step 8's kubectl coastguard status with the daemons run from the
		// installed DaemonSets, a policy, a signing-key rotation, and
		// docs/UNINSTALL.md for Helm in c1, down to removing everything.
		name: "helm", clusters: []string{"c1", "c2", "c3"}, controllerManager: true,
		setup: submarinerStandIn,
		never: []string{"MISSING"}, // the chart's NOTES: the documented steps leave nothing missing
		hooks: func(env *harness.Env, tools docToolPaths) []docHook {
			daemons := map[string]*harness.Daemon{}
			return []docHook{
				{before: "kubectl coastguard status", run: func(t *testing.T, ctx context.Context) {
					// The kubelet's part after the install: each cluster's pod
					// from its installed DaemonSet, ConfigMap, Secrets and
					// ServiceAccount (podFromTemplate), seeds standing in for
					// Lighthouse DNS.
					for _, c := range env.Clusters {
						ds, err := c.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
						require.NoError(t, err)
						var seeds []string
						for _, o := range env.Clusters {
							if o != c {
								seeds = append(seeds, o.GossipIP+":7946")
							}
						}
						daemons[c.Name] = podFromTemplate(t, ctx, env, c, ds, tools.coastguardd, "coastguard-"+c.Name+"-0", seeds)
					}
				}},
				{before: "helm --kube-context c1 uninstall", run: func(t *testing.T, ctx context.Context) {
					require.NoError(t, daemons["c1"].Stop(), "c1's pod goes with its DaemonSet")
					// What "Removing everything" will remove exists.
					nps, err := env.Clusters[0].ListNetworkPolicies(ctx, "shop", "app.kubernetes.io/managed-by=coastguard")
					require.NoError(t, err)
					assert.NotEmpty(t, nps, "c1 enforced the example MCNP")
				}},
				{before: "delete coastguardclusters --all", run: func(t *testing.T, ctx context.Context) {
					helmUninstalled(t, ctx, env)
				}},
			}
		},
		check: func(t *testing.T, ctx context.Context, env *harness.Env, work string) {
			// After UNINSTALL.md's "Removing everything" in c1.
			c1 := env.Clusters[0]
			_, err := c1.Client.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "namespace %s removed: %v", deployNS, err)
			_, err = c1.Dynamic.Resource(gvrCRD).Get(ctx, mcnpCRD, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "CRDs removed: %v", err)
			nps, err := c1.ListNetworkPolicies(ctx, "", "app.kubernetes.io/managed-by=coastguard")
			require.NoError(t, err)
			assert.Empty(t, nps, "generated NetworkPolicies removed")
			assert.FileExists(t, filepath.Join(work, "coastguard-signing-key.yaml"), "the signing key backed up before")
		},
	},
	{
		// docs/OPERATIONS.md steps 4 to 6 with the step-5 overlay in every
		// cluster, a policy, "Uninstall straight away" in c3, and
		// docs/UNINSTALL.md for kustomize in c1.
		name: "kustomize", clusters: []string{"c1", "c2", "c3"}, controllerManager: true,
		setup: submarinerStandIn,
		check: func(t *testing.T, ctx context.Context, env *harness.Env, work string) {
			c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]
			_, err := c1.Client.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "delete -k of the overlay deletes the namespace (UNINSTALL.md): %v", err)
			_, err = c1.Dynamic.Resource(gvrCRD).Get(ctx, mcnpCRD, metav1.GetOptions{})
			assert.NoError(t, err, "the overlays do not contain the CRDs: they stay")
			_, err = c3.Dynamic.Resource(gvrCRD).Get(ctx, mcnpCRD, metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "c3 was removed with its CRDs: %v", err)
			ds, err := c2.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
			require.NoError(t, err, "c2 keeps its install")
			assert.Equal(t, "registry.example.com/coastguard/coastguardd:v0.1.0", ds.Spec.Template.Spec.Containers[0].Image)
			var cmName string
			for _, from := range ds.Spec.Template.Spec.Containers[0].EnvFrom {
				if from.ConfigMapRef != nil {
					cmName = from.ConfigMapRef.Name
				}
			}
			cm, err := c2.Client.CoreV1().ConfigMaps(deployNS).Get(ctx, cmName, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, "c2", cm.Data["COASTGUARD_CLUSTER_ID"], "each cluster's overlay sets its own ID")
			checkExamplesApplied(t, ctx, c1, "backend-allow-frontends", "backend-to-payments")
		},
	},
	{
		// README.md: the offline translation of examples/, and the
		// examples applied to a cluster with the CRDs installed.
		name: "readme", clusters: []string{"c1"},
		setup: func(t *testing.T, ctx context.Context, env *harness.Env) {
			require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
		},
		check: func(t *testing.T, ctx context.Context, env *harness.Env, _ string) {
			checkExamplesApplied(t, ctx, env.Clusters[0], "backend-allow-frontends", "backend-to-payments")
		},
	},
}

// helmUninstalled checks what UNINSTALL.md says `helm uninstall` (in c1)
// leaves: the namespace, both Secrets (the signing key rotated by
// OPERATIONS.md), the CRDs and the example's MCNPs; the release's
// DaemonSet is gone, and c2 keeps its own install.
func helmUninstalled(t *testing.T, ctx context.Context, env *harness.Env) {
	c1, c2 := env.Clusters[0], env.Clusters[1]
	_, err := c1.Client.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{})
	require.NoError(t, err, "helm uninstall leaves the namespace (UNINSTALL.md)")
	for _, s := range []string{"coastguard-gossip-key", "coastguard-signing-key"} {
		_, err := c1.Client.CoreV1().Secrets(deployNS).Get(ctx, s, metav1.GetOptions{})
		require.NoError(t, err, "helm uninstall keeps Secret %s (UNINSTALL.md)", s)
	}
	sk, err := c1.Client.CoreV1().Secrets(deployNS).Get(ctx, "coastguard-signing-key", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, string(sk.Data["signing.key"]), "endorsement", "the rotated key carries the old key's endorsement")
	assert.NotContains(t, sk.Annotations, "kubectl.kubernetes.io/last-applied-configuration", "no copy of the key in an annotation")
	_, err = c1.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the release's DaemonSet is gone from c1: %v", err)
	_, err = c1.Dynamic.Resource(gvrCRD).Get(ctx, mcnpCRD, metav1.GetOptions{})
	assert.NoError(t, err, "Helm never deletes crds/")
	checkExamplesApplied(t, ctx, c1, "backend-allow-frontends", "backend-to-payments")
	ds, err := c2.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
	require.NoError(t, err, "c2 keeps its install")
	assert.Equal(t, "registry.example.com/coastguard/coastguardd:v0.1.0", ds.Spec.Template.Spec.Containers[0].Image)
	cm, err := c2.Client.CoreV1().ConfigMaps(deployNS).Get(ctx, "coastguard-config", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "c2", cm.Data["COASTGUARD_CLUSTER_ID"], "each cluster installed with its own ID")
}

// checkExamplesApplied: examples/eu-1 was applied to c (kubectl apply -k):
// its MCNPs exist, and none of the synthetic inventory was created.
func checkExamplesApplied(t *testing.T, ctx context.Context, c *harness.Cluster, mcnps ...string) {
	t.Helper()
	for _, n := range mcnps {
		_, err := c.Dynamic.Resource(gvrMCNP).Namespace("shop").Get(ctx, n, metav1.GetOptions{})
		assert.NoError(t, err, "MCNP shop/%s applied from examples/eu-1", n)
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "no synthetic pod was applied")
	cl, err := c.Dynamic.Resource(gvrSubm).Namespace("").List(ctx, metav1.ListOptions{})
	if err == nil {
		assert.Empty(t, cl.Items, "no synthetic Submariner Cluster object was applied")
	}
}

// TestDocs runs the runnable blocks of the docs (see docMarker) per
// scenario, after checking that the required ones are marked and that
// examples/ applies only what belongs in a real cluster.
func TestDocs(t *testing.T) {
	known := map[string]bool{}
	for _, s := range docScenarios {
		known[s.name] = true
	}
	var blocks []docBlock
	for _, f := range docFiles {
		b, unmarked, err := parseRunnable(repoRoot, f, known)
		require.NoError(t, err)
		blocks = append(blocks, b...)
		for _, l := range unmarked {
			t.Logf("not run (unmarked): %s:%d", f, l)
		}
	}
	for _, r := range docRequired {
		found := slices.ContainsFunc(blocks, func(b docBlock) bool {
			return b.file == r.file && slices.Contains(b.scenarios, r.scenario) && strings.Contains(b.body, r.contains)
		})
		require.True(t, found, "%s: no block marked runnable for scenario %s contains %q; a marker was lost", r.file, r.scenario, r.contains)
	}

	t.Run("examples", testExamplesKustomize)
	// The binaries build while the scenarios' clusters start.
	tools := startDocTools()
	for _, s := range docScenarios {
		var mine []docBlock
		for _, b := range blocks {
			if slices.Contains(b.scenarios, s.name) {
				mine = append(mine, b)
			}
		}
		t.Run(s.name, func(t *testing.T) {
			t.Parallel() // each on its own clusters
			runDocScenario(t, s, mine, tools)
		})
	}
}

// docToolPaths are the binaries the blocks find on PATH, and the Go
// environment they keep.
type docToolPaths struct {
	kubectl, coastguardd, plugin, helm string
	goenv                              []string
}

// docToolsFuture delivers docToolPaths once built.
type docToolsFuture struct {
	done  chan struct{}
	tools docToolPaths
	err   error
	took  time.Duration
}

// startDocTools builds or finds the binaries, once for every scenario, in
// the background.
func startDocTools() *docToolsFuture {
	f := &docToolsFuture{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		start := time.Now()
		f.tools, f.err = docTools()
		f.took = time.Since(start)
	}()
	return f
}

func (f *docToolsFuture) get(t *testing.T) docToolPaths {
	t.Helper()
	<-f.done
	require.NoError(t, f.err)
	t.Logf("tools built in %s", f.took.Round(time.Millisecond))
	return f.tools
}

func docTools() (docToolPaths, error) {
	var tp docToolPaths
	var err error
	if tp.kubectl, err = harness.Binary("", harness.BinKubectl); err != nil {
		return tp, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	helm := make(chan error, 1)
	go func() { // go tool's own build, beside harness.Build's
		var err error
		tp.helm, err = pinnedHelm(ctx)
		helm <- err
	}()
	if tp.coastguardd, err = harness.Build("./cmd/coastguardd"); err != nil {
		return tp, err
	}
	if tp.plugin, err = harness.Build("./cmd/kubectl-coastguard"); err != nil {
		return tp, err
	}
	if err := <-helm; err != nil {
		return tp, err
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		return tp, fmt.Errorf("go env: %w", err)
	}
	v := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(v) != 3 {
		return tp, fmt.Errorf("go env: %q", out)
	}
	// The user's Go caches, not a cold one under the blocks' HOME.
	tp.goenv = []string{"GOCACHE=" + v[0], "GOMODCACHE=" + v[1], "GOPATH=" + v[2]}
	return tp, nil
}

// testExamplesKustomize: `kubectl kustomize examples/<cluster>` (what
// `kubectl apply -k` applies) holds only Namespaces and MCNPs: no Pod, no
// Submariner Cluster, nothing else of the synthetic inventory; it holds
// every MCNP of the directory, and the namespaces they live in.
func testExamplesKustomize(t *testing.T) {
	kubectl, err := harness.Binary("", harness.BinKubectl)
	require.NoError(t, err)
	dirs, err := os.ReadDir(repoPath("examples"))
	require.NoError(t, err)
	n := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		n++
		dir := repoPath("examples", d.Name())
		out, err := exec.CommandContext(t.Context(), kubectl, "kustomize", dir).Output()
		require.NoError(t, err, "kubectl kustomize examples/%s: %s", d.Name(), stderrOf(err))
		got := map[string]bool{} // kind/namespace/name
		namespaces := map[string]bool{}
		for _, o := range decodeObjects(t, out) {
			id := o.Kind + "/" + o.Namespace + "/" + o.Name
			switch {
			case o.Kind == "Pod":
				t.Errorf("examples/%s: kubectl apply -k would create synthetic Pod %s", d.Name(), id)
			case o.Kind == "Cluster" && strings.HasPrefix(o.APIVersion, "submariner.io/"):
				t.Errorf("examples/%s: kubectl apply -k would create Submariner Cluster %s, a trusted-CIDR source", d.Name(), o.Name)
			case o.Kind == "Namespace" && o.APIVersion == "v1":
				if slices.Contains([]string{"default", "kube-system", "kube-public", "kube-node-lease"}, o.Name) {
					t.Errorf("examples/%s: kubectl apply -k would apply system namespace %s (and delete -k delete it)", d.Name(), o.Name)
				}
				namespaces[o.Name] = true
			case o.Kind == "MultiClusterNetworkPolicy" && o.APIVersion == "networking.submariner.io/v1":
			default:
				t.Errorf("examples/%s: kubectl apply -k would apply %s (%s); only Namespaces and MCNPs belong there", d.Name(), id, o.APIVersion)
			}
			got[id] = true
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		require.NoError(t, err)
		var want []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, o := range decodeObjects(t, b) {
				if o.Kind == "MultiClusterNetworkPolicy" {
					want = append(want, o.Kind+"/"+o.Namespace+"/"+o.Name)
					assert.True(t, namespaces[o.Namespace], "examples/%s: MCNP %s/%s's namespace is applied with it", d.Name(), o.Namespace, o.Name)
				}
			}
		}
		require.NotEmpty(t, want, "examples/%s has MCNPs", d.Name())
		for _, w := range want {
			assert.True(t, got[w], "examples/%s: %s is missing from kustomization.yaml", d.Name(), w)
		}
	}
	require.GreaterOrEqual(t, n, 3, "examples/ has its cluster directories")
}

type docObject struct {
	metav1.TypeMeta
	metav1.ObjectMeta `json:"metadata"`
}

func decodeObjects(t *testing.T, y []byte) []docObject {
	t.Helper()
	var out []docObject
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		var o docObject
		require.NoError(t, json.Unmarshal(raw, &o))
		if o.Kind != "" && !strings.HasPrefix(o.APIVersion, "kustomize.config.k8s.io/") {
			out = append(out, o)
		}
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// runDocScenario starts the scenario's clusters, prepares the work
// directory and runs the blocks in order.
func runDocScenario(t *testing.T, s docScenario, blocks []docBlock, tools *docToolsFuture) {
	require.NotEmpty(t, blocks, "scenario %s has no marked block", s.name)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	opts := harness.Options{Names: s.clusters}
	if s.controllerManager {
		opts.ExtraControllers = []string{"daemonset-controller"}
	}
	start := time.Now()
	env := harness.Start(t, opts)
	if s.setup != nil {
		s.setup(t, ctx, env)
	}
	t.Logf("clusters %s ready in %s", strings.Join(s.clusters, ","), time.Since(start).Round(time.Millisecond))
	work, environ := docWorkdir(t, env, tools.get(t))
	var hooks []docHook
	if s.hooks != nil {
		hooks = s.hooks(env, tools.get(t))
	}
	ran := make([]bool, len(hooks))
	run := func(b docBlock, cluster string) {
		where, out := runDocBlock(t, ctx, work, environ, b, cluster)
		for _, n := range s.never {
			assert.NotContains(t, out, n, "%s: output", where)
		}
	}
	for _, b := range blocks {
		for i, h := range hooks {
			if !ran[i] && strings.Contains(b.body, h.before) {
				ran[i] = true
				start := time.Now()
				h.run(t, ctx)
				t.Logf("hook before %q: done in %s", h.before, time.Since(start).Round(time.Millisecond))
			}
		}
		if !b.each {
			run(b, "")
			continue
		}
		for _, c := range env.Clusters {
			run(b, c.Name)
		}
	}
	for i, h := range hooks {
		assert.True(t, ran[i], "no block of scenario %s contains %q any more: update its hook", s.name, h.before)
	}
	if s.check != nil {
		s.check(t, ctx, env, work)
	}
	// Secrets the docs create from files and shred afterwards.
	for _, f := range []string{"keyring", "signing.key", "old.key", "new.key"} {
		assert.NoFileExists(t, filepath.Join(work, f), "the docs remove key material they wrote")
	}
}

// docWorkdir makes the directory the blocks run in (the repository as
// ./coastguard) and their environment.
func docWorkdir(t *testing.T, env *harness.Env, tools docToolPaths) (string, []string) {
	t.Helper()
	work := t.TempDir()
	require.NoError(t, os.Symlink(repoRoot, filepath.Join(work, "coastguard")))
	bin := filepath.Join(work, ".bin")
	home := filepath.Join(work, ".home")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.MkdirAll(home, 0o700))
	for name, p := range map[string]string{"kubectl": tools.kubectl, "coastguardd": tools.coastguardd, "kubectl-coastguard": tools.plugin} {
		require.NoError(t, os.Symlink(p, filepath.Join(bin, name)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(bin, "helm"),
		[]byte("#!/bin/sh\n# the helm pinned in tools/go.mod\nexec '"+tools.helm+"' \"$@\"\n"), 0o755))

	var kubeconfigs []string
	for _, c := range env.Clusters {
		kubeconfigs = append(kubeconfigs, c.Kubeconfig) // contexts named after the clusters
	}
	environ := append([]string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"KUBECONFIG=" + strings.Join(kubeconfigs, string(os.PathListSeparator)),
		"LANG=C.UTF-8",
	}, tools.goenv...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH", k == "HOME", k == "KUBECONFIG", k == "GOCACHE", k == "GOMODCACHE", k == "GOPATH", k == "LANG", k == "GOFLAGS",
			strings.HasPrefix(k, "COASTGUARD_"), strings.HasPrefix(k, "HELM_"), strings.HasPrefix(k, "KUBERNETES_"):
		default:
			environ = append(environ, kv)
		}
	}
	return work, environ
}

// pinnedHelm returns the path of the helm binary that
// `go tool -modfile=tools/go.mod helm` runs (built into the Go cache).
func pinnedHelm(ctx context.Context) (string, error) {
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=" + repoPath("tools", "go.mod")}, args...)...)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go tool %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run("helm", "version", "--short"); err != nil { // builds it if needed
		return "", err
	}
	p, err := run("-n", "helm")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("pinned helm: %w", err)
	}
	return p, nil
}

var wordC1 = regexp.MustCompile(`\bc1\b`)

// runDocBlock writes or runs one block; cluster is set for each-cluster
// blocks, whose c1 becomes cluster.
func runDocBlock(t *testing.T, ctx context.Context, work string, environ []string, b docBlock, cluster string) (where, output string) {
	t.Helper()
	body, path := b.body, b.writeTo
	where = b.where()
	if cluster != "" {
		body = wordC1.ReplaceAllString(body, cluster)
		path = wordC1.ReplaceAllString(path, cluster)
		where += " [" + cluster + "]"
	}
	if b.writeTo != "" {
		full := filepath.Join(work, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(body), 0o644), where)
		t.Logf("%s: wrote %s", where, path)
		return where, ""
	}
	script := filepath.Join(work, ".scripts", strings.NewReplacer("/", "_", ".", "_", ":", "_", " ", "", "[", "_", "]", "").Replace(where)+".sh")
	require.NoError(t, os.MkdirAll(filepath.Dir(script), 0o755))
	require.NoError(t, os.WriteFile(script, []byte(body), 0o644))
	bctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(bctx, "bash", "-euo", "pipefail", script)
	cmd.Dir = filepath.Join(work, b.dir)
	cmd.Env = environ
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		t.Fatalf("%s: the documented block failed (%v after %s)\n--- block\n%s--- output\n%s", where, err, time.Since(start).Round(time.Millisecond), body, out.String())
	}
	t.Logf("%s: ok in %s\n%s", where, time.Since(start).Round(time.Millisecond), indentLines(out.String()))
	return where, out.String()
}

// indentLines indents a block's output for the log, keeping its first
// lines (helm template prints hundreds).
func indentLines(s string) string {
	const keep = 25
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return "    (no output)"
	}
	if n := len(lines); n > keep {
		lines = append(lines[:keep], fmt.Sprintf("(%d more lines)", n-keep))
	}
	return "    " + strings.Join(lines, "\n    ")
}

// TestDocsMarkers checks the marker parser on a document with every case:
// an indented shell block in a list item, a file= block, each-cluster,
// unmarked blocks, and the errors that keep a marker from being lost
// silently (a marker followed by prose, an unknown scenario or option, a
// marked YAML block without file=).
func TestDocsMarkers(t *testing.T) {
	known := map[string]bool{"a": true, "b": true}
	dir := t.TempDir()
	write := func(doc string) string {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "doc.md"), []byte(doc), 0o644))
		return "doc.md"
	}
	good := "# t\n\n```sh\nunmarked\n```\n\n1. **Step.**\n\n   <!-- runnable: a,b each-cluster -->\n\n   ```sh\n   kubectl --context c1 get ns\n     indented more\n   ```\n" +
		"<!--runnable: b file=clusters/c1/k.yaml dir=coastguard-->\n```yaml\nkind: X\n```\n```bash\nalso unmarked\n```\n"
	blocks, unmarked, err := parseRunnable(dir, write(good), known)
	require.NoError(t, err)
	assert.Equal(t, []int{3, 19}, unmarked)
	require.Len(t, blocks, 2)
	assert.Equal(t, docBlock{file: "doc.md", line: 11, lang: "sh", scenarios: []string{"a", "b"}, each: true,
		body: "kubectl --context c1 get ns\n  indented more\n"}, blocks[0])
	assert.Equal(t, docBlock{file: "doc.md", line: 16, lang: "yaml", scenarios: []string{"b"}, writeTo: "clusters/c1/k.yaml",
		dir: "coastguard", body: "kind: X\n"}, blocks[1])

	for doc, want := range map[string]string{
		"<!-- runnable: a -->\nprose\n```sh\nx\n```\n":   "doc.md:1: runnable marker not followed by a fenced block",
		"<!-- runnable: a -->\n":                         "doc.md:1: runnable marker not followed by a fenced block",
		"<!-- runnable: c -->\n```sh\nx\n```\n":          `doc.md:1: unknown scenario "c"`,
		"<!-- runnable: a when=now -->\n```sh\nx\n```\n": `doc.md:1: unknown marker option "when=now"`,
		"<!-- runnable: -->\n```sh\nx\n```\n":            "doc.md:1: runnable marker names no scenario",
		"<!-- runnable: a -->\n```yaml\nx: 1\n```\n":     `doc.md:2: marked block is "yaml", not sh or bash, and has no file=`,
		"<!-- runnable: a -->\n```sh\nx\n":               "doc.md:2: unterminated fenced block",
	} {
		_, _, err := parseRunnable(dir, write(doc), known)
		require.Error(t, err, doc)
		assert.Contains(t, err.Error(), want, doc)
	}
}
