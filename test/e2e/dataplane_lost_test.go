//go:build e2e

package e2e

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestPacketsLostOrigin: an MCNP written in cluster3 isolates cluster1's
// db except from web pods. cluster3's daemon dies and is retired after the
// reconnect timeout: on packets, cluster1's db stays isolated (a lost
// origin fails closed), cluster3's pods lose their access (they are gone
// from the policy), cluster2's web pod keeps it; only the explicit
// release-lost lifts the isolation.
func TestPacketsLostOrigin(t *testing.T) {
	env, ctx := packetsEnv(t, 3, 5*time.Minute)
	dp := env.Dataplane()
	c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	_, err := c1.RunPod(ctx, "shop", "db-0", "10.1.0.10", map[string]string{"role": "db"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	_, err = c2.RunPod(ctx, "shop", "web-0", "10.2.0.10", web)
	require.NoError(t, err)
	_, err = c2.RunPod(ctx, "shop", "other-0", "10.2.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	_, err = c3.RunPod(ctx, "shop", "web-1", "10.3.0.10", web)
	require.NoError(t, err)
	ds := startDaemons(t, ctx, env, harness.DaemonOptions{Args: []string{"--reconnect-timeout=10s"}})
	applyYAML(t, ctx, c3, dbFromWeb("db-from-web", ""))
	allowed := map[string]bool{"web-0": true, "web-1": true}
	want := func(from, to harness.PodEndpoint, _ corev1.ContainerPort) bool {
		return to.Name != "db-0" || allowed[from.Name]
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, "MCNP from cluster3 isolates cluster1's db except from web pods")

	require.NoError(t, ds[2].Kill())
	delete(allowed, "web-1") // retired with its cluster
	waitMatrix(t, ctx, dp, want, 60*time.Second, "cluster3 lost: its MCNP still isolates the db; its own pods are gone from it")
	waitOriginLost(t, ctx, c1, c3.Name, true)

	bin, err := harness.Build("./cmd/kubectl-coastguard")
	require.NoError(t, err)
	out, err := exec.CommandContext(ctx, bin, "release-lost", c3.Name, "--kubeconfig", mergedKubeconfig(t, env)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	want = func(harness.PodEndpoint, harness.PodEndpoint, corev1.ContainerPort) bool { return true }
	waitMatrix(t, ctx, dp, want, 60*time.Second, "released: nothing isolates the db any more")
}
