//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioJoin: a cluster whose namespaces and pods already exist starts
// its daemon last. Its inventory reaches the others, their NetworkPolicies
// gain its pod IPs, and it enforces the existing MCNP with theirs.
func TestScenarioJoin(t *testing.T) {
	env, bin, ds := startMesh(t, 3, meshOpts{Deferred: []int{2}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a", "10.1.0.1", web)
	runPod(t, ctx, b, "web-b", "10.2.0.1", web)
	applyYAML(t, ctx, a, webPolicy("db", "{}"))
	waitNPs(t, ctx, a, harness.ManagedSelector, 30*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, cidrs("10.2.0.1"))
	}, "A enforces with B's pod before the join")

	// C's inventory exists before its daemon: pods, a second namespace, a
	// pod without an IP yet, and a pod that must not match.
	require.NoError(t, c.EnsureNamespace(ctx, "extra", map[string]string{"team": "x"}))
	runPod(t, ctx, c, "web-c1", "10.3.0.1", web)
	runPod(t, ctx, c, "web-c2", "10.3.0.2", web)
	runPod(t, ctx, c, "other-c", "10.3.0.3", map[string]string{"app": "other"})
	_, err := c.CreatePod(ctx, "shop", "pending-c", web)
	require.NoError(t, err)
	_, err = c.RunPod(ctx, "extra", "web-x", "10.3.1.1", web)
	require.NoError(t, err)

	start := time.Now()
	dc, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin})
	require.NoError(t, err)
	require.NoError(t, dc.WaitReady(ctx, 60*time.Second))

	want := cidrs("10.2.0.1", "10.3.0.1", "10.3.0.2")
	waitNPs(t, ctx, a, harness.ManagedSelector, 30*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, want)
	}, "A gains C's web pods")
	joinA := time.Since(start)
	waitNPs(t, ctx, b, harness.ManagedSelector, 30*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, cidrs("10.1.0.1", "10.3.0.1", "10.3.0.2"))
	}, "B gains C's web pods")
	waitNPs(t, ctx, c, harness.ManagedSelector, 30*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
		return len(nps) == 1 && equal(bl, cidrs("10.1.0.1", "10.2.0.1"))
	}, "C enforces A's MCNP with A's and B's pods")
	t.Logf("join: C's pods in A's NetworkPolicy %s after C's daemon started", joinA.Round(time.Millisecond))

	// C's inventory (both namespaces) is in A's and B's replicas.
	for _, d := range ds[:2] {
		err := harness.Eventually(ctx, 15*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			s, err := debugState(ctx, d)
			if err != nil {
				return false, err
			}
			v, ok := s.Origins[c.Name]
			if !ok {
				return false, nil
			}
			pv, err := parseVersion(v)
			return err == nil && pv.seq > 0 && s.Clusters[c.Name].Alive, err
		})
		require.NoError(t, err, "%s lists origin %s alive in /debug/state", d.NodeName, c.Name)
	}

	// the late cluster takes part in ordinary flows right away
	_, err = c.SetPodStatus(ctx, "shop", "pending-c", "10.3.0.4", "Running")
	require.NoError(t, err)
	waitNPs(t, ctx, b, harness.ManagedSelector, 15*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, cidrs("10.1.0.1", "10.3.0.1", "10.3.0.2", "10.3.0.4"))
	}, "pending pod of C gets an IP")
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
