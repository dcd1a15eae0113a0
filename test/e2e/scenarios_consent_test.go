//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioConsent: cluster1 writes two MCNPs for shop, enforced
// everywhere by their clusterSelector. cluster2's consent admits only
// cluster3, so it refuses both; cluster3's consent admits cluster1 but
// forbids widening, so it enforces the first and refuses the one that
// opens 0.0.0.0/0. The status in cluster1 names the clusters and why, and
// cluster2 records an Event on its namespace.
func TestScenarioConsent(t *testing.T) {
	env, bin, _ := startMesh(t, 3, meshOpts{Deferred: []int{1, 2}})
	c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	consent := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	only3 := consent("c2.yaml", `rules:
- name: only-cluster3
  origins: {matchLabels: {cluster.clusterset.k8s.io: `+c3.Name+`}}
  namespaces: {}
`)
	noWidening := consent("c3.yaml", `rules:
- name: cluster1-anywhere
  origins: {matchLabels: {cluster.clusterset.k8s.io: `+c1.Name+`}}
  namespaces: {}
forbidWidening: true
`)
	for i, file := range map[int]string{1: only3, 2: noWidening} {
		d, err := env.StartDaemon(env.Clusters[i], harness.DaemonOptions{Binary: bin, Args: []string{"--consent-file=" + file}})
		require.NoError(t, err)
		require.NoError(t, d.WaitReady(ctx, 60*time.Second))
	}
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, c1, "web-1", "10.1.0.11", web)
	applyYAML(t, ctx, c1, webPolicy("db-from-web", "{}"))
	applyYAML(t, ctx, c1, []byte(strings.Replace(string(webPolicy("db-from-anywhere", "{}")),
		"    - clusterSelector: {}\n      podSelector:\n        matchLabels: {app: web}\n", "    - ipBlock: {cidr: 0.0.0.0/0}\n", 1)))

	waitNPs(t, ctx, c3, originSel(c1.Name), 60*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
		return len(nps) == 1 && equal(bl, cidrs("10.1.0.11"))
	}, "cluster3 enforces db-from-web only")
	msg := waitCondition(t, ctx, c1, "db-from-anywhere", "Degraded", "True", "NotAdmitted")
	require.Contains(t, msg, c2.Name+": NotAdmitted")
	require.Contains(t, msg, c3.Name+": NotAdmitted")
	row := func(policy string, c *harness.Cluster) string {
		out, _, err := c1.Kubectl(ctx, "-n", "shop", "get", "mcnp", policy, "-o", `jsonpath={.status.clusters[?(@.cluster=="`+c.Name+`")].degraded}`)
		require.NoError(t, err)
		return out
	}
	require.Contains(t, row("db-from-anywhere", c3), "0.0.0.0/0 is outside the cluster set's CIDRs", "cluster3 says why: widening")
	msg = waitCondition(t, ctx, c1, "db-from-web", "Degraded", "True", "NotAdmitted")
	require.Contains(t, msg, c2.Name+": NotAdmitted")
	require.NotContains(t, msg, c3.Name+":", "cluster3 admits db-from-web")
	require.Contains(t, row("db-from-web", c2), "no consent rule of this cluster admits MCNPs of cluster "+c1.Name)
	nps, err := c2.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
	require.NoError(t, err)
	require.Empty(t, nps, "cluster2 enforces nothing of cluster1's")

	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		out, _, err := c2.Kubectl(ctx, "get", "events", "-A", "--field-selector", "reason=MCNPNotAdmitted", "-o", "jsonpath={.items[*].message}")
		return err == nil && strings.Contains(out, "db-from-web of cluster "+c1.Name+" is not enforced here"), nil
	}), "cluster2 records an Event on its namespace")
}
