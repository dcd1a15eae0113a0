//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// shopModel is the test's own statement of what the examples/ shop
// workload must allow, written from docs/SEMANTICS.md (NetworkPolicy
// semantics, peers across clusters), not from coastguard's translation.
type shopModel struct {
	region   map[string]string            // cluster -> region label
	podLabel map[string]map[string]string // cluster/ns/name -> labels
	nsLabel  map[string]map[string]string // cluster/ns -> labels
	policy   map[string]bool              // MCNPs present
}

func newShopModel(t *testing.T, ctx context.Context, env *harness.Env) *shopModel {
	t.Helper()
	m := &shopModel{
		region:   map[string]string{"eu-1": "eu", "eu-2": "eu", "us-1": "us"},
		podLabel: map[string]map[string]string{},
		nsLabel:  map[string]map[string]string{},
		policy:   map[string]bool{},
	}
	for _, c := range env.Clusters {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, p := range pods.Items {
			m.podLabel[c.Name+"/"+p.Namespace+"/"+p.Name] = p.Labels
		}
		nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, ns := range nss.Items {
			m.nsLabel[c.Name+"/"+ns.Name] = ns.Labels
		}
	}
	return m
}

func (m *shopModel) labels(p harness.PodEndpoint) map[string]string {
	return m.podLabel[p.String()]
}

// want is the expected verdict of one cell: ingress of the destination and
// egress of the source must both admit it.
func (m *shopModel) want(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
	return m.ingress(from, to, port) && m.egress(from, to, port)
}

func (m *shopModel) ingress(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
	fl, tl := m.labels(from), m.labels(to)
	switch {
	case to.Namespace == "shop" && tl["app"] == "backend" && m.policy["backend-allow-frontends"]:
		// enforced everywhere; frontends of namespace shop in any cluster, port "http"
		return from.Namespace == "shop" && fl["app"] == "frontend" && port.Name == "http"
	case to.Namespace == "shop" && to.Cluster.Name == "us-1":
		return false // us-1's own default-deny-ingress NetworkPolicy
	case to.Namespace == "payments" && tl["app"] == "payments-api" && m.policy["payments-api-ingress"] &&
		m.region[to.Cluster.Name] == "eu":
		// backends in eu clusters, in namespaces labelled team=shop in their own cluster, port "https"
		return m.region[from.Cluster.Name] == "eu" && fl["app"] == "backend" &&
			m.nsLabel[from.Cluster.Name+"/"+from.Namespace]["team"] == "shop" && port.Name == "https"
	}
	return true
}

func (m *shopModel) egress(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
	fl, tl := m.labels(from), m.labels(to)
	if from.Cluster.Name != "us-1" || from.Namespace != "shop" || fl["app"] != "backend" || !m.policy["backend-egress"] {
		return true
	}
	// kube-dns of the local cluster on 53, or payments-api in eu clusters'
	// pci=true namespaces on "https"
	if to.Cluster.Name == "us-1" && to.Namespace == "kube-system" && tl["app"] == "kube-dns" && port.ContainerPort == 53 {
		return true
	}
	return m.region[to.Cluster.Name] == "eu" && tl["app"] == "payments-api" &&
		m.nsLabel[to.Cluster.Name+"/"+to.Namespace]["pci"] == "true" && port.Name == "https"
}

// waitMatrix probes until the matrix has no unexpected cell, and fails
// with the table of differences otherwise.
func waitMatrix(t *testing.T, ctx context.Context, dp *harness.Dataplane, want harness.Expectation, timeout time.Duration, what string) harness.Matrix {
	t.Helper()
	var last harness.Matrix
	began, rounds := time.Now(), 0
	err := harness.Eventually(ctx, timeout, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		rounds++
		last = dp.ProbeMatrix(ctx, want, nil)
		return len(last.Unexpected()) == 0, nil
	})
	require.NoError(t, err, "%s: unexpected cells:\n%s", what, last.Table(true))
	allowed, denied := last.Counts()
	t.Logf("%s: %d cells on packets (%d allowed, %d denied), 0 unexpected, after %s (%d probe rounds)",
		what, len(last.Results), allowed, denied, time.Since(began).Round(time.Millisecond), rounds)
	return last
}

// TestPacketsShopWorkload runs the examples/ shop workload on the packet
// dataplane with a coastguardd per cluster and checks every pod-to-pod
// cell, across the three clusters, against the semantics: after the MCNPs
// arrive, after a pod label change, a namespace label change, a pod
// deletion with IP reuse, a hand-edited generated policy and an MCNP
// deletion.
func TestPacketsShopWorkload(t *testing.T) {
	scenario(t, 3)
	env := dataplaneEnv(t, 3, harness.Options{Names: []string{"eu-1", "eu-2", "us-1"}})
	dp := env.Dataplane()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
	require.NoError(t, env.InstallCRDs(ctx, repoPath("test", "e2e", "testdata", "crds")))
	for _, c := range env.Clusters {
		_, err := c.ApplyExampleWorkload(ctx, repoPath("examples"))
		require.NoError(t, err)
	}
	m := newShopModel(t, ctx, env)
	waitMatrix(t, ctx, dp, m.want, 30*time.Second, "before any MCNP")

	startDaemons(t, ctx, env, harness.DaemonOptions{ClusterCIDRs: []string{}})
	// The three MCNPs the model knows (examples/ has more, such as eu-1's
	// service peer, whose Service this workload does not export).
	for _, f := range []string{"eu-1/mcnp-backend.yaml", "eu-2/mcnp-payments.yaml", "us-1/mcnp-backend-egress.yaml"} {
		c := env.Cluster(filepath.Dir(f))
		_, se, err := c.Kubectl(ctx, "apply", "-f", repoPath("examples", f))
		require.NoError(t, err, se)
	}
	maps.Copy(m.policy, map[string]bool{"backend-allow-frontends": true, "payments-api-ingress": true, "backend-egress": true})
	waitMatrix(t, ctx, dp, m.want, 60*time.Second, "the three MCNPs")

	eu1, eu2, us1 := env.Cluster("eu-1"), env.Cluster("eu-2"), env.Cluster("us-1")
	// A remote frontend loses its label: no backend anywhere admits it.
	patchLabels(t, ctx, eu2, "shop", "frontend-7d9f8-klmno", `{"metadata":{"labels":{"app":"batch"}}}`)
	m.podLabel["eu-2/shop/frontend-7d9f8-klmno"] = map[string]string{"app": "batch"}
	waitMatrix(t, ctx, dp, m.want, 30*time.Second, "pod label removed in eu-2")

	// eu-1's shop namespace loses team=shop: eu-1's backend is no longer
	// admitted by payments-api in eu-1 or eu-2.
	_, err := eu1.Client.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":null}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	delete(m.nsLabel["eu-1/shop"], "team")
	waitMatrix(t, ctx, dp, m.want, 30*time.Second, "namespace label removed in eu-1")

	// us-1's frontend is deleted and its IP reused by a pod no policy admits.
	old, ok := dp.Pod(us1, "shop", "frontend-7d9f8-uvwxy")
	require.True(t, ok)
	require.NoError(t, us1.DeletePod(ctx, "shop", "frontend-7d9f8-uvwxy"))
	_, err = us1.RunPod(ctx, "shop", "intruder", old.IP, map[string]string{"app": "intruder"})
	require.NoError(t, err)
	m.podLabel["us-1/shop/intruder"] = map[string]string{"app": "intruder"}
	waitMatrix(t, ctx, dp, m.want, 30*time.Second, "pod deleted in us-1, IP "+old.IP+" reused")

	// A hand-deleted generated policy is repaired (level-triggered).
	nps, err := eu2.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
	require.NoError(t, err)
	require.NotEmpty(t, nps)
	require.NoError(t, eu2.Client.NetworkingV1().NetworkPolicies("shop").Delete(ctx, nps[0].Name, metav1.DeleteOptions{}))
	require.NoError(t, harness.Eventually(ctx, 30*time.Second, 20*time.Millisecond, func(ctx context.Context) (bool, error) {
		np, err := eu2.Client.NetworkingV1().NetworkPolicies("shop").Get(ctx, nps[0].Name, metav1.GetOptions{})
		return err == nil && np.UID != nps[0].UID, nil
	}), "the daemon recreates the hand-deleted %s", nps[0].Name)
	waitMatrix(t, ctx, dp, m.want, 30*time.Second, "generated policy deleted by hand in eu-2")

	// The payments MCNP is deleted in its origin: payments-api is open again.
	_, se, err := eu2.Kubectl(ctx, "delete", "mcnp", "-n", "payments", "payments-api-ingress")
	require.NoError(t, err, se)
	m.policy["payments-api-ingress"] = false
	final := waitMatrix(t, ctx, dp, m.want, 30*time.Second, "payments-api-ingress deleted")
	t.Logf("final matrix:\n%s", final.Table(false))
}

func patchLabels(t *testing.T, ctx context.Context, c *harness.Cluster, ns, name, patch string) {
	t.Helper()
	_, err := c.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err, fmt.Sprintf("patching %s/%s in %s", ns, name, c.Name))
}
