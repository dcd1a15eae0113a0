//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestPacketsNamedPortsAndUserPolicies: a named port that maps to different
// numbers in different pods, a user-written NetworkPolicy beside the
// generated ones (NetworkPolicies are additive; coastguard leaves it
// alone), and egress isolation of the client pods, each on packets across
// two clusters.
func TestPacketsNamedPortsAndUserPolicies(t *testing.T) {
	env, ctx := packetsEnv(t, 2, 5*time.Minute)
	dp := env.Dataplane()
	c1, c2 := env.Clusters[0], env.Clusters[1]
	db := map[string]string{"role": "db"}
	_, err := c1.RunPod(ctx, "shop", "db-a", "10.1.0.10", db, tcpPort("pg", 5432), tcpPort("admin", 7000))
	require.NoError(t, err)
	_, err = c1.RunPod(ctx, "shop", "db-b", "10.1.0.11", db, tcpPort("pg", 6432), tcpPort("admin", 7000))
	require.NoError(t, err)
	_, err = c2.RunPod(ctx, "shop", "web-0", "10.2.0.10", web, tcpPort("http", 8080))
	require.NoError(t, err)
	_, err = c2.RunPod(ctx, "shop", "other-0", "10.2.0.11", map[string]string{"app": "other"}, tcpPort("http", 8080))
	require.NoError(t, err)
	startDaemons(t, ctx, env, harness.DaemonOptions{})

	isDB := func(p harness.PodEndpoint) bool { return p.Name == "db-a" || p.Name == "db-b" }
	// the named port "pg": 5432 on db-a, 6432 on db-b
	applyYAML(t, ctx, c1, dbFromWeb("db-pg", "[{protocol: TCP, port: pg}]"))
	want := func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		if !isDB(to) {
			return true
		}
		return from.Name == "web-0" && port.Name == "pg"
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, `ingress on the named port "pg" (5432 in db-a, 6432 in db-b)`)

	// a user's own NetworkPolicy beside the generated one opens the admin
	// port to other-0: NetworkPolicies are additive
	applyYAML(t, ctx, c1, []byte(userAdminPolicy))
	base := want
	want = func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		return base(from, to, port) || (isDB(to) && from.Name == "other-0" && port.Name == "admin")
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, "a user NetworkPolicy beside the generated one")
	np, err := c1.Client.NetworkingV1().NetworkPolicies("shop").Get(ctx, "user-admin", metav1.GetOptions{})
	require.NoError(t, err, "coastguard leaves the user's policy alone")
	require.Empty(t, np.Labels, "and does not label it")

	// egress isolation of web-0 in its own cluster: only the dbs' "pg"
	applyYAML(t, ctx, c2, webEgress("{}", "{matchLabels: {role: db}}"))
	base2 := want
	want = func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		if from.Name == "web-0" {
			return isDB(to) && port.Name == "pg"
		}
		return base2(from, to, port)
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, "egress of web-0 limited to the named port of the dbs")
}

const userAdminPolicy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: user-admin, namespace: shop}
spec:
  podSelector: {matchLabels: {role: db}}
  ingress:
  - from:
    - ipBlock: {cidr: 10.2.0.11/32}
    ports: [{protocol: TCP, port: 7000}]
`
