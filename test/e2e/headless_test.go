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

// TestPacketsRemoteHeadless covers exported headless Services: Lighthouse
// answers <svc>.<ns>.svc.clusterset.local with the backends' pod IPs, so a
// client connects to a pod IP directly and the pod rules decide. An egress
// MCNP admitting one backend allows the headless path to it and denies the
// backend it does not admit; a headless Service has no ClusterIP, so a
// partially admitted one is not Degraded (docs/SEMANTICS.md "Services").
// An ingress MCNP in the exporting cluster admits the web client and
// denies another pod of the same cluster.
func TestPacketsRemoteHeadless(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	scenario(t, 2)
	env := dataplaneEnv(t, 2, harness.Options{Services: true})
	require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
	require.NoError(t, env.InstallCRDs(ctx, repoPath("test", "e2e", "testdata", "crds")))
	a, b := env.Clusters[0], env.Clusters[1]
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	dp := env.Dataplane()
	_, err := b.RunPod(ctx, "shop", "db-0", "10.2.0.10", map[string]string{"role": "db"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	_, err = b.RunPod(ctx, "shop", "db-1", "10.2.0.11", map[string]string{"role": "db", "replica": "true"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	_, err = a.RunPod(ctx, "shop", "web-0", "10.1.0.10", web)
	require.NoError(t, err)
	_, err = a.RunPod(ctx, "shop", "other-0", "10.1.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	_, err = b.Client.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"role": "db"},
			Ports:     []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromString("pg"), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	applyYAML(t, ctx, b, []byte(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: db, namespace: shop}
`))
	dial := func(client, ip string) (harness.Answer, error) {
		return dp.Dial(ctx, a, "shop", client, ip, 5432, corev1.ProtocolTCP)
	}
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, e0 := dial("web-0", "10.2.0.10")
		_, e1 := dial("web-0", "10.2.0.11")
		return e0 == nil && e1 == nil, nil
	}), "without policies both headless backends answer")

	startDaemons(t, ctx, env, harness.DaemonOptions{})
	applyYAML(t, ctx, a, webEgress(inCluster2, nonReplicaDB))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		ans, e0 := dial("web-0", "10.2.0.10")
		_, e1 := dial("web-0", "10.2.0.11")
		return e0 == nil && ans.Pod == "shop/db-0" && e1 != nil, nil
	}), "egress MCNP: the admitted headless backend answers, the other is denied")
	waitCondition(t, ctx, a, "web-egress", "Degraded", "False", "AsExpected")

	applyYAML(t, ctx, b, []byte(dbFromCluster1Web))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, allowed := dial("web-0", "10.2.0.10")
		_, denied := dial("other-0", "10.2.0.10")
		return allowed == nil && denied != nil, nil
	}), "ingress MCNP in the exporting cluster: web admitted on the headless path, other denied")
	for i := 0; i < 5; i++ {
		ans, err := dial("web-0", "10.2.0.11")
		require.Error(t, err, "the backend the egress MCNP does not admit must stay denied (reached %s)", ans.Pod)
	}
}
