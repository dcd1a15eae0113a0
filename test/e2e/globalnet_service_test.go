//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

var globalIngressIPs = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "globalingressips"}

// allocateGlobalIngressIP writes the GlobalIngressIP Submariner's
// globalnet controller keeps for an exported ClusterIP Service (target
// ClusterIPService; status.allocatedIP through the status subresource)
// and makes the dataplane serve that IP (dp.ExposeGlobalIngressIP).
func allocateGlobalIngressIP(t *testing.T, ctx context.Context, dp *harness.Dataplane, c *harness.Cluster, ns, svc, ip string) {
	t.Helper()
	r := c.Dynamic.Resource(globalIngressIPs).Namespace(ns)
	got, err := r.Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		got, err = r.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "submariner.io/v1", "kind": "GlobalIngressIP",
			"metadata": map[string]any{"name": svc, "namespace": ns},
			"spec":     map[string]any{"target": "ClusterIPService", "serviceRef": map[string]any{"name": svc}},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	require.NoError(t, unstructured.SetNestedField(got.Object, ip, "status", "allocatedIP"))
	_, err = r.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, dp.ExposeGlobalIngressIP(ctx, c, ns, svc, ip))
}

// TestPacketsGlobalnetService: cluster2 has Globalnet and exports shop/db
// (15432 -> pg 5432) with the global ingress IP 242.2.0.50, which
// cluster2's kube-proxy translates to a backend (as Globalnet does). A
// pod of cluster1 dials the global IP, as Lighthouse answers it there:
//   - an egress MCNP admitting every backend admits the global IP on the
//     service port, never the ClusterIP (not what clients dial under
//     Globalnet; the harness still routes it, and it is denied);
//   - a new backend the MCNP does not admit withdraws it (fail closed,
//     Degraded ServiceBackendsPartiallyAdmitted naming the Service), and
//     the global IP is refused on packets;
//   - a global IP claimed outside cluster2's global CIDR (as cluster1
//     knows it from Submariner's Cluster object) is never rendered
//     (Degraded ServiceGlobalIPOutsideGlobalCIDR), though routed and
//     served: without the MCNP it connects.
func TestPacketsGlobalnetService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, a, b, clusterIP := remoteServiceSetup(t, ctx)
	dp := env.Dataplane()
	require.NoError(t, dp.EnableGlobalnet(b, "242.2.0.0/16", "242.2.0.1"))
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, submarinerNS, nil))
		applyYAML(t, ctx, c, submarinerClusterWith(a.Name, a.PodCIDR, a.ServiceCIDR, ""))
		applyYAML(t, ctx, c, submarinerClusterWith(b.Name, b.PodCIDR, b.ServiceCIDR, "242.2.0.0/16"))
	}
	applyYAML(t, ctx, b, []byte(serviceExportDB))
	allocateGlobalIngressIP(t, ctx, dp, b, "shop", "db", "242.2.0.50")
	t.Logf("cluster2 (Globalnet 242.2.0.0/16) exports shop/db: ClusterIP %s, global IP 242.2.0.50, port 15432 -> pg 5432 on db-0", clusterIP)

	dial := func(ip string) (harness.Answer, error) {
		return dp.Dial(ctx, a, "shop", "web-0", ip, 15432, corev1.ProtocolTCP)
	}
	var ans harness.Answer
	var err error
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		ans, err = dial("242.2.0.50")
		return err == nil, nil
	}), "without MCNPs cluster1 reaches the global IP: %v", err)
	require.Equal(t, "shop/db-0", ans.Pod)
	t.Logf("web-0 -> 242.2.0.50:15432 answered by %s, which saw source %s", ans.Pod, ans.Source)

	startDaemons(t, ctx, env, harness.DaemonOptions{ClusterCIDRs: []string{}})
	applyYAML(t, ctx, a, webEgress(inCluster2, nonReplicaDB))
	began := time.Now()
	waitNPs(t, ctx, a, "coastguard.submariner.io/origin-name=web-egress", 60*time.Second, func(blocks []string, _ []networkingv1.NetworkPolicy) bool {
		return containsAll(blocks, "242.2.0.50/32") && containsNone(blocks, clusterIP+"/32", "10.2.0.10/32")
	}, "the global IP, neither the ClusterIP nor the pod IP")
	t.Logf("global IP rendered %s after the MCNP was applied", time.Since(began).Round(time.Millisecond))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		ans, err = dial("242.2.0.50")
		_, cipErr := dial(clusterIP)
		return err == nil && ans.Pod == "shop/db-0" && cipErr != nil, nil
	}), "every backend admitted: the global IP is admitted on 15432 while the egress is isolated (the ClusterIP is denied)")
	for range 5 {
		ans, err = dial("242.2.0.50")
		require.NoError(t, err)
		require.Equal(t, "shop/db-0", ans.Pod)
	}
	waitCondition(t, ctx, a, "web-egress", "Degraded", "True", "GlobalnetCoarseIdentity")

	// a backend the MCNP does not admit: the global IP is withdrawn
	began = time.Now()
	_, err = b.RunPod(ctx, "shop", "db-1", "10.2.0.11", map[string]string{"role": "db", "replica": "true"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, err := dial("242.2.0.50")
		return err != nil, nil
	}), "db-1 is not admitted: the global IP is refused")
	t.Logf("global IP refused %s after db-1 (not admitted) started", time.Since(began).Round(time.Millisecond))
	msg := waitCondition(t, ctx, a, "web-egress", "Degraded", "True", "ServiceBackendsPartiallyAdmitted")
	require.Contains(t, msg, b.Name+"/shop/db")
	for range 5 {
		ans, err := dial("242.2.0.50")
		require.Error(t, err, "no connection may reach any backend (reached %s)", ans.Pod)
	}

	// all backends admitted again, but the global IP moves outside
	// cluster2's global CIDR: routed and served, never rendered
	require.NoError(t, b.DeletePod(ctx, "shop", "db-1"))
	allocateGlobalIngressIP(t, ctx, dp, b, "shop", "db", "242.9.0.50")
	msg = waitCondition(t, ctx, a, "web-egress", "Degraded", "True", "ServiceGlobalIPOutsideGlobalCIDR")
	require.Contains(t, msg, b.Name+"/shop/db")
	for range 5 {
		ans, err := dial("242.9.0.50")
		require.Error(t, err, "a global IP outside cluster2's global CIDR is never admitted (reached %s)", ans.Pod)
	}
	nps, err := a.ListNetworkPolicies(ctx, "shop", "coastguard.submariner.io/origin-name=web-egress")
	require.NoError(t, err)
	require.True(t, containsNone(blocksOf(nps...), "242.9.0.50/32"), "never rendered")
	_, stderr, err := a.Kubectl(ctx, "delete", "-n", "shop", "multiclusternetworkpolicy", "web-egress")
	require.NoError(t, err, stderr)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		ans, err = dial("242.9.0.50")
		return err == nil, nil
	}), "without the MCNP the claimed IP connects: it was the policy that refused it")
	t.Logf("without the MCNP, web-0 -> 242.9.0.50:15432 answered by %s", ans.Pod)
	require.True(t, strings.HasPrefix(ans.Pod, "shop/db-"))
}
