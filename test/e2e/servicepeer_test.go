//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

const serviceExportDB = `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: db, namespace: shop}
`

// TestPacketsServicePeer: MCNPs whose only peers name exported Services
// (docs/SEMANTICS.md "Services as peers"). cluster1's web pod may reach
// "the backends of shop/db wherever it is exported": cluster2's db pods by
// their pod IPs and by the Service's ClusterIP, and nothing else of
// cluster2 (a cache pod serving the same port is denied). cluster2's db
// pods admit "the backends of shop/web wherever it is exported": cluster1's
// web pod, not another pod of cluster1. A backend added in cluster2 is
// admitted on both paths within the propagation bound; withdrawing the
// ServiceExport denies everything and the MCNP is Degraded
// ServicePeerNotExported.
func TestPacketsServicePeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, a, b, clusterIP := remoteServiceSetup(t, ctx)
	dp := env.Dataplane()
	_, err := b.RunPod(ctx, "shop", "cache-0", "10.2.0.20", map[string]string{"role": "cache"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	_, err = a.RunPod(ctx, "shop", "other-0", "10.1.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	_, err = a.Client.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			Selector: web,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	applyYAML(t, ctx, a, []byte(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: web, namespace: shop}
`))
	applyYAML(t, ctx, b, []byte(serviceExportDB))
	t.Logf("cluster2 exports shop/db (ClusterIP %s:15432 -> pg 5432, backend db-0 10.2.0.10), cache-0 10.2.0.20 is no backend; cluster1 exports shop/web (web-0 10.1.0.10)", clusterIP)

	dial := func(client, ip string, port int32) (harness.Answer, error) {
		return dp.Dial(ctx, a, "shop", client, ip, port, corev1.ProtocolTCP)
	}
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, e1 := dial("web-0", clusterIP, 15432)
		_, e2 := dial("web-0", "10.2.0.20", 5432)
		_, e3 := dial("other-0", "10.2.0.10", 5432)
		return e1 == nil && e2 == nil && e3 == nil, nil
	}), "without MCNPs everything connects")

	startDaemons(t, ctx, env, harness.DaemonOptions{})
	applyYAML(t, ctx, a, []byte(`apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: web-egress, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
  egress:
  - to:
    - service: {name: db, clusterSelector: {}}
    ports: [{protocol: TCP, port: pg}]
`))
	applyYAML(t, ctx, b, []byte(`apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: db-from-web, namespace: shop}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - service: {name: web, clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: cluster1}}}
    ports: [{port: pg}]
`))
	began := time.Now()
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		podAns, podErr := dial("web-0", "10.2.0.10", 5432)
		svcAns, svcErr := dial("web-0", clusterIP, 15432)
		_, cacheErr := dial("web-0", "10.2.0.20", 5432)
		_, otherErr := dial("other-0", "10.2.0.10", 5432)
		return podErr == nil && podAns.Pod == "shop/db-0" && svcErr == nil && svcAns.Pod == "shop/db-0" &&
			cacheErr != nil && otherErr != nil, nil
	}), "service peers: web-0 reaches db's backend by pod IP and ClusterIP; cache-0 and other-0's flow are denied")
	t.Logf("service peers enforced on packets after %s", time.Since(began).Round(time.Millisecond))
	waitCondition(t, ctx, a, "web-egress", "Degraded", "False", "AsExpected")
	waitCondition(t, ctx, b, "db-from-web", "Degraded", "False", "AsExpected")
	for i := 0; i < 5; i++ {
		ans, err := dial("web-0", "10.2.0.20", 5432)
		require.Error(t, err, "cache-0 is not a backend of shop/db (reached %s)", ans.Pod)
		ans, err = dial("other-0", clusterIP, 15432)
		require.Error(t, err, "other-0 is not a backend of shop/web: cluster2's ingress MCNP denies it (reached %s)", ans.Pod)
	}
	ans, err := dial("web-0", clusterIP, 15432)
	require.NoError(t, err)
	t.Logf("web-0 -> %s:15432 answered by %s, which saw source %s", clusterIP, ans.Pod, ans.Source)

	// A new backend of shop/db in cluster2: admitted on its pod IP, and the
	// ClusterIP (still exact: every backend is a peer) reaches both.
	began = time.Now()
	_, err = b.RunPod(ctx, "shop", "db-1", "10.2.0.11", map[string]string{"role": "db"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	seen := map[string]bool{}
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		if ans, err := dial("web-0", clusterIP, 15432); err == nil {
			seen[ans.Pod] = true
		}
		_, podErr := dial("web-0", "10.2.0.11", 5432)
		return podErr == nil && seen["shop/db-0"] && seen["shop/db-1"], nil
	}), "a backend added: reached by pod IP and through the ClusterIP")
	t.Logf("backend db-1 admitted on both paths after %s", time.Since(began).Round(time.Millisecond))

	// The export withdrawn: shop/db is no peer any more (fail closed).
	_, se, err := b.Kubectl(ctx, "delete", "serviceexport", "-n", "shop", "db")
	require.NoError(t, err, se)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, e0 := dial("web-0", "10.2.0.10", 5432)
		_, e1 := dial("web-0", "10.2.0.11", 5432)
		_, e2 := dial("web-0", clusterIP, 15432)
		return e0 != nil && e1 != nil && e2 != nil, nil
	}), "ServiceExport deleted: the backends and the ClusterIP are denied")
	msg := waitCondition(t, ctx, a, "web-egress", "Degraded", "True", "ServicePeerNotExported")
	require.Contains(t, msg, "shop/db")
	t.Logf("Degraded: %s", msg)
}
