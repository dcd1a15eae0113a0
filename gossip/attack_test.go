package gossip

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"math"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Issue 15, attacks 1-4 over real gossip: every node holds the gossip key,
// so memberlist lets them all in; only origin signatures stop a node from
// speaking for another cluster. Each attack is refused and counted in
// coastguard_gossip_dropped_total{reason}.

func signingKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

// signed starts a node whose cluster signs with priv and verifies
// everyone else on first use (the daemon's default mode).
func signed(t *testing.T, priv ed25519.PrivateKey) func(*Config) {
	return func(c *Config) {
		sg := NewSigner(priv)
		tr, err := NewTrust(nil, false, c.ClusterID, sg.PublicKey(), nil, testLogger())
		require.NoError(t, err)
		c.Signer, c.Trust = sg, tr
		c.ReconnectTimeout = time.Hour
	}
}

func TestAttacksRefusedOverGossip(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1))) // c1's writer
	v := startNode(t, "v", "c3", keys, signed(t, signingKey(3))) // a victim cluster
	b := startNode(t, "b", "c2", keys, signed(t, signingKey(2))) // a member of c2
	joinAll(t, a, v, b)
	a.write(t, crdt.KindPod, "ns/web", podValue(t, "10.1.0.5"), false)
	a.write(t, crdt.KindPod, "ns/db", podValue(t, "10.1.0.6"), false)
	requireConverged(t, waitConverge, a, v, b) // v and b pin c1's key on first use

	// A key holder that forges c1's records with its own signing key. Its
	// membership metadata names its own cluster c9: an alive message
	// claiming c1 with another key than c1's is refused before memberlist
	// takes it (issue 29, item 2, TestAttackForgedAliveRefused), so the
	// forgeries travel as relayed data (heads, pulls, the push tree),
	// which any member may relay.
	rogue := startNode(t, "rogue", "c1", keys, memberOf(t, "c9", signingKey(9)))
	joinAll(t, a, v, b, rogue)
	victimBefore := dump(v.rep)
	c1Max := v.rep.Digest()["c1"].Max
	vn := rogue.memberNode("v")
	require.NotNil(t, vn)
	push := func(from *tnode, to string, d crdt.Delta) {
		t.Helper()
		enc, err := crdt.EncodeDelta(d)
		require.NoError(t, err)
		require.NoError(t, from.ml.SendReliable(from.memberNode(to), encodeDeltaMsg(msgForward, from.Name(), 0, false, [][]byte{enc})))
	}

	// 1. forged entries under c1's ID: the rogue's own writes, relayed
	// and announced like real ones.
	rogue.rep.View(func(s *crdt.State) { require.NoError(t, s.SetEpoch(7)) }) // above c1's real versions
	evil, err := rogue.rep.Write(crdt.KindPod, "ns/evil", podValue(t, "169.254.169.254"), false)
	require.NoError(t, err)
	push(rogue, "v", evil)
	rogue.announce("c1", false)
	require.Eventually(t, func() bool {
		return dropped(v, crdt.ReasonKeyMismatch) > 0 && dropped(a, crdt.ReasonKeyMismatch) > 0
	}, waitConverge, pollEvery, "forged c1 entries not refused at the victim and at c1's writer")

	// 2. an empty reset stream that would wipe c1.
	push(rogue, "v", crdt.Delta{Origin: "c1", From: 0, To: c1Max, Reset: true, Final: true})
	require.Eventually(t, func() bool { return dropped(v, crdt.ReasonUnprovenReset) > 0 },
		waitConverge, pollEvery, "wiping reset not refused")

	// 3. a watermark jump to 2^64-1 that would freeze c1.
	push(rogue, "v", crdt.Delta{Origin: "c1", From: c1Max, To: math.MaxUint64})
	require.Eventually(t, func() bool { return dropped(v, crdt.ReasonUnprovenWatermark) > 0 },
		waitConverge, pollEvery, "watermark jump not refused")

	// 4. a member of c2 retires c1 (live members), at c1's writer too.
	ret := encodeRetires("b", []crdt.Retire{{Origin: "c1", UpTo: math.MaxUint64}})
	require.NoError(t, b.ml.SendReliable(b.memberNode("v"), ret))
	require.NoError(t, b.ml.SendReliable(b.memberNode("a"), ret))
	require.Eventually(t, func() bool {
		return dropped(v, crdt.ReasonRetireRefused) > 0 && dropped(a, crdt.ReasonRetireRefused) > 0
	}, waitConverge, pollEvery, "retire of a live cluster not refused")

	_, ok := has(v, key("c1", crdt.KindPod, "ns/evil"))
	require.False(t, ok, "forged pod reached the victim")
	_, ok = has(a, key("c1", crdt.KindPod, "ns/evil"))
	require.False(t, ok, "forged pod reached c1's own writer")
	require.Equal(t, victimBefore, dump(v.rep), "victim's view of c1 changed")

	// c1 is neither frozen nor retired: its next write arrives.
	a.write(t, crdt.KindPod, "ns/after", podValue(t, "10.1.0.7"), false)
	require.Eventually(t, func() bool { _, ok := has(v, key("c1", crdt.KindPod, "ns/after")); return ok },
		waitConverge, pollEvery)
	require.Equal(t, v.rep.Digest()["c1"].Retired, crdt.Version(0))
	_, ok = has(b, key("c1", crdt.KindPod, "ns/after"))
	require.Eventually(t, func() bool { _, ok := has(b, key("c1", crdt.KindPod, "ns/after")); return ok },
		waitConverge, pollEvery, "relayed signed data still flows to a later member")
	_ = ok
}

// A graceful decommission is signed by the origin and honoured by members
// that still see it alive.
// memberOf starts a node whose memberlist identity is cluster (signed
// with priv, verifying everyone else on first use) while its replica keeps
// the origin startNode gave it: a key holder that forges another cluster's
// records under its own membership.
func memberOf(t *testing.T, cluster string, priv ed25519.PrivateKey) func(*Config) {
	return func(c *Config) {
		sg := NewSigner(priv)
		tr, err := NewTrust(nil, false, cluster, sg.PublicKey(), nil, testLogger())
		require.NoError(t, err)
		c.ClusterID, c.Signer, c.Trust = cluster, sg, tr
		c.ReconnectTimeout = time.Hour
	}
}

func TestSignedDecommissionHonoured(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1)))
	v := startNode(t, "v", "c3", keys, signed(t, signingKey(3)))
	joinAll(t, a, v)
	a.write(t, crdt.KindPod, "ns/web", podValue(t, "10.1.0.5"), false)
	requireConverged(t, waitConverge, a, v)
	ctx, cancel := contextWithTimeout(10 * time.Second)
	defer cancel()
	require.NoError(t, a.decommission(ctx))
	require.Eventually(t, func() bool { return v.rep.Digest()["c1"].Retired > 0 },
		waitConverge, pollEvery, "signed decommission not honoured")
	_, ok := has(v, key("c1", crdt.KindPod, "ns/web"))
	require.False(t, ok)
	require.Zero(t, dropped(v, crdt.ReasonRetireRefused))
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Attack 7: a key-less client makes memberlist buffer up to 20 MiB per TCP
// stream before decryption fails. The guard refuses such streams after
// their 5-byte header and caps concurrent streams per source.
func TestAttackPreAuthStreamsBounded(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, func(c *Config) { c.LimitLoopbackStreams = true })
	b := startNode(t, "b", "c2", keys, nil)
	joinAll(t, a, b) // real encrypted streams still pass

	hdr := func(typ byte, n uint32) []byte {
		p := []byte{mlHasLabelMsg, byte(len("coastguard"))}
		p = append(p, "coastguard"...)
		p = append(p, typ)
		return binary.BigEndian.AppendUint32(p, n)
	}
	refused := func(p []byte) {
		t.Helper()
		c, err := net.Dial("tcp", a.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(p)
		require.NoError(t, err)
		// The guard closes the stream; writing the announced 20 MiB fails
		// long before it is all sent.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		junk := make([]byte, 64<<10)
		sent := 0
		for sent < 20<<20 {
			n, err := c.Write(junk)
			sent += n
			if err != nil {
				break
			}
		}
		require.Less(t, sent, 20<<20, "server kept reading an unauthenticated 20 MiB stream")
	}
	refused(hdr(mlEncryptMsg, 20<<20))
	refused(hdr(6 /* pushPullMsg, plaintext */, 0))
	require.Eventually(t, func() bool { return dropped(a, dropPreAuth) >= 2 }, waitEvent, pollEvery)

	// Slow clients hold at most MaxInboundStreamsPerIP slots.
	var conns []net.Conn
	for i := 0; i < MaxInboundStreamsPerIP+4; i++ {
		c, err := net.Dial("tcp", a.Addr())
		require.NoError(t, err)
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	require.Eventually(t, func() bool { return dropped(a, dropStreamLimit) >= 4 }, waitEvent, pollEvery)

	// The mesh still works.
	a.write(t, crdt.KindPod, "ns/ok", podValue(t, "10.1.1.1"), false)
	requireConverged(t, waitConverge, a, b)
}
