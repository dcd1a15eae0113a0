package gossip

import (
	"bytes"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Issue 29, item 2: the reconnect-timeout retirement rests on origin-signed
// heartbeats, not on memberlist's view, over real loopback memberlist with
// encryption and signatures (TOFU).

func retiredBy(n *tnode) float64 {
	return testutil.ToFloat64(n.m.retirements.WithLabelValues("reconnect_timeout"))
}

// looksDead makes n's membership view show every member of cluster dead,
// as a forged dead or re-label would (memberlist's NotifyLeave).
func looksDead(n *tnode, cluster string, now time.Time) {
	for _, m := range n.Members() {
		if m.Cluster == cluster {
			host, port := splitAddr(m.Addr)
			n.members.observe(&memberlist.Node{Name: m.Name, Addr: host, Port: port}, cluster, "", 0, false, now)
		}
	}
}

func splitAddr(a string) (net.IP, uint16) {
	h, p, _ := net.SplitHostPort(a)
	port, _ := strconv.Atoi(p)
	return net.ParseIP(h), uint16(port)
}

func TestHeartbeatsDecideRetirement(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	const timeout = 4 * time.Second
	short := func(seed byte) func(*Config) {
		return func(c *Config) {
			signed(t, signingKey(seed))(c)
			c.ReconnectTimeout = timeout
		}
	}
	a := startNode(t, "a", "c1", keys, short(1))
	x := startNode(t, "x", "c2", keys, short(2)) // live; its members will look dead at v
	y := startNode(t, "y", "c4", keys, short(4)) // dies
	v := startNode(t, "v", "c3", keys, short(3))
	joinAll(t, a, x, y, v)
	x.write(t, crdt.KindPod, "ns/x", podValue(t, "10.2.0.1"), false)
	y.write(t, crdt.KindPod, "ns/y", podValue(t, "10.4.0.1"), false)
	requireConverged(t, waitConverge, a, x, y, v)
	require.Eventually(t, func() bool {
		_, okx := v.beats.last("c2")
		_, oky := v.beats.last("c4")
		return okx && oky
	}, waitEvent, pollEvery, "no heartbeats received")

	// 1. x's members look dead in v's view for 2 × ReconnectTimeout while
	// its heartbeats flow: never retired. (The membership rule alone
	// would retire it after one timeout.)
	looksDead(v, "c2", time.Now())
	deadline := time.Now().Add(2 * timeout)
	for time.Now().Before(deadline) {
		require.False(t, v.members.clusters(time.Now())["c2"].Alive, "x came back in v's view: the test lost its premise")
		require.Zero(t, v.rep.Digest()["c2"].Retired, "a live cluster was retired while its heartbeats flowed")
		require.False(t, v.mayRetire("c2"))
		time.Sleep(100 * time.Millisecond)
	}
	// what the daemon's empty-view gate reads: beating, although not alive
	require.Eventually(t, func() bool { st := v.Clusters()["c2"]; return st.Beating && !st.Alive }, waitEvent, pollEvery)
	require.Positive(t, testutil.ToFloat64(v.m.beats))

	// 2. y dies: its heartbeats stop and it is retired after the timeout.
	require.NoError(t, y.Shutdown())
	require.Eventually(t, func() bool { return v.rep.Digest()["c4"].Retired > 0 }, waitConverge, pollEvery,
		"a dead cluster was not retired")
	_, ok := has(v, key("c4", crdt.KindPod, "ns/y"))
	require.False(t, ok)

	// 3. x stops beating while memberlist still sees its member alive
	// (at a): heartbeats decide, so it is retired too.
	require.True(t, a.members.clusters(time.Now())["c2"].Alive)
	stopped := time.Now()
	x.quiet.Store(true)
	require.Eventually(t, func() bool { return a.rep.Digest()["c2"].Retired > 0 }, waitConverge, pollEvery,
		"a cluster whose heartbeats stopped was not retired")
	require.GreaterOrEqual(t, time.Since(stopped), timeout-time.Second, "retired before the timeout")
	require.Positive(t, retiredBy(a)+retiredBy(v))
}

// A heartbeat is taken once: replays and older counters refresh nothing;
// one signed by another key is refused and counted.
func TestHeartbeatFreshness(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	v := startNode(t, "v", "c3", keys, signed(t, signingKey(3)))
	x := startNode(t, "x", "c2", keys, func(c *Config) {
		signed(t, signingKey(2))(c)
		c.IsWriter = func() bool { return false }
		c.ReconnectTimeout = 24 * time.Hour // beats once a minute, so the test drives them
	})
	joinAll(t, v, x) // v pins c2's key from x's metadata
	x.quiet.Store(true)
	sg := NewSigner(signingKey(2))
	mk := func(c uint64, s *Signer) *beat {
		return &beat{origin: "c2", counter: c, sig: s.Sign(beatSigMessage("c2", c))}
	}
	v.onBeat(mk(100, sg))
	t1, ok := v.beats.last("c2")
	require.True(t, ok)
	time.Sleep(10 * time.Millisecond)
	v.onBeat(mk(100, sg)) // replay
	v.onBeat(mk(50, sg))  // older
	t2, _ := v.beats.last("c2")
	require.Equal(t, t1, t2, "a replay refreshed the cluster")
	v.onBeat(mk(math.MaxUint64, NewSigner(signingKey(9)))) // forged
	t3, _ := v.beats.last("c2")
	require.Equal(t, t1, t3)
	require.Positive(t, dropped(v, crdt.ReasonKeyMismatch)+dropped(v, crdt.ReasonBadSignature))
	v.onBeat(mk(101, sg))
	t4, _ := v.beats.last("c2")
	require.True(t, t4.After(t1))

	// the wire round trip
	b := mk(7, sg)
	m, err := decodeMessage(encodeBeat("x", *b))
	require.NoError(t, err)
	require.Equal(t, msgHeads, m.Type)
	require.Empty(t, m.Heads)
	require.Equal(t, b, m.Beat)
	m, err = decodeMessage(encodeHeads("x", nil))
	require.NoError(t, err)
	require.Nil(t, m.Beat)
	// a malformed trailer is ignored like any trailing bytes, the heads kept
	heads := encodeHeads("x", []Head{{Origin: "c1", Max: 5}})
	m, err = decodeMessage(append(bytes.Clone(heads), beatMarker, 200, 1))
	require.NoError(t, err)
	require.Nil(t, m.Beat)
	require.Len(t, m.Heads, 1)
	// a previous release reads an announcement with no heads: its decoder
	// stops after them (the trailer is what a newer peer appends)
	prefix := encodeBeat("x", *b)
	require.Equal(t, encodeHeads("x", nil), prefix[:len(encodeHeads("x", nil))])
}

// The counter grows across writers whose clocks differ: a writer behind in
// time continues above what its cluster signed.
func TestHeartbeatCounterMonotonic(t *testing.T) {
	b := newBeats("c1")
	now := time.UnixMilli(5_000)
	require.Equal(t, uint64(5_000), b.next(now))
	require.True(t, b.record("c1", 9_000, now)) // a previous writer ahead in time
	require.Equal(t, uint64(9_001), b.next(now))
	require.Equal(t, uint64(9_002), b.next(now))
	require.Equal(t, uint64(10_000), b.next(time.UnixMilli(10_000)))
	_, ok := b.last("c1")
	require.False(t, ok, "the own cluster is never tracked for retirement")
}

// The pure verdict: a cluster that beats is judged by its heartbeats only.
func TestClusterVerdictsHeartbeats(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	const timeout = time.Minute
	status := map[string]ClusterStatus{
		// members look dead for long, heartbeats fresh
		"beating": {LastAlive: t0.Add(-time.Hour), LastBeat: t0.Add(-time.Second)},
		// members look alive, heartbeats stopped for the timeout
		"silent": {Alive: true, AliveMembers: 1, LastAlive: t0, LastBeat: t0.Add(-timeout)},
		// never beat: the membership view decides
		"legacy": {Alive: true, AliveMembers: 1, LastAlive: t0},
	}
	digest := crdt.Digest{"beating": {Max: 5}, "silent": {Max: 5}, "legacy": {Max: 5}}
	got := map[string]clusterVerdict{}
	for _, v := range clusterVerdicts("self", status, digest, t0, timeout) {
		got[v.cluster] = v
	}
	require.Equal(t, clusterAlive, got["beating"].state)
	require.Nil(t, got["beating"].retire)
	require.Equal(t, clusterStale, got["silent"].state)
	require.Equal(t, &crdt.Retire{Origin: "silent", UpTo: 5}, got["silent"].retire)
	require.Equal(t, clusterAlive, got["legacy"].state)
}

// A cluster whose writer dies keeps beating through a standby (it beats
// when it has heard none of its cluster for three periods), so it is not
// retired while a member of it lives.
func TestHeartbeatStandbyTakesOver(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	const timeout = 4 * time.Second
	mod := func(seed byte, writer bool) func(*Config) {
		return func(c *Config) {
			signed(t, signingKey(seed))(c)
			c.ReconnectTimeout = timeout
			c.IsWriter = func() bool { return writer }
		}
	}
	w := startNode(t, "w", "c2", keys, mod(2, true))
	s := startNode(t, "s", "c2", keys, mod(2, false))
	v := startNode(t, "v", "c3", keys, mod(3, true))
	joinAll(t, w, s, v)
	w.write(t, crdt.KindPod, "ns/w", podValue(t, "10.2.0.1"), false)
	requireConverged(t, waitConverge, w, s, v)
	require.Eventually(t, func() bool { return v.Clusters()["c2"].Beating }, waitEvent, pollEvery)
	require.False(t, s.beats.ownSince().IsZero(), "the standby heard its writer's heartbeats")

	require.NoError(t, w.Shutdown())
	deadline := time.Now().Add(2 * timeout)
	for time.Now().Before(deadline) {
		require.Zero(t, v.rep.Digest()["c2"].Retired, "a cluster with a live standby was retired")
		time.Sleep(100 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return v.Clusters()["c2"].Beating }, waitEvent, pollEvery,
		"the standby did not take over the heartbeats")
}
