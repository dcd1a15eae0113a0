//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// helmKubeVersion is passed to helm: built as a Go tool it carries no
// -ldflags, and would otherwise assume Kubernetes v1.20.
const helmKubeVersion = "1.33.0"

// packagingClusterID is the cluster ID both installs are given: the chart
// requires one, and the kustomize side merges it into the ConfigMap as
// docs/OPERATIONS.md tells users to.
const packagingClusterID = "pkg-1"

// helmTemplate renders charts/coastguard with the helm pinned in
// tools/go.mod (no system helm), for cluster packagingClusterID.
func helmTemplate(t *testing.T, ctx context.Context, set ...string) string {
	t.Helper()
	args := []string{"tool", "-modfile=" + repoPath("tools", "go.mod"), "helm", "template", "coastguard", repoPath("charts", "coastguard"),
		"--namespace", deployNS, "--include-crds", "--kube-version", helmKubeVersion, "--set", "clusterID=" + packagingClusterID}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoPath()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helm template: %s", stderr.String())
	return string(out)
}

// kustomizeWith renders deploy/base (plus the CRD) with the given components,
// for cluster packagingClusterID (merged into the ConfigMap by a per-cluster
// kustomization, as docs/OPERATIONS.md describes).
func kustomizeWith(t *testing.T, ctx context.Context, c *harness.Cluster, withCRD bool, components ...string) string {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, repoPath("deploy"))
	require.NoError(t, err)
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + filepath.Join(rel, "base") + "\n"
	if len(components) > 0 {
		k += "components:\n"
		for _, comp := range components {
			k += "- " + filepath.Join(rel, "components", comp) + "\n"
		}
	}
	k += "configMapGenerator:\n- name: coastguard-config\n  namespace: " + deployNS + "\n  behavior: merge\n  literals:\n  - COASTGUARD_CLUSTER_ID=" + packagingClusterID + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
	out, _, err := c.Kubectl(ctx, "kustomize", dir)
	require.NoError(t, err)
	if withCRD {
		// As deploy/kustomization.yaml does: the CRDs next to the base,
		// outside the components' reach.
		for _, f := range []string{"networking.submariner.io_multiclusternetworkpolicies.yaml", "networking.submariner.io_coastguardclusters.yaml"} {
			crd, err := os.ReadFile(repoPath("deploy", "crds", f))
			require.NoError(t, err)
			out = string(crd) + "\n---\n" + out
		}
	}
	return out
}

var kustomizeHash = regexp.MustCompile(`^(coastguard-config)-[a-z0-9]{10}$`)

// normalize keys the objects by GVK, namespace and name and removes what
// only one tool adds: Helm's own labels, the config checksum annotation
// (kustomize rolls the pods by hashing the ConfigMap name instead) and that
// hash suffix.
func normalize(t *testing.T, rendered string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range decodeAll(t, []byte(rendered)) {
		labels := o.GetLabels()
		for _, l := range []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"} {
			delete(labels, l)
		}
		if len(labels) == 0 {
			labels = nil
		}
		o.SetLabels(labels)
		if m := kustomizeHash.FindStringSubmatch(o.GetName()); m != nil && o.GetKind() == "ConfigMap" {
			o.SetName(m[1])
		}
		if o.GetKind() == "DaemonSet" {
			unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations", "checksum/config")
			if a, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "metadata", "annotations"); ok && len(a) == 0 {
				unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations")
			}
			ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range ctrs {
				for _, ef := range c.(map[string]any)["envFrom"].([]any) {
					ref := ef.(map[string]any)["configMapRef"].(map[string]any)
					if m := kustomizeHash.FindStringSubmatch(ref["name"].(string)); m != nil {
						ref["name"] = m[1]
					}
				}
			}
			require.NoError(t, unstructured.SetNestedSlice(o.Object, ctrs, "spec", "template", "spec", "containers"))
		}
		// Round-trip through JSON so both sides hold the same Go types.
		b, err := json.Marshal(o.Object)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		key := o.GetAPIVersion() + "/" + o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		_, dup := out[key]
		require.False(t, dup, "duplicate object %s", key)
		out[key] = m
	}
	return out
}

// requireEquivalent compares the two renderings. The kustomize install
// owns its Namespace (with the Pod Security labels); the chart never renders
// one (helm/helm#9966: a chart that templates its release namespace fails
// both with and without --create-namespace), so that one object is compared
// only on the kustomize side's labels, in TestDeployManifests.
func requireEquivalent(t *testing.T, kustomize, helm string) {
	t.Helper()
	k, h := normalize(t, kustomize), normalize(t, helm)
	nsKey := "v1/Namespace /" + deployNS
	require.Contains(t, k, nsKey, "the kustomize install creates the namespace")
	delete(k, nsKey)
	for key := range h {
		require.NotContains(t, key, "/Namespace ", "the chart must not render a Namespace")
	}
	var kk, hk []string
	for key := range k {
		kk = append(kk, key)
	}
	for key := range h {
		hk = append(hk, key)
	}
	require.ElementsMatch(t, kk, hk, "kustomize and Helm render the same objects")
	for key := range k {
		assert.Equal(t, k[key], h[key], "object %s differs between kustomize and Helm", key)
	}
}

// TestPackaging checks the install artefacts against a real apiserver with
// the real kubectl: the kustomize install and the Helm chart (helm from
// tools/go.mod) both pass server-side dry-run and render equivalent objects;
// the CRD's category leaves `kubectl get submariner` to Submariner; bad input
// is rejected at apply time naming the field; the aggregated roles give
// "view" read access and, opt-in, "edit" write access.
func TestPackaging(t *testing.T) {
	ctx := t.Context()
	env := harness.Start(t, harness.Options{Names: []string{"pkg"}, ControllerManager: true}) // RBAC aggregation
	c := env.Clusters[0]
	require.NoError(t, c.InstallCRDs(ctx, filepath.Join("testdata", "crds")))

	kustomized, _, err := c.Kubectl(ctx, "kustomize", repoPath("deploy"))
	require.NoError(t, err)
	helmed := helmTemplate(t, ctx)

	t.Run("Helm defaults are the kustomize Submariner install (ServiceExport, metrics auth)", func(t *testing.T) {
		requireEquivalent(t, kustomizeWith(t, ctx, c, true, "submariner"), helmed)
	})
	t.Run("equivalent without the ServiceExport: deploy/ plus the cluster ID", func(t *testing.T) {
		requireEquivalent(t, kustomizeWith(t, ctx, c, true), helmTemplate(t, ctx, "submariner.serviceExport=false"))
	})
	t.Run("equivalent on Globalnet: the daemons advertise their GlobalIngressIP", func(t *testing.T) {
		requireEquivalent(t, kustomizeWith(t, ctx, c, true, "submariner", "globalnet"),
			helmTemplate(t, ctx, "submariner.advertiseGlobalIP=true"))
	})
	t.Run("equivalent with metrics auth off", func(t *testing.T) {
		requireEquivalent(t, kustomizeWith(t, ctx, c, true, "metrics-no-auth"),
			helmTemplate(t, ctx, "submariner.serviceExport=false", "metricsAuth.enabled=false"))
	})
	t.Run("equivalent with monitoring, ServiceExport, metrics auth, edit role, hostPath state", func(t *testing.T) {
		k := kustomizeWith(t, ctx, c, true, "submariner", "monitoring", "mcnp-edit", "hostpath-state", "self-protection")
		h := helmTemplate(t, ctx, "monitoring.enabled=true", "submariner.serviceExport=true", "metricsAuth.enabled=true",
			"rbac.aggregateEdit=true", "persistence.hostPath.enabled=true", "selfProtection.enabled=true")
		requireEquivalent(t, k, h)
	})

	t.Run("both pass kubectl apply --dry-run=server", func(t *testing.T) {
		// A dry run creates nothing, so the namespaced objects need the
		// namespace to exist, and nothing else.
		require.NoError(t, c.EnsureNamespace(ctx, deployNS, nil))
		for name, out := range map[string]string{"kustomize": kustomized, "helm": helmed} {
			stdout, stderr, err := c.KubectlInput(ctx, []byte(out), "apply", "--server-side", "--dry-run=server", "-f", "-")
			require.NoError(t, err, "%s: %s", name, stderr)
			assert.Contains(t, stdout, "daemonset.apps/coastguard serverside-applied (server dry run)", name)
		}
	})

	// Install for real from here on (kustomize, as the default install).
	_, stderr, err := c.KubectlInput(ctx, []byte(kustomized), "apply", "--server-side", "-f", "-")
	require.NoError(t, err, stderr)
	_, _, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/multiclusternetworkpolicies.networking.submariner.io")
	require.NoError(t, err)
	require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))

	t.Run("kubectl get submariner resolves to Submariner's resource", func(t *testing.T) {
		require.NoError(t, c.EnsureNamespace(ctx, "submariner-operator", nil))
		sub := `apiVersion: submariner.io/v1alpha1
kind: Submariner
metadata: {name: submariner, namespace: submariner-operator}
spec: {}
`
		_, stderr, err := c.KubectlInput(ctx, []byte(sub), "apply", "-f", "-")
		require.NoError(t, err, stderr)
		mcnp := "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: submariner, namespace: submariner-operator}\nspec: {podSelector: {}}\n"
		_, stderr, err = c.KubectlInput(ctx, []byte(mcnp), "apply", "-f", "-")
		require.NoError(t, err, stderr)

		out, stderr, err := c.Kubectl(ctx, "-n", "submariner-operator", "get", "submariner", "submariner", "-o", "name")
		require.NoError(t, err, stderr)
		assert.Equal(t, "submariner.submariner.io/submariner", strings.TrimSpace(out))
		out, _, err = c.Kubectl(ctx, "-n", "submariner-operator", "get", "submariner", "-o", "name")
		require.NoError(t, err)
		assert.NotContains(t, out, "multiclusternetworkpolicy", "MCNPs are not in Submariner's category")
		out, _, err = c.Kubectl(ctx, "get", "coastguard", "-A", "-o", "name")
		require.NoError(t, err)
		assert.Contains(t, out, "multiclusternetworkpolicy.networking.submariner.io/submariner", "MCNPs are in the coastguard category")

		out, _, err = c.Kubectl(ctx, "-n", "submariner-operator", "get", "mcnp", "submariner")
		require.NoError(t, err)
		assert.Regexp(t, `NAME\s+ENFORCED\s+READY\s+DEGRADED\s+AGE`, out)
		out, _, err = c.Kubectl(ctx, "-n", "submariner-operator", "get", "mcnp", "submariner", "-o", "wide")
		require.NoError(t, err)
		assert.Regexp(t, `NAME\s+ENFORCED\s+READY\s+DEGRADED\s+AGE\s+OBSERVED\s+CLUSTERS`, out)
	})

	t.Run("the self-protection MCNP is accepted", func(t *testing.T) {
		out := kustomizeWith(t, ctx, c, false, "self-protection")
		_, stderr, err := c.KubectlInput(ctx, []byte(out), "apply", "--server-side", "-f", "-")
		require.NoError(t, err, stderr)
		got, _, err := c.Kubectl(ctx, "-n", deployNS, "get", "mcnp", "coastguard-self-protection", "-o", "jsonpath={.spec.ingress[0].ports[*].port}")
		require.NoError(t, err)
		assert.Equal(t, "gossip-tcp gossip-udp", got)
	})

	t.Run("bad input is rejected by kubectl apply naming the field", func(t *testing.T) {
		for _, tc := range []struct {
			name, spec, field, why string
		}{
			{"bad-cidr", `
  podSelector: {}
  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]`, "spec.ingress[0].from[0].ipBlock.cidr", "must be of type cidr"},
			{"bad-operator", `
  podSelector: {matchExpressions: [{key: app, operator: Equals, values: [db]}]}`, "spec.podSelector.matchExpressions[0].operator", "Unsupported value"},
			{"bad-label", `
  podSelector: {}
  egress: [{to: [{clusterSelector: {matchLabels: {region: "eu west"}}}]}]`, "spec.egress[0].to[0].clusterSelector.matchLabels.region", "should match"},
			{"bad-label-key", `
  podSelector: {matchExpressions: [{key: "not a key", operator: Exists}]}`, "spec.podSelector.matchExpressions[0].key", "should match"},
			{"in-without-values", `
  podSelector: {matchExpressions: [{key: app, operator: In}]}`, "spec.podSelector.matchExpressions[0]", "values must be non-empty"},
			{"bad-named-port", `
  podSelector: {}
  ingress: [{ports: [{port: "Web_Port"}]}]`, "spec.ingress[0].ports[0].port", "should match"},
		} {
			doc := "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: " + tc.name + ", namespace: shop}\nspec:" + tc.spec + "\n"
			_, stderr, err := c.KubectlInput(ctx, []byte(doc), "apply", "-f", "-")
			require.Error(t, err, tc.name)
			assert.Contains(t, stderr, "is invalid", tc.name)
			assert.Contains(t, stderr, tc.field, tc.name)
			assert.Contains(t, stderr, tc.why, tc.name)
		}
		// The same shapes, valid, are accepted.
		good := `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: good, namespace: shop}
spec:
  podSelector: {matchExpressions: [{key: app.kubernetes.io/name, operator: In, values: [db]}]}
  ingress:
  - from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}]
    ports: [{port: web-8080}]
  egress: [{to: [{clusterSelector: {matchLabels: {region: eu-west}}}]}]
`
		_, stderr, err := c.KubectlInput(ctx, []byte(good), "apply", "-f", "-")
		require.NoError(t, err, stderr)
	})

	t.Run("view reads MCNPs; edit writes them only with the mcnp-edit component", func(t *testing.T) {
		for _, b := range []struct{ user, role string }{{"vera", "view"}, {"eddie", "edit"}} {
			_, err := c.Client.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: b.user},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: b.role},
				Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: b.user}},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		canI := func(user, verb string) string {
			out, _, _ := c.Kubectl(ctx, "auth", "can-i", verb, "multiclusternetworkpolicies.networking.submariner.io", "-n", "shop", "--as="+user)
			return strings.TrimSpace(out)
		}
		waitCanI := func(user, verb, want string) {
			t.Helper()
			// The aggregation controller fills view/edit asynchronously.
			require.NoError(t, harness.Eventually(ctx, 60*time.Second, 250*time.Millisecond, func(context.Context) (bool, error) {
				return canI(user, verb) == want, nil
			}), "can-i %s %s: want %s, got %s", user, verb, want, canI(user, verb))
		}
		waitCanI("vera", "list", "yes")
		waitCanI("eddie", "watch", "yes") // edit includes view
		assert.Equal(t, "no", canI("vera", "create"))
		assert.Equal(t, "no", canI("eddie", "create"), "writing MCNPs is opt-in")

		out := kustomizeWith(t, ctx, c, false, "mcnp-edit")
		_, stderr, err := c.KubectlInput(ctx, []byte(out), "apply", "--server-side", "-f", "-")
		require.NoError(t, err, stderr)
		waitCanI("eddie", "create", "yes")
		waitCanI("eddie", "delete", "yes")
		assert.Equal(t, "no", canI("vera", "create"))
		assert.Equal(t, "no", canI("vera", "delete"))
	})
}

// TestAdminSurface runs a real coastguardd with /metrics behind Kubernetes
// authn/authz, under the deploy/ RBAC (metrics auth is on by default), and
// checks the admin surface from the network's point of view.
//
// What "another pod address" means here: the harness gives each cluster's
// daemons a loopback alias (127.0.0.(10+i)) as their pod IP; they gossip on
// it. A peer in another pod reaches this pod only at that address, so the
// admin endpoints must not be served there. The check connects to the pod
// address (where the gossip listener does accept TCP, so the address itself
// is reachable) and requires the admin port to refuse, while 127.0.0.1 (the
// pod's own loopback, i.e. kubectl exec) serves it. All of this is one
// network namespace, so a connection from a truly different host is not
// exercised: what is tested is the bind address, which is what keeps other
// pods out.
func TestAdminSurface(t *testing.T) {
	ctx := t.Context()
	env := harness.Start(t, harness.Options{Names: []string{"adm"}})
	c := env.Clusters[0]
	require.NoError(t, c.InstallCRDs(ctx, filepath.Join("testdata", "crds")))
	out := kustomizeWith(t, ctx, c, true)
	_, stderr, err := c.KubectlInput(ctx, []byte(out), "apply", "--server-side", "-f", "-")
	require.NoError(t, err, stderr)
	_, _, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/multiclusternetworkpolicies.networking.submariner.io")
	require.NoError(t, err)

	kc, _, err := c.ServiceAccountKubeconfig(deployNS, "coastguard")
	require.NoError(t, err)
	d, err := env.StartDaemon(c, harness.DaemonOptions{Binary: coastguarddBinary(t), Kubeconfig: kc,
		Args: []string{"--metrics-auth=kubernetes"}, T: t})
	require.NoError(t, err)
	require.NoError(t, d.WaitReady(ctx, 90*time.Second), "probes stay unauthenticated")

	podIP, gossipPort, err := net.SplitHostPort(d.GossipAddr)
	require.NoError(t, err)
	require.NotEqual(t, "127.0.0.1", podIP)
	_, adminPort, err := net.SplitHostPort(d.AdminAddr)
	require.NoError(t, err)

	t.Run("admin endpoints only on loopback", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(podIP, gossipPort), 5*time.Second)
		require.NoError(t, err, "the pod address is reachable (gossip)")
		_ = conn.Close()
		hc := &http.Client{Timeout: 5 * time.Second}
		for _, p := range []string{"/debug/state", "/admin/decommission"} {
			_, err := hc.Get("http://" + net.JoinHostPort(podIP, adminPort) + p)
			require.Error(t, err, "%s must not be served on the pod address", p)
			assert.Contains(t, err.Error(), "connection refused", p)
			// Nor on the network-facing metrics listener.
			resp, err := hc.Get("http://" + d.MetricsAddr + p)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s on the metrics listener", p)
		}
		resp, err := hc.Get("http://" + d.AdminAddr + "/debug/state")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var st map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		assert.NotEmpty(t, st["version"], "/debug/state carries the daemon's version")
		assert.Equal(t, false, st["versionSkew"])
		mv, _ := st["memberVersions"].(map[string]any)
		assert.Len(t, mv, 1, "one alive member, one version: %v", st["memberVersions"])
	})

	t.Run("metrics require a token allowed to get /metrics", func(t *testing.T) {
		const scraperNS = "monitoring"
		require.NoError(t, c.EnsureNamespace(ctx, scraperNS, nil))
		for _, sa := range []string{"prometheus", "nosy"} {
			_, err := c.Client.CoreV1().ServiceAccounts(scraperNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		_, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "coastguard-metrics-reader"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "coastguard-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "coastguard-metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: scraperNS}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		token := func(sa string) string {
			tr, err := c.Client.CoreV1().ServiceAccounts(scraperNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			return tr.Status.Token
		}
		get := func(tok string) (int, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.MetricsAddr+"/metrics", nil)
			require.NoError(t, err)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return resp.StatusCode, string(b)
		}
		code, _ := get("")
		assert.Equal(t, http.StatusUnauthorized, code, "no token")
		code, _ = get("not-a-token")
		assert.Equal(t, http.StatusUnauthorized, code, "forged token")
		code, _ = get(token("nosy"))
		assert.Equal(t, http.StatusForbidden, code, "a valid token without the right")
		// RBAC for a new binding and the authorizer's deny cache (30s) may
		// lag; wait for the scraper to be admitted.
		scraper := token("prometheus")
		var body string
		require.NoError(t, harness.Eventually(ctx, 90*time.Second, time.Second, func(context.Context) (bool, error) {
			code, body = get(scraper)
			return code == http.StatusOK, nil
		}), "the scraper's token is admitted (last HTTP %d)", code)
		for _, m := range []string{"coastguard_build_info{", "coastguard_gossip_version_skew ", `workqueue_adds_total{name="coastguard_inventory"}`} {
			assert.True(t, strings.Contains(body, m), "/metrics exports %s", m)
		}
	})
}
