package gossip

import (
	"bytes"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Issue 29, item 1 over real gossip (loopback memberlist, encryption,
// signatures, trust on first use): a key holder relays genuinely signed
// entries of c1 in deltas whose framing lies. The skip leaves no hole and
// the resurrection does not survive: the victim's watermark moves only to
// a head whose origin-signed state digest it reproduces, every refusal is
// counted as completeness_mismatch, and honest anti-entropy repairs it.

// relayDelta sends d from a key holder as a relayed (forwarded) delta,
// the path any member may use for any origin.
func relayDelta(t *testing.T, from *tnode, to string, d crdt.Delta) {
	t.Helper()
	enc, err := crdt.EncodeDelta(d)
	require.NoError(t, err)
	require.NoError(t, from.ml.SendReliable(from.memberNode(to), encodeDeltaMsg(msgForward, from.Name(), 0, false, [][]byte{enc})))
}

func c1Max(n *tnode) crdt.Version { return n.rep.Digest()["c1"].Max }

func TestCompletenessSkipOverGossip(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1)))         // c1's writer
	b := startNode(t, "b", "c2", keys, signed(t, signingKey(2)))         // an honest relay
	v := startNode(t, "v", "c3", keys, signed(t, signingKey(3)))         // the victim
	rogue := startNode(t, "rogue", "c4", keys, signed(t, signingKey(4))) // a key holder
	joinAll(t, a, b, v, rogue)
	a.write(t, crdt.KindPod, "ns/web", podValue(t, "10.1.0.5"), false)
	a.write(t, crdt.KindPod, "ns/db", podValue(t, "10.1.0.6"), false)
	requireConverged(t, waitConverge, a, b, v, rogue)
	base := c1Max(v)

	// v and the rogue hear from nobody else for a while; c1 writes a new
	// MCNP and a pod, which reach b.
	partition([]*tnode{v, rogue}, []*tnode{a, b})
	a.write(t, crdt.KindPolicy, "ns/deny-db", []byte{0x80}, false)
	late := a.write(t, crdt.KindPod, "ns/late", podValue(t, "10.1.0.7"), false)
	require.Eventually(t, func() bool { return c1Max(b) == late.To }, waitConverge, pollEvery)

	// Skip: only the newest signed entry, From at the victim's watermark;
	// then an empty unsigned delta over the range it now holds the top of.
	skip := late
	skip.From = base
	relayDelta(t, rogue, "v", skip)
	require.Eventually(t, func() bool { return dropped(v, crdt.ReasonCompletenessMismatch) >= 1 },
		waitEvent, pollEvery, "skip not refused")
	relayDelta(t, rogue, "v", crdt.Delta{Origin: "c1", From: base, To: late.To})
	require.Eventually(t, func() bool { return dropped(v, crdt.ReasonCompletenessMismatch) >= 2 },
		waitEvent, pollEvery, "empty delta not refused")
	_, ok := has(v, key("c1", crdt.KindPod, "ns/late"))
	require.True(t, ok, "the signed entry itself is merged")
	time.Sleep(time.Second) // anti-entropy between v and the rogue runs
	require.Equal(t, base, c1Max(v), "the victim's watermark stays below the hole")
	require.Equal(t, base, c1Max(rogue), "and is not re-forwarded as complete")

	// Heal: the hole is filled everywhere, nothing is lost for good.
	for _, n := range []*tnode{a, b, v, rogue} {
		n.Transport().UnblockAll()
	}
	requireConverged(t, waitConverge, a, b, v, rogue)
	for _, n := range []*tnode{v, rogue} {
		_, ok := has(n, key("c1", crdt.KindPolicy, "ns/deny-db"))
		require.True(t, ok, "%s misses the skipped MCNP", n.Name())
		require.Equal(t, late.To, c1Max(n))
	}
	require.Zero(t, dropped(b, crdt.ReasonCompletenessMismatch), "honest traffic is never refused")
}

func TestCompletenessResurrectOverGossip(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1)))
	b := startNode(t, "b", "c2", keys, signed(t, signingKey(2)))
	joinAll(t, a, b)
	web := a.write(t, crdt.KindPod, "ns/web", podValue(t, "10.1.0.5"), false)
	allow := a.write(t, crdt.KindPolicy, "ns/allow-all", []byte{0x80}, false)
	del := a.write(t, crdt.KindPolicy, "ns/allow-all", nil, true)
	a.write(t, crdt.KindPolicy, "ns/deny-all", []byte{0x80}, false)
	gc, _, err := a.rep.CollectGarbage(del.To)
	require.NoError(t, err)
	require.NoError(t, a.Publish(gc))
	requireConverged(t, waitConverge, a, b)
	var proof crdt.Proof
	a.rep.View(func(s *crdt.State) { proof = s.Proof("c1") })
	require.Equal(t, del.To, proof.Mark.GC)

	// A fresh pod of c5 is reached first by a key holder that holds no
	// c1 data of its own (so its honest anti-entropy cannot help).
	f := startNode(t, "f", "c5", keys, signed(t, signingKey(5)))
	rogue := startNode(t, "rogue", "c6", keys, signed(t, signingKey(6)))
	joinAll(t, rogue, f)
	evil := crdt.Delta{Origin: "c1", From: 0, To: proof.Mark.Head, GC: proof.Mark.GC, GCSig: proof.GCSig,
		Reset: true, Final: true, Entries: []crdt.Entry{web.Entries[0], allow.Entries[0]},
		Mark: proof.Mark, Key: signingKey(1).Public().(ed25519.PublicKey)}
	relayDelta(t, rogue, "f", evil)
	require.Eventually(t, func() bool { return dropped(f, crdt.ReasonCompletenessMismatch) >= 1 },
		waitEvent, pollEvery, "resurrecting reset not refused")
	d := f.rep.Digest()["c1"]
	require.Less(t, d.Max, d.GC, "not proven: the fresh pod stays stale until an honest reset")

	// It meets the mesh: the first honest reset drops the deleted MCNP and
	// brings the live one.
	joinAll(t, a, b, rogue, f)
	requireConverged(t, waitConverge, a, b, f)
	_, ok := has(f, key("c1", crdt.KindPolicy, "ns/allow-all"))
	require.False(t, ok, "the deleted allow-all MCNP survived")
	_, ok = has(f, key("c1", crdt.KindPolicy, "ns/deny-all"))
	require.True(t, ok, "the live deny MCNP is missing")
}

// Honest churn over real gossip (rewrites, deletes, a GC, a partition and
// its heal) converges with every watermark proven by a state mark, and no
// honest delta is ever counted as a completeness mismatch.
func TestCompletenessHonestChurnOverGossip(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1)))
	b := startNode(t, "b", "c2", keys, signed(t, signingKey(2)))
	v := startNode(t, "v", "c3", keys, signed(t, signingKey(3)))
	joinAll(t, a, b, v)
	name := func(i int) string { return "ns/p" + string(rune('a'+i%20)) }
	for i := 0; i < 120; i++ {
		switch i {
		case 60:
			partition([]*tnode{v}, []*tnode{a, b})
		case 90:
			for _, n := range []*tnode{a, b, v} {
				n.Transport().UnblockAll()
			}
		}
		a.write(t, crdt.KindPod, name(i), podValue(t, "10.1.0.7"), i%7 == 3)
		b.write(t, crdt.KindPod, name(i*3), podValue(t, "10.2.0.7"), i%5 == 1)
		if i == 70 {
			gc, _, err := a.rep.CollectGarbage(c1Max(a) - 10)
			require.NoError(t, err)
			require.NoError(t, a.Publish(gc))
		}
	}
	requireConverged(t, waitConverge, a, b, v)
	for _, n := range []*tnode{a, b, v} {
		for _, o := range []string{"c1", "c2"} {
			d := n.rep.Digest()[o]
			require.Equal(t, d.Top, d.Max, "%s: %s's watermark proven up to everything it holds", n.Name(), o)
		}
		require.Zero(t, dropped(n, crdt.ReasonCompletenessMismatch), "%s counted honest traffic", n.Name())
	}
}
