//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// rogueBound is how long after a heal an honest cluster may still miss an
// update the rogue tried to keep from it (anti-entropy rounds plus the
// enforcer on a loaded 2-core machine).
const rogueBound = 30 * time.Second

// TestScenarioRogueFourthCluster (issue 29, "Show"): a fourth cluster that
// holds the gossip key and its own signing key, run as a gossip member by
// the gossip package's rogue agent, bends the stream against real
// coastguardd processes with entries its origins genuinely signed:
//
//   - skip: only the newest MCNP of A, framed as if nothing lay between
//     C's watermark and it, while C hears from no honest member;
//   - resurrect: a fresh pod of C is served a reset of A that holds a
//     deleted MCNP's live version and leaves out a live one;
//   - forged alive: B's member re-labelled, replayed and declared dead at
//     incarnation 2^32-1, with a 40 s reconnect timeout.
//
// Each is refused and counted; no cluster loses B's entries, no cluster
// enforces the deleted MCNP again, and C has every new MCNP within
// rogueBound of meeting an honest member.
func TestScenarioRogueFourthCluster(t *testing.T) {
	env, bin, ds := startMesh(t, 4, meshOpts{Deferred: []int{3}, Args: []string{"--reconnect-timeout=40s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	a, b := env.Clusters[0], env.Clusters[1]
	for _, cl := range env.Clusters[:3] {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a", "10.1.0.1", web)
	runPod(t, ctx, b, "web-b", "10.2.0.1", web)
	rg := startRogue(t, ctx, env)

	rogueSkip(t, ctx, env, rg, ds)
	fresh := rogueResurrect(t, ctx, env, rg, ds, bin)
	rogueForgedAlive(t, ctx, rg, ds[1], ds[0], fresh)
}

// rogueSkip: C is cut off from A and B; A writes p2 and p3; the rogue
// hands C only p3, as if (watermark, p3] held nothing else.
func rogueSkip(t *testing.T, ctx context.Context, env *harness.Env, rg *rogueAgent, ds []*harness.Daemon) {
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	applyYAML(t, ctx, a, webPolicy("p1", "{}"))
	waitPolicy(t, ctx, c, "p1", true, 60*time.Second)
	// the rogue's view and C's agree (A may still write, e.g. its own
	// report of p1: both are read afresh until they meet)
	err := harness.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		r, err := rg.state(ctx, a.Name)
		if err != nil {
			return false, nil
		}
		s, err := debugState(ctx, ds[2])
		return err == nil && s.Origins[a.Name] == r.Digest.Max.String(), nil
	})
	require.NoError(t, err, "C holds A up to the rogue's view")

	rg.post(t, ctx, "freeze", url.Values{"origin": {a.Name}}) // it keeps A's news to itself from here
	require.NoError(t, env.Partition(a, c))
	require.NoError(t, env.Partition(b, c))
	// C's watermark for A once nobody tells it more: the skip starts there
	base := stableOrigin(t, ctx, ds[2], a.Name)
	applyYAML(t, ctx, a, webPolicy("p2", "{}"))
	applyYAML(t, ctx, a, webPolicy("p3", "{}"))
	rg.waitMax(t, ctx, a.Name, func(s rogueState) bool { return s.Seen["shop/p3"] > 0 })
	before := dropCount(t, ctx, ds[2], crdt.ReasonCompletenessMismatch)
	t.Log(rg.post(t, ctx, "skip", url.Values{"to": {ds[2].NodeName}, "origin": {a.Name}, "from": {strconv.FormatUint(uint64(base), 10)}}))
	waitDrop(t, ctx, ds[2], crdt.ReasonCompletenessMismatch, before)
	time.Sleep(2 * time.Second) // the rogue's anti-entropy with C runs meanwhile
	s, err := debugState(ctx, ds[2])
	require.NoError(t, err)
	require.Equal(t, base.String(), s.Origins[a.Name], "C's watermark for A moved over the hole")
	require.NotContains(t, s.MCNPs, a.Name+"/shop/p2", "C cannot have p2: nobody honest reached it")

	healed := time.Now()
	require.NoError(t, env.Heal())
	waitPolicy(t, ctx, c, "p2", true, rogueBound)
	t.Logf("skip: C enforces the skipped p2 %s after the heal", time.Since(healed).Round(time.Millisecond))
	rg.post(t, ctx, "freeze", url.Values{"origin": {a.Name}, "off": {"1"}})
}

// rogueResurrect: A creates "open" (enforced everywhere), deletes it, and
// creates p4. A fresh pod of C (its only daemon, so it leads and enforces),
// cut off from A and B, meets the rogue first, which serves it a reset of A
// with open's live version and without p4. Neither B nor C ever enforces
// "open"'s allows again: C holds it unproven, so it only isolates the pods
// open selects (a stand-in without rules), until the heal drops it.
func rogueResurrect(t *testing.T, ctx context.Context, env *harness.Env, rg *rogueAgent, ds []*harness.Daemon, bin string) *harness.Daemon {
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	applyYAML(t, ctx, a, webPolicy("open", "{}"))
	waitPolicy(t, ctx, b, "open", true, 60*time.Second)
	waitPolicy(t, ctx, c, "open", true, 60*time.Second)
	rg.waitMax(t, ctx, a.Name, func(s rogueState) bool { return s.Seen["shop/open"] > 0 })
	out, errOut, err := a.Kubectl(ctx, "-n", "shop", "delete", "mcnp", "open")
	require.NoError(t, err, "%s %s", out, errOut)
	waitPolicy(t, ctx, b, "open", false, 60*time.Second)
	waitPolicy(t, ctx, c, "open", false, 60*time.Second)
	applyYAML(t, ctx, a, webPolicy("p4", "{}"))
	waitPolicy(t, ctx, b, "p4", true, 60*time.Second)
	rg.waitMax(t, ctx, a.Name, func(s rogueState) bool { return s.Seen["shop/p4"] > 0 && s.Digest.Max == s.Digest.Top })
	stopB := neverPolicy(t, ctx, b, "open") // no cluster may enforce "open" again
	stopC := neverPolicy(t, ctx, c, "open")

	rg.post(t, ctx, "freeze", url.Values{"origin": {a.Name}}) // a fresh pod hears of A from the rogue's lie only
	require.NoError(t, ds[2].Stop())
	require.NoError(t, env.Partition(a, c))
	require.NoError(t, env.Partition(b, c))
	fresh, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin, NodeName: c.Name + "-fresh",
		Seeds: []string{rg.gossipAddr}, Args: []string{"--reconnect-timeout=40s"}, T: t})
	require.NoError(t, err)
	require.NoError(t, fresh.WaitReady(ctx, 60*time.Second))
	rg.waitMember(t, ctx, fresh.NodeName)
	before := dropCount(t, ctx, fresh, crdt.ReasonCompletenessMismatch)
	t.Log(rg.post(t, ctx, "resurrect", url.Values{"to": {fresh.NodeName}, "origin": {a.Name}, "names": {"shop/open,shop/p1"}}))
	waitDrop(t, ctx, fresh, crdt.ReasonCompletenessMismatch, before)
	s, err := debugState(ctx, fresh)
	require.NoError(t, err)
	require.Positive(t, s.Unproven[a.Name], "the resurrected entries are held above A's proven watermark")
	waitUnprovenGauge(t, ctx, fresh)
	t.Logf("resurrect: fresh pod holds A at %s with %d unproven MCNP entries", s.Origins[a.Name], s.Unproven[a.Name])
	// fail closed: the unproven "open" is known, so C isolates the pods it
	// selects (a stand-in without rules), it does not leave them open
	waitNPs(t, ctx, c, harness.ManagedSelector+",coastguard.submariner.io/origin-name=open", rogueBound,
		func(_ []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) > 0 && !slices.ContainsFunc(nps, allows)
		}, "isolation-only stand-in of the unproven MCNP open")

	healed := time.Now()
	require.NoError(t, env.Heal())
	err = harness.Eventually(ctx, rogueBound, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, err = debugState(ctx, fresh)
		return err == nil && s.Unproven[a.Name] == 0 && slices.Contains(s.MCNPs, a.Name+"/shop/p4") &&
			!slices.Contains(s.MCNPs, a.Name+"/shop/open"), err
	})
	require.NoError(t, err, "the fresh pod after the heal: MCNPs %v, unproven %v", s.MCNPs, s.Unproven)
	waitPolicy(t, ctx, c, "p4", true, rogueBound)
	waitPolicy(t, ctx, c, "open", false, rogueBound) // the stand-in goes with the entry
	t.Logf("resurrect: the fresh pod dropped the deleted MCNP and its stand-in and enforces p4 %s after the heal", time.Since(healed).Round(time.Millisecond))
	stopB()
	stopC()
	return fresh
}

// rogueForgedAlive: B's member re-labelled as the rogue's, its genuine
// metadata replayed, and a dead for it, all at 2^32-1, sent to A and to
// C's fresh pod. After the reconnect timeout B is still alive everywhere
// and its entries still enforced.
func rogueForgedAlive(t *testing.T, ctx context.Context, rg *rogueAgent, db, da, fresh *harness.Daemon) {
	bNode, b, a := db.NodeName, db.Cluster.Name, da.Cluster.Name
	for _, d := range []*harness.Daemon{da, fresh} {
		before := dropCount(t, ctx, d, "incarnation_jump")
		t.Log(rg.post(t, ctx, "alive", url.Values{"to": {d.NodeName}, "node": {bNode}}))
		waitDrop(t, ctx, d, "incarnation_jump", before)
	}
	time.Sleep(40*time.Second + 10*time.Second) // the reconnect timeout and a margin
	for _, d := range []*harness.Daemon{da, fresh} {
		s, err := debugState(ctx, d)
		require.NoError(t, err)
		require.True(t, s.Clusters[b].Alive, "%s sees %s dead after the forged alive", d.NodeName, b)
		require.Contains(t, s.MCNPs, a+"/shop/p1")
	}
	waitNPs(t, ctx, da.Cluster, originSel(a), 10*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return containsAll(bl, cidrs("10.2.0.1")...)
	}, "A still admits B's web pod")
}

// ---- the rogue agent ----

type rogueAgent struct {
	control    string
	gossipAddr string
}

// rogueState mirrors the agent's GET /state.
type rogueState struct {
	Digest  crdt.OriginDigest `json:"digest"`
	Members []string          `json:"members"`
	Seen    map[string]int    `json:"seen"`
}

func startRogue(t *testing.T, ctx context.Context, env *harness.Env) *rogueAgent {
	r := env.Clusters[3]
	bin, err := harness.BuildTest("./gossip")
	require.NoError(t, err)
	port, err := harness.FreePort(r.GossipIP, true)
	require.NoError(t, err)
	ctl, err := harness.FreePort("127.0.0.1", false)
	require.NoError(t, err)
	gk, err := env.GossipKeyFile()
	require.NoError(t, err)
	sk, err := env.SigningKeyFile(r.Name)
	require.NoError(t, err)
	rg := &rogueAgent{control: net.JoinHostPort("127.0.0.1", strconv.Itoa(ctl)), gossipAddr: net.JoinHostPort(r.GossipIP, strconv.Itoa(port))}
	_, err = env.StartDaemon(r, harness.DaemonOptions{Binary: bin, NodeName: "rogue", GossipPort: port, RawArgs: true, T: t,
		Env: []string{"COASTGUARD_ROGUE_AGENT=1", "ROGUE_NODE=rogue", "ROGUE_CLUSTER=" + r.Name, "ROGUE_BIND=" + rg.gossipAddr,
			"ROGUE_SEEDS=" + strings.Join(env.Seeds(r), ","), "ROGUE_GOSSIP_KEY_FILE=" + gk, "ROGUE_SIGNING_KEY_FILE=" + sk,
			"ROGUE_CONTROL=" + rg.control}})
	require.NoError(t, err)
	for _, c := range env.Clusters[:3] {
		rg.waitMember(t, ctx, c.Name+"-0")
	}
	return rg
}

func (rg *rogueAgent) state(ctx context.Context, origin string) (rogueState, error) {
	var s rogueState
	return s, getJSON(ctx, "http://"+rg.control+"/state?origin="+url.QueryEscape(origin), &s)
}

func (rg *rogueAgent) waitMember(t *testing.T, ctx context.Context, member string) {
	t.Helper()
	rg.waitMax(t, ctx, "", func(s rogueState) bool { return slices.Contains(s.Members, member) })
}

func (rg *rogueAgent) waitMax(t *testing.T, ctx context.Context, origin string, cond func(rogueState) bool) rogueState {
	t.Helper()
	var s rogueState
	err := harness.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		var err error
		s, err = rg.state(ctx, origin)
		return err == nil && cond(s), nil
	})
	require.NoError(t, err, "the rogue's view of %q: %+v", origin, s)
	return s
}

func (rg *rogueAgent) post(t *testing.T, ctx context.Context, what string, q url.Values) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rg.control+"/"+what+"?"+q.Encode(), nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "rogue %s: %s", what, b)
	return strings.TrimSpace(string(b))
}

// ---- checks ----

// waitUnprovenGauge waits until d reports unproven MCNPs whose generated
// policies it leaves alone.
func waitUnprovenGauge(t *testing.T, ctx context.Context, d *harness.Daemon) {
	t.Helper()
	err := harness.Eventually(ctx, 10*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		m, err := d.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		v, _ := harness.MetricValue(m, "coastguard_mcnp_unproven", nil)
		return v > 0, nil
	})
	require.NoError(t, err, "%s: coastguard_mcnp_unproven must count the resurrected MCNPs", d.NodeName)
}

func dropCount(t *testing.T, ctx context.Context, d *harness.Daemon, reason string) float64 {
	t.Helper()
	m, err := d.Metrics(ctx)
	require.NoError(t, err)
	v, _ := harness.MetricValue(m, "coastguard_gossip_dropped_total", map[string]string{"reason": reason})
	return v
}

func waitDrop(t *testing.T, ctx context.Context, d *harness.Daemon, reason string, before float64) {
	t.Helper()
	err := harness.Eventually(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		m, err := d.Metrics(ctx)
		if err != nil {
			return false, nil
		}
		v, _ := harness.MetricValue(m, "coastguard_gossip_dropped_total", map[string]string{"reason": reason})
		return v > before, nil
	})
	require.NoError(t, err, "%s: coastguard_gossip_dropped_total{reason=%s} must count the rogue", d.NodeName, reason)
}

// stableOrigin returns d's proven watermark for origin once it has not
// moved for two seconds.
func stableOrigin(t *testing.T, ctx context.Context, d *harness.Daemon, origin string) crdt.Version {
	t.Helper()
	var last string
	since := time.Now()
	err := harness.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, err := debugState(ctx, d)
		if err != nil {
			return false, nil
		}
		if v := s.Origins[origin]; v != last {
			last, since = v, time.Now()
		}
		return last != "" && time.Since(since) >= 2*time.Second, nil
	})
	require.NoError(t, err, "%s: the watermark of %s never settled (last %s)", d.NodeName, origin, last)
	epoch, seq, ok := strings.Cut(last, ".")
	e, err1 := strconv.ParseUint(epoch, 10, 32)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	require.True(t, ok && err1 == nil && err2 == nil, "%s: watermark %q is not epoch.seq", d.NodeName, last)
	return crdt.MakeVersion(uint32(e), q)
}

// waitPolicy waits until c has (or has no) generated NetworkPolicy of the
// MCNP named name.
func waitPolicy(t *testing.T, ctx context.Context, c *harness.Cluster, name string, present bool, within time.Duration) {
	t.Helper()
	waitNPs(t, ctx, c, harness.ManagedSelector+",coastguard.submariner.io/origin-name="+name, within,
		func(_ []string, nps []networkingv1.NetworkPolicy) bool {
			if present {
				return slices.ContainsFunc(nps, enforcing) // the real policy, not an unproven MCNP's stand-in
			}
			return len(nps) == 0
		},
		fmt.Sprintf("generated policy of %s present=%v", name, present))
}

// enforcing reports whether np is a generated policy proper, not what the
// applier enforces in its place while its MCNP is unproven (the
// isolation-only stand-in, or the intersection of two versions).
func enforcing(np networkingv1.NetworkPolicy) bool {
	return np.Annotations[enforce.AnnotationUnproven] == ""
}

// allows reports whether np may allow anything: a generated policy proper,
// or an unproven MCNP's object with rules (an intersection).
func allows(np networkingv1.NetworkPolicy) bool {
	return enforcing(np) || len(np.Spec.Ingress)+len(np.Spec.Egress) > 0
}

// neverPolicy watches c in the background for a generated NetworkPolicy of
// the MCNP named name that may allow anything (allows: an unproven MCNP's
// isolation-only stand-in allows nothing); the returned func stops
// watching and fails the test if one was ever seen.
func neverPolicy(t *testing.T, ctx context.Context, c *harness.Cluster, name string) func() {
	ctx, cancel := context.WithCancel(ctx)
	seen := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			nps, err := c.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector+",coastguard.submariner.io/origin-name="+name)
			if i := slices.IndexFunc(nps, allows); err == nil && i >= 0 {
				seen <- nps[i].Name
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() {
		cancel()
		<-done
		select {
		case n := <-seen:
			t.Fatalf("%s enforced the deleted MCNP %s again (NetworkPolicy %s)", c.Name, name, n)
		default:
		}
	}
}
