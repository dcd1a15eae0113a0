//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestPacketsConsent: cluster2 writes an MCNP isolating every cluster's db
// except from web pods. cluster1's consent admits nothing from cluster2,
// so on packets cluster1's db stays open to every pod, while cluster2
// (the origin) and cluster3 (no consent file) enforce it.
func TestPacketsConsent(t *testing.T) {
	env, ctx := packetsEnv(t, 3, 5*time.Minute)
	dp := env.Dataplane()
	c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for i, c := range env.Clusters {
		_, err := c.RunPod(ctx, "shop", "db-"+c.Name, []string{"10.1.0.10", "10.2.0.10", "10.3.0.10"}[i], map[string]string{"role": "db"}, tcpPort("pg", 5432))
		require.NoError(t, err)
	}
	_, err := c2.RunPod(ctx, "shop", "web-0", "10.2.0.11", web)
	require.NoError(t, err)
	_, err = c3.RunPod(ctx, "shop", "other-0", "10.3.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "consent.yaml")
	require.NoError(t, os.WriteFile(file, []byte("rules: []\n"), 0o600))
	bin, err := harness.Build("./cmd/coastguardd")
	require.NoError(t, err)
	for _, c := range env.Clusters {
		opts := harness.DaemonOptions{Binary: bin}
		if c == c1 {
			opts.Args = []string{"--consent-file=" + file}
		}
		d, err := env.StartDaemon(c, opts)
		require.NoError(t, err)
		require.NoError(t, d.WaitReady(ctx, 60*time.Second))
	}
	applyYAML(t, ctx, c2, dbFromWeb("db-from-web", ""))
	want := func(from, to harness.PodEndpoint, _ corev1.ContainerPort) bool {
		if to.Name == "db-"+c1.Name {
			return true // not admitted by cluster1's consent: nothing isolates it
		}
		return to.Name != "db-"+c2.Name && to.Name != "db-"+c3.Name || from.Name == "web-0"
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, "cluster2's MCNP enforced in cluster2 and cluster3, refused by cluster1's consent")
	waitCondition(t, ctx, c2, "db-from-web", "Degraded", "True", "NotAdmitted")
}
