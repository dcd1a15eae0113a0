//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// coastguarddBinary builds ./cmd/coastguardd once per test run.
func coastguarddBinary(t *testing.T) string {
	t.Helper()
	p, err := harness.Build("./cmd/coastguardd")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDaemonsRunUnderDeployRBAC installs deploy/ into three clusters and runs
// one real coastguardd per cluster with the credentials of the deployed
// ServiceAccount (a client certificate for
// system:serviceaccount:coastguard-system:coastguard), so the RBAC in deploy/
// is exercised by the daemon itself: every daemon must become ready and see
// all three clusters alive.
func TestDaemonsRunUnderDeployRBAC(t *testing.T) {
	ctx := t.Context()
	env := harness.Start(t, harness.Options{Clusters: 3})
	bin := coastguarddBinary(t)
	for _, c := range env.Clusters {
		require.NoError(t, c.ApplyKustomize(ctx, repoPath("deploy")))
	}
	var ds []*harness.Daemon
	for _, c := range env.Clusters {
		kc, _, err := c.ServiceAccountKubeconfig(deployNS, "coastguard")
		require.NoError(t, err)
		d, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin, Kubeconfig: kc})
		require.NoError(t, err)
		ds = append(ds, d)
	}
	began := time.Now()
	for _, d := range ds {
		require.NoError(t, d.WaitReady(ctx, 60*time.Second))
	}
	t.Logf("3 coastguardd ready %s after start", time.Since(began).Round(time.Millisecond))
	for _, d := range ds {
		require.NoError(t, harness.Eventually(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
			m, err := d.Metrics(ctx)
			if err != nil {
				return false, err
			}
			v, _ := harness.MetricValue(m, "coastguard_gossip_clusters", map[string]string{"state": "alive"})
			return v == 3, nil
		}), "%s sees 3 alive clusters", d.NodeName)
	}
	t.Logf("all see 3 alive clusters %s after start", time.Since(began).Round(time.Millisecond))
	logRSS(t, env)
	for _, d := range ds {
		log, err := d.TailLog(400)
		require.NoError(t, err)
		require.NotContains(t, log, "forbidden", "%s hit an RBAC denial:\n%s", d.NodeName, log)
	}
}
