//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// removalSetup: an MCNP from A and one from C, both enforced everywhere, and
// one web pod per cluster. It returns once every cluster enforces both.
func removalSetup(t *testing.T, ctx context.Context, env *harness.Env) {
	t.Helper()
	a, c := env.Clusters[0], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	ips := []string{"10.1.0.1", "10.2.0.1", "10.3.0.1"}
	for i, cl := range env.Clusters {
		runPod(t, ctx, cl, "web", ips[i], web)
	}
	runPod(t, ctx, c, "web-c2", "10.3.0.2", web)
	applyYAML(t, ctx, a, webPolicy("from-a", "{}"))
	applyYAML(t, ctx, c, webPolicy("from-c", "{}"))
	for i, cl := range env.Clusters {
		var remote []string
		for j, ip := range append(ips, "10.3.0.2") {
			// ips[j] is a pod of cluster j; the extra 10.3.0.2 is web-c2 in c.
			if owner := min(j, 2); owner != i {
				remote = append(remote, ip)
			}
		}
		want := cidrs(remote...)
		for _, origin := range []string{a.Name, c.Name} {
			waitNPs(t, ctx, cl, originSel(origin), 30*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
				return len(nps) == 1 && equal(bl, want)
			}, "policy from "+origin)
		}
	}
}

// TestScenarioDecommission: `coastguardd decommission` in C removes C's pods
// from every NetworkPolicy and deletes the NetworkPolicies C's MCNPs caused,
// in A, B and C.
func TestScenarioDecommission(t *testing.T) {
	env, bin, ds := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	removalSetup(t, ctx, env)
	// Each leader shares its first-use pins in Secret coastguard-pins.
	for _, cl := range []*harness.Cluster{a, b} {
		require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			sec, err := cl.Client.CoreV1().Secrets(harness.DaemonNamespace).Get(ctx, "coastguard-pins", metav1.GetOptions{})
			return err == nil && len(sec.Data[c.Name]) == 32, nil
		}), "%s shares its pin of C", cl.Name)
	}

	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "decommission", "--admin-addr", ds[2].AdminAddr).CombinedOutput()
	require.NoError(t, err, "coastguardd decommission: %s", out)
	require.Contains(t, string(out), "decommissioned")

	for _, cl := range []*harness.Cluster{a, b} {
		want := cidrs("10.1.0.1") // B's own pods are selected by podSelector, not ipBlocks
		if cl == a {
			want = cidrs("10.2.0.1")
		}
		waitNPs(t, ctx, cl, originSel(a.Name), 30*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) == 1 && equal(bl, want)
		}, "C's pods gone from A's policy")
		waitNPs(t, ctx, cl, originSel(c.Name), 30*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) == 0
		}, "policy generated from C's MCNP deleted")
	}
	waitNPs(t, ctx, c, harness.ManagedSelector, 30*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
		return len(nps) == 0
	}, "C deleted every NetworkPolicy it generated")
	t.Logf("decommission: converged in A, B and C after %s", time.Since(start).Round(time.Millisecond))

	select {
	case <-ds[2].Done():
	case <-time.After(15 * time.Second):
		t.Fatalf("C's daemon still running after decommission")
	}
	// the retirement sticks: the data dir refuses a restart
	require.NoError(t, ds[2].Restart())
	select {
	case <-ds[2].Done():
		require.Error(t, ds[2].ExitErr(), "restart of a decommissioned daemon must fail")
		tail, _ := ds[2].TailLog(5)
		require.Contains(t, tail, "decommissioned")
	case <-time.After(20 * time.Second):
		t.Fatalf("a decommissioned data dir did not stop the restarted daemon")
	}
	// the others do not resurrect C's entries
	time.Sleep(2 * time.Second)
	for _, cl := range []*harness.Cluster{a, b} {
		nps, err := cl.ListNetworkPolicies(ctx, "shop", originSel(c.Name))
		require.NoError(t, err)
		require.Empty(t, nps)
		nps, err = cl.ListNetworkPolicies(ctx, "shop", originSel(a.Name))
		require.NoError(t, err)
		require.True(t, containsNone(blocksOf(nps...), cidrs("10.3.0.1", "10.3.0.2")...), "%s: %v", cl.Name, blocksOf(nps...))
	}

	// The decommission cleared C's pin everywhere (and its key from A's and
	// B's shared pins), so C's ID joins again, as documented, with a new
	// signing key and a fresh data dir: A and B take its new key on first
	// use and its pods are admitted again.
	for _, cl := range []*harness.Cluster{a, b} {
		var last string
		require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			sec, err := cl.Client.CoreV1().Secrets(harness.DaemonNamespace).Get(ctx, "coastguard-pins", metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			_, pinned := sec.Data[c.Name]
			_, reset := sec.Annotations["unpin.coastguard.submariner.io/"+c.Name]
			last = fmt.Sprintf("pinned %v, annotations %v", slices.Sorted(maps.Keys(sec.Data)), sec.Annotations)
			return !pinned && reset, nil
		}), "%s's shared pins reset C: last %s", cl.Name, last)
	}
	newKey := filepath.Join(env.Dir, "keys", "signing-"+c.Name+"-rejoin.key")
	out, err = exec.CommandContext(ctx, bin, "keys", "generate").Output()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(newKey, out, 0o600))
	_, err = env.StartDaemon(c, harness.DaemonOptions{Binary: bin, NodeName: c.Name + "-rejoin", Args: []string{"--signing-key-file=" + newKey}, T: t})
	require.NoError(t, err)
	for _, cl := range []*harness.Cluster{a, b} {
		want := "10.3.0.1/32"
		waitNPs(t, ctx, cl, originSel(a.Name), 60*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
			return slices.Contains(bl, want)
		}, "C's pods admitted again after it rejoined with a new key")
	}
}

// TestScenarioClusterLost: C's daemon is SIGKILLed and never comes back. With
// a 10s reconnect timeout its entries go stale (still enforced), then are
// retired: its pod IPs vanish in A and B, but the policy from C's MCNP stays
// enforced there from its last-known state (a lost origin fails closed),
// with OriginLost on C's CoastguardCluster, until `kubectl coastguard
// release-lost` releases it.
func TestScenarioClusterLost(t *testing.T) {
	const reconnect = 10 * time.Second
	env, _, ds := startMesh(t, 3, meshOpts{Args: []string{"--reconnect-timeout=" + reconnect.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	removalSetup(t, ctx, env)

	require.NoError(t, ds[2].Kill())
	killed := time.Now()

	// stale: the others see C down but keep enforcing what C last said
	var staleAt time.Duration
	err := harness.Eventually(ctx, reconnect, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, d := range ds[:2] {
			s, err := debugState(ctx, d)
			if err != nil {
				return false, err
			}
			if cs, ok := s.Clusters[c.Name]; !ok || cs.Alive {
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "A and B mark C not alive")
	staleAt = time.Since(killed)
	for _, cl := range []*harness.Cluster{a, b} {
		nps, err := cl.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
		require.NoError(t, err)
		require.True(t, containsAll(blocksOf(nps...), cidrs("10.3.0.1", "10.3.0.2")...),
			"%s: C's pods still enforced while C is merely unreachable: %v", cl.Name, blocksOf(nps...))
		fromC, err := cl.ListNetworkPolicies(ctx, "shop", originSel(c.Name))
		require.NoError(t, err)
		require.Len(t, fromC, 1, "%s: C's MCNP still enforced while stale", cl.Name)
	}
	t.Logf("cluster lost: A and B see C down %s after SIGKILL", staleAt.Round(time.Millisecond))

	for _, cl := range []*harness.Cluster{a, b} {
		want := cidrs("10.1.0.1") // B's own pods are selected by podSelector, not ipBlocks
		if cl == a {
			want = cidrs("10.2.0.1")
		}
		waitNPs(t, ctx, cl, originSel(a.Name), reconnect+30*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) == 1 && equal(bl, want)
		}, "C's pods retired from A's policy")
		// C's MCNP stays, narrowed to the pods still known
		waitNPs(t, ctx, cl, originSel(c.Name), 15*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) == 1 && equal(bl, want)
		}, "policy from lost C's MCNP kept, without C's pods")
	}
	retired := time.Since(killed)
	t.Logf("cluster lost: C retired everywhere %s after SIGKILL (reconnect timeout %s)", retired.Round(time.Millisecond), reconnect)
	// The timeout runs from C's last heartbeat, which can precede the
	// SIGKILL by one heartbeat period (reconnect/16, gossip's beatEvery):
	// CI once saw 9.57 s.
	require.GreaterOrEqual(t, retired, reconnect-reconnect/16, "retired before the reconnect timeout (from C's last heartbeat)")
	for i, cl := range []*harness.Cluster{a, b} {
		waitOriginLost(t, ctx, cl, c.Name, true)
		fams, err := ds[i].Metrics(ctx)
		require.NoError(t, err)
		v, _ := harness.MetricValue(fams, "coastguard_lost_origin_policies", map[string]string{"origin": c.Name})
		require.EqualValues(t, 1, v, "%s: one MCNP of lost %s kept", cl.Name, c.Name)
	}

	// the explicit, audited release, from one kubeconfig for the whole set
	bin, err := harness.Build("./cmd/kubectl-coastguard")
	require.NoError(t, err)
	out, err := exec.CommandContext(ctx, bin, "release-lost", c.Name, "--kubeconfig", mergedKubeconfig(t, env)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), a.Name+" ("+a.Name+"): released")
	require.Contains(t, string(out), c.Name+" ("+c.Name+"): not lost here")
	for _, cl := range []*harness.Cluster{a, b} {
		waitNPs(t, ctx, cl, originSel(c.Name), 30*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) == 0
		}, "policy from lost C's MCNP released")
		waitOriginLost(t, ctx, cl, c.Name, false)
	}
	// C's own apiserver keeps what C generated: nobody deletes it remotely
	nps, err := c.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
	require.NoError(t, err)
	require.Len(t, nps, 2, "C's local NetworkPolicies stay as last enforced")
}

// waitOriginLost waits for cl's CoastguardCluster of lost to report
// OriginLost as want.
func waitOriginLost(t *testing.T, ctx context.Context, cl *harness.Cluster, lost string, want bool) {
	t.Helper()
	status := "False"
	if want {
		status = "True"
	}
	var got string
	require.NoError(t, harness.Eventually(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		got, _, _ = cl.Kubectl(ctx, "get", "coastguardcluster", lost, "-o", `jsonpath={.status.conditions[?(@.type=="OriginLost")].status}`)
		return got == status, nil
	}), "%s: OriginLost of %s is %q, want %s", cl.Name, lost, got, status)
}
