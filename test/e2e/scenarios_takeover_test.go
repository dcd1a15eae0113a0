//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioLaggingTakeover: A's standby lags (it is down, so it misses
// the leader's last write: pod web-a2, which B and C admit; a frozen
// process would still find the leader's gossip in its socket buffers). A
// is then cut from B and C, the leader is killed, web-a2 is deleted, and
// the standby comes back and takes over without ever having seen web-a2. After the partition heals, no
// cluster may still admit web-a2's IP once the new leader's re-publication
// and seal have propagated. Writing only the difference against its own
// replica, the new leader would leave web-a2 admitted in B and C until the
// next periodic full sync (10 minutes).
func TestScenarioLaggingTakeover(t *testing.T) {
	if err := harness.CheckPartitionSupport(); err != nil {
		t.Fatalf("lagging takeover scenario needs root and iptables: %v", err)
	}
	const lease = 6 * time.Second
	env, bin, _ := startMesh(t, 3, meshOpts{Deferred: []int{0}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	as := startPair(t, ctx, env, a, bin, lease)
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a1", "10.1.0.1", web)
	applyYAML(t, ctx, a, webPolicy("from-a", "{}"))
	wb, wc := watchNPs(t, b, "shop"), watchNPs(t, c, "shop")
	_, err := wb.waitFor(ctx, 30*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.1.0.1")) })
	require.NoError(t, err)

	leader, standby := leaderAndStandby(t, ctx, as)
	require.NoError(t, standby.Kill(), "the standby is down: it lags")
	runPod(t, ctx, a, "web-a2", "10.1.0.2", web)
	for _, w := range []*npWatch{wb, wc} {
		_, err = w.waitFor(ctx, 30*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.1.0.1", "10.1.0.2")) })
		require.NoError(t, err, "the old leader's last write (web-a2) is admitted in B and C")
	}

	require.NoError(t, env.Isolate(a), "the standby must take over without pulling web-a2 back")
	require.NoError(t, leader.Kill())
	require.NoError(t, a.Client.CoreV1().Pods("shop").Delete(ctx, "web-a2", metav1.DeleteOptions{}))
	require.NoError(t, standby.Restart())
	err = harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, err := debugState(ctx, standby)
		return err == nil && s.Leader, nil
	})
	require.NoError(t, err, "the lagging standby takes over")
	time.Sleep(5 * time.Second) // its resync (re-publication and seal) while cut off
	require.NoError(t, env.Heal())
	healed := time.Now()

	for _, cl := range []*harness.Cluster{b, c} {
		waitNPs(t, ctx, cl, harness.ManagedSelector, 30*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
			return equal(bl, cidrs("10.1.0.1"))
		}, fmt.Sprintf("%s no longer admits the deleted web-a2", cl.Name))
	}
	t.Logf("lagging takeover: deleted pod's IP gone everywhere %s after the partition healed", time.Since(healed).Round(10*time.Millisecond))
}

// leaderAndStandby waits until exactly one of two daemons of a cluster leads.
func leaderAndStandby(t *testing.T, ctx context.Context, ds []*harness.Daemon) (leader, standby *harness.Daemon) {
	t.Helper()
	err := harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		leader, standby = nil, nil
		for _, d := range ds {
			s, err := debugState(ctx, d)
			if err != nil {
				return false, err
			}
			if s.Leader {
				if leader != nil {
					return false, fmt.Errorf("two leaders: %s and %s", leader.NodeName, d.NodeName)
				}
				leader = d
			} else {
				standby = d
			}
		}
		return leader != nil && standby != nil, nil
	})
	require.NoError(t, err, "exactly one leader")
	return leader, standby
}
