//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioPartition: A is cut from {B, C}; both sides change pods and
// policies. During the cut each side keeps enforcing its last known state;
// after the heal every change of both sides is enforced everywhere.
func TestScenarioPartition(t *testing.T) {
	if err := harness.CheckPartitionSupport(); err != nil {
		t.Fatalf("partition scenario needs root and iptables: %v", err)
	}
	env, _, _ := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a1", "10.1.0.1", web)
	runPod(t, ctx, b, "web-b1", "10.2.0.1", web)
	runPod(t, ctx, c, "web-c1", "10.3.0.1", web)
	runPod(t, ctx, c, "web-c2", "10.3.0.2", web)
	applyYAML(t, ctx, a, webPolicy("from-a", "{}"))
	before := map[*harness.Cluster][]string{
		a: cidrs("10.2.0.1", "10.3.0.1", "10.3.0.2"),
		b: cidrs("10.1.0.1", "10.3.0.1", "10.3.0.2"),
		c: cidrs("10.1.0.1", "10.2.0.1"),
	}
	for cl, want := range before {
		waitNPs(t, ctx, cl, harness.ManagedSelector, 30*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
			return equal(bl, want)
		}, "before the cut")
	}

	require.NoError(t, env.Isolate(a))
	cut := time.Now()
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = env.Heal()
		}
	})

	// changes on A's side
	runPod(t, ctx, a, "web-a2", "10.1.0.2", web)
	_, err := a.SetPodStatus(ctx, "shop", "web-a1", "10.1.0.11", "Running")
	require.NoError(t, err)
	// changes on the {B, C} side: a new pod, a deleted pod, a re-IP, a new MCNP
	runPod(t, ctx, b, "web-b2", "10.2.0.2", web)
	require.NoError(t, c.DeletePod(ctx, "shop", "web-c2"))
	_, err = c.SetPodStatus(ctx, "shop", "web-c1", "10.3.0.11", "Running")
	require.NoError(t, err)
	applyYAML(t, ctx, b, webPolicy("from-b", "{}"))

	// the majority side converges among itself
	waitNPs(t, ctx, c, originSel(a.Name), 30*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, cidrs("10.1.0.1", "10.2.0.1", "10.2.0.2"))
	}, "C sees B's new pod during the cut and still A's old one")
	waitNPs(t, ctx, c, originSel(b.Name), 30*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
		return len(nps) == 1
	}, "C enforces B's new MCNP during the cut")

	// hold the cut until each side has declared the other down (memberlist
	// failure detection), checking all along that A keeps its last known
	// state and B keeps A's old pod.
	da, db := env.Daemons()[0], env.Daemons()[1]
	downSeen := func(d *harness.Daemon, others ...string) bool {
		s, err := debugState(ctx, d)
		if err != nil {
			return false
		}
		for _, o := range others {
			if s.Clusters[o].Alive {
				return false
			}
		}
		return true
	}
	for {
		nps, err := a.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
		require.NoError(t, err)
		require.Len(t, nps, 1, "A: nothing created or deleted by the cut alone")
		require.Equal(t, before[a], blocksOf(nps...), "A keeps enforcing the remote pods it last knew")
		nps, err = b.ListNetworkPolicies(ctx, "shop", originSel(a.Name))
		require.NoError(t, err)
		require.Len(t, nps, 1, "B keeps A's policy during the cut")
		require.True(t, containsAll(blocksOf(nps...), cidrs("10.1.0.1")...), "B keeps A's last known pod: %v", blocksOf(nps...))
		require.True(t, containsNone(blocksOf(nps...), cidrs("10.1.0.11", "10.1.0.2")...), "the cut leaks: %v", blocksOf(nps...))
		if time.Since(cut) > 5*time.Second && downSeen(da, b.Name, c.Name) && downSeen(db, a.Name) {
			break
		}
		require.Less(t, time.Since(cut), 60*time.Second, "the sides never declared each other down")
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("partition: both sides saw the other down %s after the cut", time.Since(cut).Round(time.Millisecond))
	// one more round after detection: still nothing removed
	time.Sleep(2 * time.Second)
	nps, err := a.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
	require.NoError(t, err)
	require.Equal(t, before[a], blocksOf(nps...), "A after failure detection")

	require.NoError(t, env.Heal())
	healed = true
	healStart := time.Now()
	want := map[*harness.Cluster]map[string][]string{
		a: {a.Name: cidrs("10.2.0.1", "10.2.0.2", "10.3.0.11"), b.Name: cidrs("10.2.0.1", "10.2.0.2", "10.3.0.11")},
		b: {a.Name: cidrs("10.1.0.11", "10.1.0.2", "10.3.0.11"), b.Name: cidrs("10.1.0.11", "10.1.0.2", "10.3.0.11")},
		c: {a.Name: cidrs("10.1.0.11", "10.1.0.2", "10.2.0.1", "10.2.0.2"), b.Name: cidrs("10.1.0.11", "10.1.0.2", "10.2.0.1", "10.2.0.2")},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	var slowest time.Duration
	for cl, byOrigin := range want {
		for origin, bl := range byOrigin {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last []string
				err := harness.Eventually(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
					nps, err := cl.ListNetworkPolicies(ctx, "shop", originSel(origin))
					if err != nil {
						return false, err
					}
					last = blocksOf(nps...)
					return len(nps) == 1 && equal(last, bl), nil
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s, policy from %s: want %v, last %v: %v", cl.Name, origin, bl, last, err))
				}
				slowest = max(slowest, time.Since(healStart))
			}()
		}
	}
	wg.Wait()
	require.Empty(t, errs, "lost updates after the heal")
	t.Logf("partition: cut held %s; after the heal every change of both sides was enforced everywhere in %s",
		healStart.Sub(cut).Round(time.Millisecond), slowest.Round(time.Millisecond))
}

// TestScenarioCrash: B's daemon is SIGKILLed while A churns pods, and
// restarted on the same data dir with a seed that does not resolve (DNS or
// Lighthouse down). Its state loads from bbolt; it finds the mesh through
// the gossip peers it remembered there (RELIABILITY.md, finding 9); no
// generated NetworkPolicy anywhere is deleted or loses an ipBlock of an
// unchanged pod; it catches up with what changed while it was down (remote
// and local).
func TestScenarioCrash(t *testing.T) {
	env, _, ds := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a1", "10.1.0.1", web)
	runPod(t, ctx, b, "web-b1", "10.2.0.1", web)
	runPod(t, ctx, c, "web-c1", "10.3.0.1", web)
	applyYAML(t, ctx, a, webPolicy("from-a", "{}"))
	watches := map[*harness.Cluster]*npWatch{}
	for _, cl := range env.Clusters {
		watches[cl] = watchNPs(t, cl, "shop")
	}
	_, err := watches[b].waitFor(ctx, 30*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.1.0.1", "10.3.0.1")) })
	require.NoError(t, err)
	for _, cl := range []*harness.Cluster{a, c} {
		_, err := watches[cl].waitFor(ctx, 30*time.Second, func(bl []string) bool { return slices.Contains(bl, "10.2.0.1/32") })
		require.NoError(t, err, cl.Name)
	}
	marks := map[*harness.Cluster]int{}
	for cl, w := range watches {
		marks[cl] = w.mark()
	}

	// churn in A: new pods only, so every ipBlock change must be a growth
	stopChurn := startGrowthChurn(ctx, a, web)

	time.Sleep(2 * time.Second)
	err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		return lastLogLine(t, ds[1].LogPath, "gossip peers remembered for a restart") != nil, nil
	})
	require.NoError(t, err, "B remembered its gossip peers")
	require.NoError(t, ds[1].Kill())
	ds[1].SetSeeds("coastguard-seed.invalid")
	down := time.Now()
	// while B's daemon is down: a local change in B, more churn in A
	runPod(t, ctx, b, "web-b2", "10.2.0.2", web)
	time.Sleep(3 * time.Second)
	require.NoError(t, ds[1].Restart())
	require.NoError(t, ds[1].WaitReady(ctx, 60*time.Second))
	ready := time.Since(down)
	started := lastLogLine(t, ds[1].LogPath, "gossip started")
	require.NotNil(t, started)
	require.Greater(t, started["members"], 1.0, "the restart joined the mesh at once through the remembered peers: %v", started)
	// the killed process still holds the Lease: the restarted one (a new
	// identity) leads once it expires
	err = harness.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, err := debugState(ctx, ds[1])
		return s.Leader, err
	})
	require.NoError(t, err, "restarted B leads again")
	leads := time.Since(down)
	churned, churnErr := stopChurn()
	require.NoError(t, churnErr)
	require.NotEmpty(t, churned)

	start := time.Now()
	_, err = watches[b].waitFor(ctx, 30*time.Second, func(bl []string) bool {
		return equal(bl, cidrs(append([]string{"10.1.0.1", "10.3.0.1"}, churned...)...))
	})
	require.NoError(t, err, "B caught up with A's %d new pods", len(churned))
	for _, cl := range []*harness.Cluster{a, c} {
		_, err := watches[cl].waitFor(ctx, 30*time.Second, func(bl []string) bool { return containsAll(bl, cidrs("10.2.0.1", "10.2.0.2")...) })
		require.NoError(t, err, "%s gets the pod B created while its daemon was down", cl.Name)
	}
	t.Logf("crash: %d pods churned; B restarted after 3s, ready (standby) %s and leading %s after SIGKILL; caught up %s after that",
		len(churned), ready.Round(time.Millisecond), leads.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	if os.Getenv("COASTGUARD_E2E_DEBUG") == "1" {
		t.Logf("killed at %s", down.Format("15:04:05.000"))
		for _, e := range watches[b].eventsSince(marks[b]) {
			t.Logf("B %s %s %s blocks=%d", e.at.Format("15:04:05.000"), e.typ, e.name, len(e.blocks))
		}
	}
	for cl, w := range watches {
		require.Empty(t, flaps(w.eventsSince(marks[cl])), "%s: generated NetworkPolicies deleted or shrunk around the restart", cl.Name)
	}
	// the restarted daemon loaded its state from bbolt before talking to peers
	loaded := lastLogLine(t, ds[1].LogPath, "state loaded")
	require.NotNil(t, loaded, "no 'state loaded' log line")
	require.EqualValues(t, 1, loaded["policies"], "restart loaded A's MCNP from disk: %v", loaded)
	require.EqualValues(t, 3, loaded["origins"], "restart loaded all three origins from disk: %v", loaded)
}

// lastLogLine returns the last JSON log record of path whose msg is msg.
func lastLogLine(t *testing.T, path, msg string) map[string]any {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var last map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, msg) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			last = m
		}
	}
	return last
}

// TestScenarioLeaderFailover: two coastguardd for cluster A. SIGKILL the
// leader; the standby takes the Lease, writes at a higher epoch, and a new
// pod in A reaches B without any version going backwards and without any
// generated NetworkPolicy flapping.
func TestScenarioLeaderFailover(t *testing.T) {
	const lease = 6 * time.Second
	env, bin, ds := startMesh(t, 3, meshOpts{Deferred: []int{0}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	as := startPair(t, ctx, env, a, bin, lease)
	require.NotEqual(t, as[0].DataDir, as[1].DataDir)
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a1", "10.1.0.1", web)
	runPod(t, ctx, c, "web-c1", "10.3.0.1", web)
	applyYAML(t, ctx, a, webPolicy("from-a", "{}"))
	wb := watchNPs(t, b, "shop")
	wa := watchNPs(t, a, "shop")
	_, err := wb.waitFor(ctx, 30*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.1.0.1", "10.3.0.1")) })
	require.NoError(t, err)
	_, err = wa.waitFor(ctx, 30*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.3.0.1")) })
	require.NoError(t, err)

	var leader, standby *harness.Daemon
	var ls daemonState
	err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		leader, standby = nil, nil
		for _, d := range as {
			s, err := debugState(ctx, d)
			if err != nil {
				return false, err
			}
			if s.Leader {
				if leader != nil {
					return false, fmt.Errorf("two leaders: %s and %s", leader.NodeName, d.NodeName)
				}
				leader, ls = d, s
			} else {
				standby = d
			}
		}
		return leader != nil && standby != nil, nil
	})
	require.NoError(t, err, "exactly one leader for %s", a.Name)
	bs, err := debugState(ctx, ds[1])
	require.NoError(t, err)
	oldV, err := parseVersion(bs.Origins[a.Name])
	require.NoError(t, err, "B's view of %s", a.Name)
	t.Logf("failover: leader %s epoch %d; B knows %s at %s", leader.NodeName, ls.Epoch, a.Name, bs.Origins[a.Name])
	markA, markB := wa.mark(), wb.mark()

	require.NoError(t, leader.Kill())
	killed := time.Now()
	var ns daemonState
	err = harness.Eventually(ctx, 4*lease, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, err := debugState(ctx, standby)
		ns = s
		return s.Leader, err
	})
	require.NoError(t, err, "standby %s takes over", standby.NodeName)
	took := time.Since(killed)
	require.Greater(t, ns.Epoch, ls.Epoch, "new leader writes at a higher epoch")

	// the new leader's writes reach the others
	start := time.Now()
	runPod(t, ctx, a, "web-a2", "10.1.0.2", web)
	_, err = wb.waitFor(ctx, 30*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.1.0.1", "10.1.0.2", "10.3.0.1")) })
	require.NoError(t, err, "a pod created after the failover reaches B")
	first := time.Since(start)
	waitNPs(t, ctx, c, harness.ManagedSelector, 15*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, cidrs("10.1.0.1", "10.1.0.2"))
	}, "and C")

	// no version regression, as seen by B and C
	for _, d := range ds[1:] {
		s, err := debugState(ctx, d)
		require.NoError(t, err)
		v, err := parseVersion(s.Origins[a.Name])
		require.NoError(t, err)
		require.True(t, oldV.less(v), "%s's version of %s went from %v to %v", d.NodeName, a.Name, oldV, v)
		require.GreaterOrEqual(t, v.epoch, uint64(ns.Epoch), "%s has the new leader's writes", d.NodeName)
	}
	require.Empty(t, flaps(wb.eventsSince(markB)), "B's policies flapped during the failover")
	require.Empty(t, flaps(wa.eventsSince(markA)), "A's policies flapped during the failover")
	t.Logf("failover: %s leads at epoch %d (was %d) %s after SIGKILL of %s (lease %s); first new pod in B %s later",
		standby.NodeName, ns.Epoch, ls.Epoch, took.Round(time.Millisecond), leader.NodeName, lease, first.Round(time.Millisecond))
}

// startPair starts two daemons (leader and standby) in cluster c with a
// short Lease and waits until both are ready.
func startPair(t *testing.T, ctx context.Context, env *harness.Env, c *harness.Cluster, bin string, lease time.Duration) []*harness.Daemon {
	t.Helper()
	var ds []*harness.Daemon
	for range 2 {
		d, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin, Args: []string{"--lease-duration=" + lease.String()}})
		require.NoError(t, err)
		ds = append(ds, d)
	}
	for _, d := range ds {
		require.NoError(t, d.WaitReady(ctx, 60*time.Second))
	}
	return ds
}
