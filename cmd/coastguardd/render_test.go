package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*-golden from the current output")

// TestRenderExamples renders examples/ and compares with the reviewed
// golden output in testdata/examples-golden.
func TestRenderExamples(t *testing.T) {
	out := t.TempDir()
	var log bytes.Buffer
	require.NoError(t, render("../../examples", out, &log))
	golden := "testdata/examples-golden"
	if *updateGolden {
		require.NoError(t, os.RemoveAll(golden))
		require.NoError(t, os.CopyFS(golden, os.DirFS(out)))
	}
	for _, c := range []string{"eu-1", "eu-2", "us-1"} {
		got, err := os.ReadFile(filepath.Join(out, c, "networkpolicies.yaml"))
		require.NoError(t, err)
		want, err := os.ReadFile(filepath.Join(golden, c, "networkpolicies.yaml"))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "cluster %s (run go test ./cmd/coastguardd -run TestRenderExamples -update, then review)", c)
		// Every document must decode as a NetworkPolicy.
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(got), 4096)
		for {
			var np networkingv1.NetworkPolicy
			if err := dec.Decode(&np); err != nil {
				break
			}
			require.Equal(t, "coastguard", np.Labels["app.kubernetes.io/managed-by"])
		}
	}
	require.Contains(t, log.String(), "us-1: 2 NetworkPolicies")
	require.NotContains(t, log.String(), "warning", "examples/ (with its kustomization.yaml files) reads without warnings")
	// Rendering twice is byte-identical.
	out2 := t.TempDir()
	require.NoError(t, render("../../examples", out2, &bytes.Buffer{}))
	for _, c := range []string{"eu-1", "eu-2", "us-1"} {
		a, _ := os.ReadFile(filepath.Join(out, c, "networkpolicies.yaml"))
		b, _ := os.ReadFile(filepath.Join(out2, c, "networkpolicies.yaml"))
		require.Equal(t, a, b)
	}
}

// writeTree creates files under a temp dir from path -> content.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(c), 0o644))
	}
	return dir
}

const nsShop = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n"

func TestRenderEmptyAndJSON(t *testing.T) {
	in := writeTree(t, map[string]string{
		"a/ns.json": `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"shop","labels":{"app":"x"}},"status":{"phase":"Running","podIPs":[{"ip":"fd00::1"}]}}`,
		"b/ns.yaml":   nsShop,
		"b/pol.yaml":  "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: p, namespace: shop}\nspec:\n  podSelector: {}\n  ingress: [{from: [{clusterSelector: {}, podSelector: {matchLabels: {app: x}}}]}]\n",
		"c/notes.txt": "ignored",
		"c/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		"c/list.yaml": `apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: shop}}
- apiVersion: v1
  kind: Pod
  metadata: {name: p, namespace: shop, labels: {app: x}}
  status: {phase: Running, podIP: 10.9.0.1}
`,
		"top.yaml": nsShop,
	})
	out := t.TempDir()
	var log bytes.Buffer
	require.NoError(t, render(in, out, &log))
	a, err := os.ReadFile(filepath.Join(out, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.Empty(t, a, "no MCNP enforced in a: empty file")
	c, err := os.ReadFile(filepath.Join(out, "c", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.Empty(t, c)
	b, err := os.ReadFile(filepath.Join(out, "b", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.NotContains(t, string(b), "cidr:", "no CIDRs known for a and c: their pods are left out")
	require.Contains(t, log.String(), "b: 1 address(es) of cluster a never allowed (cidrs_unknown), e.g. shop/p fd00::1/128")
	require.Contains(t, log.String(), "b: MultiClusterNetworkPolicy b/shop/p degraded: PodCIDRsUnknown: a,c")

	// With the operator's CIDRs (--cluster-cidrs) they are allowed.
	nets, err := enforce.ParseClusterCIDRs([]string{"a=fd00::/64", "c=10.9.0.0/16"})
	require.NoError(t, err)
	out = t.TempDir()
	require.NoError(t, renderWith(in, out, &log, enforce.GlobalnetCoarse, nil, nets))
	b, err = os.ReadFile(filepath.Join(out, "b", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(b), "cidr: fd00::1/128")
	require.Contains(t, string(b), "cidr: 10.9.0.1/32", "pods from a v1 List are read")
	require.Contains(t, log.String(), "kind ConfigMap (v1) is not used by coastguard, ignored")
	require.Contains(t, log.String(), "notes.txt: not a .yaml")
	require.Contains(t, log.String(), "top.yaml: files at the top level are ignored")
}

// TestRenderSkipsKustomizations: a cluster directory may also be a
// kustomization (kubectl apply -k examples/<cluster>); render skips the
// kustomization file, under any of kustomize's names or as an object of
// kustomize.config.k8s.io under another name, silently, while a truly
// unknown kind still warns.
func TestRenderSkipsKustomizations(t *testing.T) {
	const k = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [ns.yaml]\n"
	in := writeTree(t, map[string]string{
		"a/ns.yaml":            nsShop,
		"a/kustomization.yaml": k,
		"b/ns.yaml":            nsShop,
		"b/kustomization.yml":  "resources: [ns.yaml]\n", // no kind: kustomize accepts it, render would not
		"c/ns.yaml":            nsShop,
		"c/Kustomization":      "resources:\n- ns.yaml\n",
		"c/sub/component.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n",
		"c/other.yaml":         "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n",
		"c/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
	})
	var log bytes.Buffer
	require.NoError(t, render(in, t.TempDir(), &log))
	for _, name := range []string{"kustomization.y", "c/Kustomization", "other.yaml", "component.yaml", "Component"} {
		require.NotContains(t, log.String(), name, "kustomize files are skipped silently")
	}
	require.Contains(t, log.String(), "kind ConfigMap (v1) is not used by coastguard, ignored")
}

func TestRenderSkipsMissingNamespace(t *testing.T) {
	in := writeTree(t, map[string]string{
		"a/ns.yaml":  nsShop,
		"a/pol.yaml": "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: p, namespace: shop}\nspec: {clusterSelector: {}, podSelector: {}}\n",
		"b/ns.yaml":  "apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n",
	})
	out := t.TempDir()
	var log bytes.Buffer
	require.NoError(t, render(in, out, &log))
	require.Contains(t, log.String(), `b: MultiClusterNetworkPolicy a/shop/p skipped: no namespace "shop"`)
	b, _ := os.ReadFile(filepath.Join(out, "b", "networkpolicies.yaml"))
	require.Empty(t, b)
}

// render applies the daemon's default guard rails: an MCNP of another
// cluster is not enforced in a protected namespace (kube-system), the
// origin's own is.
func TestRenderAppliesGuardRails(t *testing.T) {
	nsKS := "apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system}\n"
	in := writeTree(t, map[string]string{
		"a/ns.yaml":  nsKS,
		"a/pol.yaml": "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: deny, namespace: kube-system}\nspec: {clusterSelector: {}, podSelector: {}}\n",
		"b/ns.yaml":  nsKS,
	})
	out := t.TempDir()
	var log bytes.Buffer
	require.NoError(t, render(in, out, &log))
	a, err := os.ReadFile(filepath.Join(out, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(a), "namespace: kube-system", "the origin's own MCNP is enforced in its protected namespace")
	b, err := os.ReadFile(filepath.Join(out, "b", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.Empty(t, b, "another cluster's MCNP is not enforced in a protected namespace")
	require.Contains(t, log.String(), "b: MultiClusterNetworkPolicy a/kube-system/deny degraded: namespace kube-system is protected here")
}

func TestRenderInvalidInput(t *testing.T) {
	mcnp := func(spec string) string {
		return "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: bad, namespace: shop}\nspec:\n" + spec
	}
	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"bad yaml", map[string]string{"a/x.yaml": nsShop + "---\nkind: [unclosed\n"}, []string{"a/x.yaml: document 2"}},
		{"invalid mcnp names field", map[string]string{"a/p.yaml": mcnp("  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}]\n")},
			[]string{"a/p.yaml: document 1: MultiClusterNetworkPolicy shop/bad", "spec.ingress[0].from[0]", "ipBlock cannot be combined"}},
		{"unknown mcnp field", map[string]string{"a/p.yaml": mcnp("  podSelector: {}\n  policyTypes:\n    ingress: []\n")},
			[]string{"MultiClusterNetworkPolicy", "a/p.yaml: document 1"}},
		{"proposal draft string clusterSelector", map[string]string{"a/p.yaml": mcnp("  clusterSelector: cluster1\n  podSelector: {}\n")},
			[]string{"a/p.yaml: document 1: MultiClusterNetworkPolicy"}},
		{"duplicate pod", map[string]string{
			"a/1.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\n",
			"a/2.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\n"},
			[]string{"a/2.yaml: document 1: Pod shop/p: duplicate object in cluster a (first defined at", "a/1.yaml"}},
		{"duplicate mcnp", map[string]string{"a/p.yaml": mcnp("  podSelector: {}\n") + "---\n" + mcnp("  podSelector: {}\n")},
			[]string{"document 2: MultiClusterNetworkPolicy shop/bad: duplicate"}},
		{"cluster id contradiction", map[string]string{"a/c.yaml": "apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata: {name: cluster.clusterset.k8s.io}\nspec: {value: b}\n"},
			[]string{"ClusterProperty cluster.clusterset.k8s.io", "contradicts"}},
		{"bad property value", map[string]string{"a/c.yaml": "apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata: {name: region}\nspec: {value: 'eu west'}\n"},
			[]string{"ClusterProperty region", "spec.value"}},
		{"bad pod ip", map[string]string{"a/p.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {podIP: 10.0.0.300}\n"},
			[]string{"Pod default/p", "10.0.0.300"}},
		{"wrong apiVersion", map[string]string{"a/p.yaml": "apiVersion: networking.submariner.io/v2\nkind: MultiClusterNetworkPolicy\nmetadata: {name: x}\n"},
			[]string{"apiVersion \"networking.submariner.io/v2\" not supported"}},
		{"missing kind", map[string]string{"a/p.yaml": "metadata: {name: x}\n"}, []string{"missing kind"}},
		{"mcnp without spec (the daemon never replicates one)", map[string]string{"a/p.yaml": "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: nospec, namespace: shop}\n"},
			[]string{"a/p.yaml: document 1: MultiClusterNetworkPolicy shop/nospec", "has no spec"}},
		{"bad cluster dir", map[string]string{"Bad_Cluster/ns.yaml": nsShop}, []string{"Bad_Cluster: directory name is not a valid cluster ID"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := writeTree(t, tc.files)
			out := t.TempDir()
			err := render(in, out, &bytes.Buffer{})
			require.Error(t, err)
			msg := strings.ReplaceAll(err.Error(), in+string(filepath.Separator), "")
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
			entries, _ := os.ReadDir(out)
			require.Empty(t, entries, "nothing is written on invalid input")
		})
	}
}

func TestRunRenderExitCodes(t *testing.T) {
	rc, _, errOut := runCLI("render")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, `required flag(s) "input", "output" not set`)
	rc, _, _ = runCLI("render", "--input", "x")
	require.Equal(t, 2, rc)
	rc, _, errOut = runCLI("render", "--input", "x", "--output", t.TempDir(), "--globalnet-policy", "strict")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "--globalnet-policy")
	rc, _, errOut = runCLI("render", "--input", filepath.Join(t.TempDir(), "missing"), "--output", t.TempDir())
	require.Equal(t, 1, rc)
	require.Contains(t, errOut, "coastguardd render: ")
	in := writeTree(t, map[string]string{"a/ns.yaml": nsShop})
	out := t.TempDir()
	rc, _, errOut = runCLI("render", "--input", in, "--output", out, "--cluster-cidrs", "a=10.1.0.0/16,b=10.2.0.0/16", "--cluster-cidrs", "b:service=100.2.0.0/16")
	require.Equal(t, 0, rc, errOut)
	_, err := os.Stat(filepath.Join(out, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
}

func TestRenderRefusesCollisions(t *testing.T) {
	np := func(origin, part string) networkingv1.NetworkPolicy {
		n := networkingv1.NetworkPolicy{}
		n.Namespace, n.Name = "shop", "mcnp-x"
		n.Annotations = map[string]string{enforce.AnnotationOrigin: origin}
		if part != "" {
			n.Annotations[enforce.AnnotationPart] = part
		}
		return n
	}
	require.NoError(t, checkCollisions("eu-1", []networkingv1.NetworkPolicy{np("eu-1/shop/a", "")}))
	err := checkCollisions("eu-1", []networkingv1.NetworkPolicy{np("eu-1/shop/big", "2/2"), np("eu-1/shop/big.p2-3675f42a7e", "")})
	require.Error(t, err)
	require.Contains(t, err.Error(), "eu-1/shop/big (part 2/2)")
	require.Contains(t, err.Error(), "eu-1/shop/big.p2-3675f42a7e")
	require.Contains(t, err.Error(), "shop/mcnp-x")
}
