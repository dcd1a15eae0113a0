package gossip

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func partition(left, right []*tnode) {
	for _, l := range left {
		for _, r := range right {
			l.Transport().Block(r.Addr())
			r.Transport().Block(l.Addr())
		}
	}
}

type want struct {
	val     []byte
	deleted bool
}

// A partition {a,b} | {c,d} long enough for both sides to declare the other
// dead; both sides keep writing (puts and deletes of keys that existed
// before). After the heal the periodic rejoin merges the mesh, anti-entropy
// repairs, and every node holds exactly the last write of every key:
// 0 lost updates, 0 resurrected deletes.
func TestPartitionHealNoLossNoResurrection(t *testing.T) {
	keys := [][]byte{testKey(7)}
	a := startNode(t, "a", "ca", keys, nil)
	b := startNode(t, "b", "cb", keys, nil)
	c := startNode(t, "c", "cc", keys, nil)
	d := startNode(t, "d", "cd", keys, nil)
	all := []*tnode{a, b, c, d}
	joinAll(t, all...)

	model := map[crdt.Key]want{}
	put := func(n *tnode, name, ip string) {
		v := podValue(t, ip)
		n.write(t, crdt.KindPod, name, v, false)
		model[key(n.cluster, crdt.KindPod, name)] = want{val: v}
	}
	del := func(n *tnode, name string) {
		n.write(t, crdt.KindPod, name, nil, true)
		model[key(n.cluster, crdt.KindPod, name)] = want{deleted: true}
	}
	for i, n := range all {
		for j := 0; j < 5; j++ {
			put(n, fmt.Sprintf("ns/p%d", j), fmt.Sprintf("10.%d.0.%d", i, j))
		}
	}
	requireConverged(t, waitConverge, all...)

	left, right := []*tnode{a, b}, []*tnode{c, d}
	partition(left, right)
	require.Eventually(t, func() bool {
		for _, n := range all {
			if n.ml.NumMembers() != 2 {
				return false
			}
		}
		return true
	}, waitMembership, pollEvery, "sides never declared each other dead: %v", func() []int {
		var c []int
		for _, n := range all {
			c = append(c, n.ml.NumMembers())
		}
		return c
	}())

	// Writes on both sides during the partition.
	for i, n := range all {
		del(n, "ns/p0")
		put(n, "ns/p1", fmt.Sprintf("10.%d.1.1", i))
		put(n, fmt.Sprintf("ns/new-%d", i), fmt.Sprintf("10.%d.9.9", i))
		del(n, fmt.Sprintf("ns/new-%d", i)) // created and deleted while partitioned
		put(n, "ns/p2", fmt.Sprintf("10.%d.2.2", i))
	}
	// Each side converges internally, but not across.
	requireConverged(t, waitConverge, a, b)
	requireConverged(t, waitConverge, c, d)
	_, ok := has(a, key("cc", crdt.KindPod, "ns/new-2"))
	require.False(t, ok, "data crossed the partition")

	for _, n := range all {
		n.Transport().UnblockAll()
	}
	// Heal: only the periodic rejoin can merge the two memberlist views.
	require.Eventually(t, func() bool {
		for _, n := range all {
			if n.ml.NumMembers() != 4 {
				return false
			}
		}
		return true
	}, waitMembership, pollEvery, "partition did not heal by itself")
	requireConverged(t, waitConverge, all...)

	lost, resurrected := 0, 0
	for _, n := range all {
		for k, w := range model {
			e, ok := has(n, k)
			switch {
			case w.deleted:
				if ok && !e.Deleted {
					resurrected++
				}
			case !ok || e.Deleted || string(e.Value) != string(w.val):
				lost++
			}
		}
	}
	require.Zero(t, lost, "lost updates")
	require.Zero(t, resurrected, "resurrected entries")
	// Whichever side's rejoin tick came first merged the views; a's own tick
	// may not have fired before c's or d's did.
	rejoins := 0.0
	for _, n := range all {
		rejoins += testutil.ToFloat64(n.m.rejoins)
	}
	require.Greater(t, rejoins, 0.0, "the views merged without a rejoin")
}

// Decommission gossips a Retire that removes the cluster's entries
// everywhere; a new daemon of the same cluster later rejoins and writes at a
// higher epoch, and its entries are accepted.
func TestRetirementAndRejoinAtHigherEpoch(t *testing.T) {
	keys := [][]byte{testKey(3)}
	a := startNode(t, "a", "c1", keys, nil)
	b := startNode(t, "b", "c2", keys, nil)
	c := startNode(t, "c", "c3", keys, nil)
	joinAll(t, a, b, c)
	for i := 0; i < 5; i++ {
		c.write(t, crdt.KindPod, fmt.Sprintf("ns/p%d", i), podValue(t, fmt.Sprintf("10.3.0.%d", i)), false)
	}
	a.write(t, crdt.KindPod, "ns/a", podValue(t, "10.1.0.1"), false)
	requireConverged(t, waitConverge, a, b, c)
	oldMax := c.rep.Digest()["c3"].Max

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.decommission(ctx))

	for _, n := range []*tnode{a, b} {
		require.Eventually(t, func() bool {
			return n.rep.Digest()["c3"].Retired >= oldMax
		}, waitConverge, pollEvery, "%s never saw the retirement", n.Name())
		for i := 0; i < 5; i++ {
			_, ok := has(n, key("c3", crdt.KindPod, fmt.Sprintf("ns/p%d", i)))
			require.False(t, ok, "retired entry still present on %s", n.Name())
		}
		_, ok := has(n, key("c1", crdt.KindPod, "ns/a"))
		require.True(t, ok, "retirement removed another cluster's entry")
	}
	require.Eventually(t, func() bool {
		for _, m := range a.Members() {
			if m.Name == "c" {
				return m.Left
			}
		}
		return false
	}, waitConverge, pollEvery)

	// Rejoin: a fresh daemon of c3 learns the retirement through
	// anti-entropy, bumps its epoch past it and writes again.
	c2 := startNode(t, "c-new", "c3", keys, nil)
	_, err := c2.Join(a.Addr())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return c2.rep.Digest()["c3"].Retired >= oldMax
	}, waitConverge, pollEvery, "new daemon did not learn the retirement")
	epoch := c2.rep.BumpEpoch()
	require.Greater(t, epoch, oldMax.Epoch())
	c2.write(t, crdt.KindPod, "ns/p0", podValue(t, "10.3.1.1"), false)
	for _, n := range []*tnode{a, b} {
		require.Eventually(t, func() bool {
			e, ok := has(n, key("c3", crdt.KindPod, "ns/p0"))
			return ok && e.Version.Epoch() == epoch && !e.Deleted
		}, waitConverge, pollEvery, "%s did not accept the rejoined cluster's write", n.Name())
	}
	requireConverged(t, waitConverge, a, b, c2)
}

// A daemon crash is not a departure: a cluster whose daemon restarts (under
// a new pod name) within ReconnectTimeout is never retired, while a cluster
// with no alive member for ReconnectTimeout is marked stale first and then
// retired by the survivors.
func TestReconnectTimeoutRetiresOnlyDeadClusters(t *testing.T) {
	keys := [][]byte{testKey(5)}
	short := func(c *Config) { c.ReconnectTimeout = 5 * time.Second }
	a := startNode(t, "a", "c1", keys, short)
	b := startNode(t, "b", "c2", keys, short)
	c := startNode(t, "c", "c3", keys, short)
	d := startNode(t, "d", "c4", keys, short)
	joinAll(t, a, b, c, d)
	c.write(t, crdt.KindPod, "ns/c", podValue(t, "10.3.0.1"), false)
	d.write(t, crdt.KindPod, "ns/d", podValue(t, "10.4.0.1"), false)
	requireConverged(t, waitConverge, a, b, c, d)

	// c restarts quickly as a new pod; d dies for good. Neither leaves.
	require.NoError(t, c.Shutdown())
	require.NoError(t, d.Shutdown())
	c1 := startNode(t, "c-1", "c3", keys, short)
	_, err := c1.Join(a.Addr(), b.Addr())
	require.NoError(t, err)

	stale := func(n *tnode, cl string) float64 {
		return testutil.ToFloat64(n.m.clusterStale.WithLabelValues(cl))
	}
	// Some survivor marks c4 stale while it still holds c4's entries: they
	// are kept until ReconnectTimeout. (Which survivor is not fixed:
	// memberlist's failure detection may reach one of them seconds after
	// the others, and the first to time out retires c4 everywhere.)
	survivors := []*tnode{a, b, c1}
	require.Eventually(t, func() bool {
		for _, n := range survivors {
			_, ok := has(n, key("c4", crdt.KindPod, "ns/d"))
			if stale(n, "c4") == 1 && ok {
				return true
			}
		}
		return false
	}, waitMembership, pollEvery, "no survivor saw c4 stale with its entries kept")

	require.Eventually(t, func() bool {
		_, ok1 := has(a, key("c4", crdt.KindPod, "ns/d"))
		_, ok2 := has(b, key("c4", crdt.KindPod, "ns/d"))
		return !ok1 && !ok2
	}, waitMembership, pollEvery, "dead cluster was never retired")
	require.Greater(t, testutil.ToFloat64(a.m.retirements.WithLabelValues("reconnect_timeout"))+
		testutil.ToFloat64(b.m.retirements.WithLabelValues("reconnect_timeout"))+
		testutil.ToFloat64(c1.m.retirements.WithLabelValues("reconnect_timeout")), 0.0)

	// The restarted cluster was never retired.
	for _, n := range []*tnode{a, b, c1} {
		require.Zero(t, n.rep.Digest()["c3"].Retired, "restarted cluster retired on %s", n.Name())
		_, ok := has(n, key("c3", crdt.KindPod, "ns/c"))
		require.True(t, ok)
	}
	require.Equal(t, 0.0, stale(a, "c3"))
}

// Rotation install -> use -> remove on a live mesh. Between the steps the
// keyrings are mixed (one node already sends with the new key while others
// still use the old primary) and updates keep flowing. A node holding only
// the retired key can no longer join, and its packets are counted.
func TestKeyRotationWithMixedKeyrings(t *testing.T) {
	k1, k2 := testKey(10), testKey(20)
	a := startNode(t, "a", "c1", [][]byte{k1}, nil)
	b := startNode(t, "b", "c2", [][]byte{k1}, nil)
	c := startNode(t, "c", "c3", [][]byte{k1}, nil)
	all := []*tnode{a, b, c}
	joinAll(t, all...)

	step := 0
	writeAll := func() {
		step++
		for _, n := range all {
			n.write(t, crdt.KindPod, fmt.Sprintf("ns/s%d", step), podValue(t, fmt.Sprintf("10.0.%d.1", step)), false)
		}
		requireConverged(t, waitConverge, all...)
	}
	writeAll()

	// 1. install k2 one node at a time
	for _, n := range all {
		require.NoError(t, n.InstallKey(k2))
		writeAll()
	}
	// 2. use k2, one node at a time (mixed primaries in between)
	require.NoError(t, a.UseKey(k2))
	require.Equal(t, k2, a.Keys()[0])
	require.Equal(t, k1, b.Keys()[0])
	writeAll()
	require.NoError(t, b.UseKey(k2))
	writeAll()
	require.NoError(t, c.UseKey(k2))
	writeAll()
	// 3. remove k1 everywhere
	for _, n := range all {
		require.NoError(t, n.RemoveKey(k1))
		require.Len(t, n.Keys(), 1)
	}
	writeAll()
	// membership survived the whole rotation
	for _, n := range all {
		require.Equal(t, 3, n.ml.NumMembers())
	}

	// A node with only the old key is rejected and counted.
	before := dropped(a, dropDecrypt)
	old := startNode(t, "old", "c9", [][]byte{k1}, nil)
	_, err := old.Join(a.Addr())
	require.Error(t, err)
	require.Eventually(t, func() bool { return dropped(a, dropDecrypt) > before }, waitEvent, pollEvery)
	require.Equal(t, 3, a.ml.NumMembers())
}

// Garbage, wrongly labelled, wrongly keyed, oversized, unknown, unsolicited
// and mis-attributed messages are dropped and counted by reason; the node
// keeps working.
func TestGarbageAndForgeriesDroppedAndCounted(t *testing.T) {
	keys := [][]byte{testKey(30)}
	a := startNode(t, "a", "c1", keys, nil)
	b := startNode(t, "b", "c2", keys, func(c *Config) { c.PeerRateLimit = 50; c.PeerRateBurst = 50 })
	joinAll(t, a, b)

	// Raw UDP garbage straight at a's socket.
	conn, err := net.Dial("udp", a.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, _ = conn.Write([]byte("\x00\x01garbage that is not memberlist"))
	// Correct label, then bytes that are not a valid ciphertext.
	lbl := []byte{244, byte(len("coastguard"))}
	lbl = append(lbl, "coastguard"...)
	_, _ = conn.Write(append(lbl, make([]byte, 64)...))
	require.Eventually(t, func() bool { return dropped(a, dropLabel) > 0 && dropped(a, dropDecrypt) > 0 },
		waitEvent, pollEvery)

	an := b.memberNode("a")
	require.NotNil(t, an)
	send := func(p []byte) { require.NoError(t, b.ml.SendBestEffort(an, p)) }
	send([]byte{99, 1, 1, 'b'})                     // unknown type
	send([]byte{byte(msgSyncReq), 1, 1, 'b', 0xff}) // truncated
	// A push claiming cluster c1's entries from b (cluster c2).
	forged := crdt.NewState("c1")
	require.NoError(t, forged.SetEpoch(forged.MinEpoch()))
	fd, _, err := forged.Write(crdt.KindPod, "ns/evil", podValue(t, "6.6.6.6"), false, 1)
	require.NoError(t, err)
	enc, err := crdt.EncodeDelta(fd)
	require.NoError(t, err)
	send(encodeDeltaMsg(msgPush, "b", 0, false, [][]byte{enc}))
	// Sync data nobody asked for.
	send(encodeDeltaMsg(msgSyncData, "b", 12345, true, [][]byte{enc}))
	// Oversized (reliable path).
	require.NoError(t, b.ml.SendReliable(an, make([]byte, MaxMessageBytes+10)))
	require.Eventually(t, func() bool {
		return dropped(a, dropUnknownType) > 0 && dropped(a, dropDecode) > 0 &&
			dropped(a, dropOriginMismatch) > 0 && dropped(a, dropUnsolicited) > 0 && dropped(a, dropOversize) > 0
	}, waitEvent, pollEvery, "drops not counted")
	_, ok := has(a, key("c1", crdt.KindPod, "ns/evil"))
	require.False(t, ok, "forged entry accepted")

	// Flooding from one sender trips its rate limit at b (limit 50/s).
	bn := a.memberNode("b")
	for i := 0; i < 300; i++ {
		_ = a.ml.SendBestEffort(bn, encodeHeads("a", []Head{{Origin: "zz", Max: 0}}))
	}
	require.Eventually(t, func() bool { return dropped(b, dropRateLimited) > 0 }, waitEvent, pollEvery)

	// Still healthy.
	// Wait (on the limiter's state, not a fixed sleep) until b accepts a's
	// messages again.
	require.Eventually(t, func() bool {
		return b.limits.tokens("a") >= float64(b.cfg.PeerRateBurst)/2
	}, waitConverge, pollEvery, "b's rate limiter for a never refilled")
	a.write(t, crdt.KindPod, "ns/ok", podValue(t, "10.1.1.1"), false)
	requireConverged(t, waitConverge, a, b)
}
