package gossip

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/rand"
	"math"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Issue 29, item 2 over real loopback memberlist with encryption: a key
// holder (the shared gossip key and its own cluster's signing key) forges
// memberlist messages about another cluster's member.

// mlAlive and mlDead mirror memberlist's alive and dead messages, encoded
// as memberlist encodes them (msgpack, by field name).
type mlAlive struct {
	Incarnation uint32
	Node        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Vsn         []uint8
}

type mlDead struct {
	Incarnation uint32
	Node        string
	From        string
}

// forgePacket is what a key holder sends: one memberlist message of type
// typ, msgpack-encoded, encrypted with the gossip key (version 1, the
// label as authenticated data) behind the label header.
func forgePacket(t *testing.T, key []byte, typ byte, body any) []byte {
	t.Helper()
	p, err := sealPacket(key, typ, body)
	require.NoError(t, err)
	return p
}

// sealPacket is forgePacket's body, shared with the e2e rogue agent.
func sealPacket(key []byte, typ byte, body any) ([]byte, error) {
	var plain bytes.Buffer
	plain.WriteByte(typ)
	if err := codec.NewEncoder(&plain, &codec.MsgpackHandle{}).Encode(body); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	label := "coastguard"
	out := []byte{mlHasLabelMsg, byte(len(label))}
	out = append(out, label...)
	out = append(out, 1) // encryption version 1: no padding
	out = append(out, nonce...)
	return gcm.Seal(out, nonce, plain.Bytes(), []byte(label)), nil
}

// mlPushNodeState mirrors memberlist's pushNodeState.
type mlPushNodeState struct {
	Name        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Incarnation uint32
	State       uint8
	Vsn         []uint8
}

// forgePushPull opens a TCP stream to the node and sends a push/pull (join)
// whose only node state is a (as alive), encrypted as memberlist encrypts
// a stream: [label header] encryptMsg, length, then version 1 AES-GCM
// with the type, the length and the label as authenticated data.
func forgePushPull(t *testing.T, key []byte, to *tnode, a mlAlive) {
	t.Helper()
	var plain bytes.Buffer
	plain.WriteByte(mlPushPullMsg)
	enc := codec.NewEncoder(&plain, &codec.MsgpackHandle{})
	require.NoError(t, enc.Encode(&mlPushPullHeader{Nodes: 1, Join: true}))
	require.NoError(t, enc.Encode(&mlPushNodeState{Name: a.Node, Addr: a.Addr, Port: a.Port, Meta: a.Meta,
		Incarnation: a.Incarnation, State: 0, Vsn: a.Vsn}))
	block, err := aes.NewCipher(key)
	require.NoError(t, err)
	gcm, err := cipher.NewGCM(block)
	require.NoError(t, err)
	nonce := make([]byte, gcm.NonceSize())
	_, err = rand.Read(nonce)
	require.NoError(t, err)
	label := "coastguard"
	n := 1 + len(nonce) + plain.Len() + gcm.Overhead()
	frame := []byte{mlEncryptMsg, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	aad := append(bytes.Clone(frame), label...)
	frame = append(frame, 1)
	frame = append(frame, nonce...)
	frame = gcm.Seal(frame, nonce, plain.Bytes(), aad)
	out := append([]byte{mlHasLabelMsg, byte(len(label))}, label...)
	c, err := net.Dial("tcp", to.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(append(out, frame...))
	require.NoError(t, err)
}

// sendUDP sends p to the node's gossip address.
func sendUDP(t *testing.T, to *tnode, p []byte) {
	t.Helper()
	c, err := net.Dial("udp", to.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(p)
	require.NoError(t, err)
}

// forgedAlive is an alive message about member, at its real address, with
// meta and incarnation inc.
func forgedAlive(t *testing.T, member *tnode, inc uint32, meta []byte) mlAlive {
	t.Helper()
	host, port, err := net.SplitHostPort(member.Addr())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return mlAlive{Incarnation: inc, Node: member.Name(), Addr: net.ParseIP(host).To4(), Port: uint16(p),
		Meta: meta, Vsn: []uint8{1, 5, 2, 0, 0, 0}}
}

// clusterOf is how v sees member's cluster and liveness.
func clusterOf(v *tnode, member string) (string, bool) {
	c, alive, _ := v.members.lookup(member)
	return c, alive
}

func TestAttackForgedAliveRefused(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	keys := [][]byte{key}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1)))
	x := startNode(t, "x", "c2", keys, signed(t, signingKey(2))) // the cluster the attacker wants gone
	v := startNode(t, "v", "c3", keys, signed(t, signingKey(3))) // a victim observer
	rogue := startNode(t, "rogue", "c9", keys, signed(t, signingKey(9)))
	joinAll(t, a, x, v, rogue)
	x.write(t, crdt.KindPod, "ns/web", podValue(t, "10.2.0.5"), false)
	requireConverged(t, waitConverge, a, x, v, rogue)

	rogueSigner := NewSigner(signingKey(9))
	const wrap = math.MaxUint32

	// 1. The attack of the issue: one alive at 2^32-1 re-labelling x as
	// a member of the rogue's cluster, validly signed by the rogue's key.
	// Refused on the wire before memberlist applies it.
	relabel := encodeSignedMeta("x", "c9", "", true, false, rogueSigner, 512)
	before := dropped(v, dropIncarnation)
	sendUDP(t, v, forgePacket(t, key, mlAliveMsg, forgedAlive(t, x, wrap, relabel)))
	sendUDP(t, a, forgePacket(t, key, mlAliveMsg, forgedAlive(t, x, wrap, relabel)))
	require.Eventually(t, func() bool {
		return dropped(v, dropIncarnation) > before && dropped(a, dropIncarnation) > 0
	}, waitEvent, pollEvery, "alive at 2^32-1 not refused")

	// 1b. x's own genuine signed metadata, replayed at 2^32-1, to x
	// itself (whose refutation would wrap to 0) and to v: refused on the
	// wire too; the signature cannot help, it does not cover incarnations.
	genuine := v.members.node("x")
	require.NotNil(t, genuine)
	gm, err := parseMeta(genuine.Meta)
	require.NoError(t, err)
	require.True(t, gm.signed())
	nx, nv := dropped(x, dropIncarnation), dropped(v, dropIncarnation)
	sendUDP(t, x, forgePacket(t, key, mlAliveMsg, forgedAlive(t, x, wrap, genuine.Meta)))
	sendUDP(t, v, forgePacket(t, key, mlAliveMsg, forgedAlive(t, x, wrap, genuine.Meta)))
	require.Eventually(t, func() bool {
		return dropped(x, dropIncarnation) > nx && dropped(v, dropIncarnation) > nv
	}, waitEvent, pollEvery, "replayed metadata at 2^32-1 not refused")

	// 2. The same re-label at a plausible incarnation reaches the Alive
	// delegate: x is bound to c2, its cluster cannot change.
	sendUDP(t, v, forgePacket(t, key, mlAliveMsg, forgedAlive(t, x, 50, relabel)))
	require.Eventually(t, func() bool { return dropped(v, dropMetaCluster) > 0 }, waitEvent, pollEvery,
		"re-label of a known member not refused")

	// 3. x's own cluster with metadata signed by another key, and with
	// unsigned (version 1) metadata.
	wrongKey := encodeSignedMeta("x", "c2", "", true, false, rogueSigner, 512)
	sendUDP(t, v, forgePacket(t, key, mlAliveMsg, forgedAlive(t, x, 51, wrongKey)))
	require.Eventually(t, func() bool { return dropped(v, crdt.ReasonKeyMismatch) > 0 }, waitEvent, pollEvery,
		"metadata signed by another cluster's key not refused as a key mismatch")
	sendUDP(t, v, forgePacket(t, key, mlAliveMsg, forgedAlive(t, x, 52, encodeMeta("c2", "", false, true))))
	require.Eventually(t, func() bool { return dropped(v, dropMetaUnsigned) > 0 }, waitEvent, pollEvery,
		"unsigned metadata not refused")

	// 4. A new member name claiming x's cluster (the empty-view gate and
	// the retire fallback count members by cluster): it needs c2's key.
	ghost := forgedAlive(t, x, 1, encodeSignedMeta("ghost", "c2", "", true, false, rogueSigner, 512))
	ghost.Node = "ghost"
	n := dropped(v, crdt.ReasonKeyMismatch)
	sendUDP(t, v, forgePacket(t, key, mlAliveMsg, ghost))
	require.Eventually(t, func() bool { return dropped(v, crdt.ReasonKeyMismatch) > n }, waitEvent, pollEvery)

	// 5. A dead at 2^32-1 (the refutation would wrap): refused too.
	n = dropped(v, dropIncarnation)
	sendUDP(t, v, forgePacket(t, key, mlDeadMsg, mlDead{Incarnation: wrap, Node: "x", From: "rogue"}))
	require.Eventually(t, func() bool { return dropped(v, dropIncarnation) > n }, waitEvent, pollEvery)

	// 6. The same through a push/pull stream (what a join sends): refused
	// whole before memberlist merges it.
	n = dropped(v, dropIncarnation)
	forgePushPull(t, key, v, forgedAlive(t, x, wrap, relabel))
	require.Eventually(t, func() bool { return dropped(v, dropIncarnation) > n }, waitEvent, pollEvery,
		"push/pull with an incarnation at the wrap not refused")

	// x is still c2's, alive, at every node, and its data flows.
	for _, n := range []*tnode{a, v, rogue} {
		c, alive := clusterOf(n, "x")
		require.Equal(t, "c2", c, "x re-labelled at %s", n.Name())
		require.True(t, alive, "x not alive at %s", n.Name())
		_, _, known := n.members.lookup("ghost")
		require.False(t, known, "a ghost member of c2 was admitted at %s", n.Name())
	}
	x.write(t, crdt.KindPod, "ns/after", podValue(t, "10.2.0.6"), false)
	requireConverged(t, waitConverge, a, x, v, rogue)
	require.Zero(t, v.rep.Digest()["c2"].Retired)
}

// A relabel by a validly signed claim from a node name nobody knows yet is
// the one thing first use cannot tell apart; it binds the name, not the
// cluster: the real member of that name is then refused at that node.
func TestMetaBindingIsFirstUse(t *testing.T) {
	ma := newMemberAuth(nil, false)
	m1 := encodeMeta("c1", "", true, false)
	reason, err := ma.check("n1", m1)
	require.NoError(t, err, reason)
	reason, err = ma.check("n1", encodeMeta("c2", "", true, false))
	require.Error(t, err)
	require.Equal(t, dropMetaCluster, reason)
	reason, err = ma.check("n1", encodeMeta("c1", "v2", false, false)) // flags and build may change
	require.NoError(t, err, reason)
	require.Equal(t, "c1", ma.clusterOf("n1"))
	reason, _ = ma.check("n2", []byte{1})
	require.Equal(t, dropMetaInvalid, reason)
	reason, _ = ma.check("n2", encodeMeta("", "", false, false))
	require.Equal(t, dropMetaInvalid, reason)
}

// Unsigned metadata under signatures: refused by default; with
// AllowUnsignedMeta (rolling upgrade) accepted except for a name that
// signed, and never across clusters.
func TestMetaUnsignedPolicy(t *testing.T) {
	own := NewSigner(signingKey(3))
	c1 := NewSigner(signingKey(1))
	newTrust := func() *Trust {
		tr, err := NewTrust(nil, false, "c3", own.PublicKey(), nil, testLogger())
		require.NoError(t, err)
		return tr
	}
	strict := newMemberAuth(newTrust(), false)
	reason, err := strict.check("old", encodeMeta("c1", "", true, false))
	require.Error(t, err)
	require.Equal(t, dropMetaUnsigned, reason)

	rolling := newMemberAuth(newTrust(), true)
	_, err = rolling.check("old", encodeMeta("c1", "", true, false))
	require.NoError(t, err, "a previous-version daemon during a rolling upgrade")
	_, err = rolling.check("new", encodeSignedMeta("new", "c1", "", true, false, c1, 512))
	require.NoError(t, err)
	reason, err = rolling.check("new", encodeMeta("c1", "", true, false))
	require.Error(t, err, "a signed name falls back to unsigned")
	require.Equal(t, dropMetaUnsigned, reason)
	_, err = rolling.check("other", encodeMeta("c1", "", true, false))
	require.NoError(t, err, "an old pod of a cluster in mid-rollout, first seen after a new one")
	reason, err = rolling.check("new", encodeMeta("c2", "", true, false))
	require.Error(t, err, "a signed name re-labelled unsigned")
	require.Equal(t, dropMetaCluster, reason)
	_, err = rolling.check("old", encodeMeta("c1", "", false, false))
	require.NoError(t, err, "the pinned old-version member itself, unchanged cluster")
}

func TestSignedMetaFormat(t *testing.T) {
	sg := NewSigner(signingKey(1))
	long := string(bytes.Repeat([]byte{'c'}, 253))
	build := string(bytes.Repeat([]byte{'v'}, 64))
	b := encodeSignedMeta(string(bytes.Repeat([]byte{'n'}, 256)), long, build, true, true, sg, 512)
	require.LessOrEqual(t, len(b), 512, "fits memberlist's NodeMeta limit at the longest cluster ID and build")
	// a version 1 reader (decodeMeta before version 2) reads the same fields
	c, v, f, err := decodeMeta(b)
	require.NoError(t, err)
	require.Equal(t, long, c)
	require.Equal(t, build, v)
	require.Equal(t, byte(metaWriter|metaLeaving), f)
	m, err := parseMeta(b)
	require.NoError(t, err)
	require.True(t, m.signed())
	require.Nil(t, m.endorse)
	require.True(t, ed25519.Verify(sg.PublicKey(), metaSigMessage(string(bytes.Repeat([]byte{'n'}, 256)), long, f, build), m.sig))

	// an endorsed signer carries its endorsement when it fits
	es := NewEndorsedSigner(signingKey(2), Endorse("c1", signingKey(1), pub(signingKey(2))))
	m, err = parseMeta(encodeSignedMeta("n", "c1", "v1", false, false, es, 512))
	require.NoError(t, err)
	require.Len(t, m.endorse, crdt.EndorseSize)
	m, err = parseMeta(encodeSignedMeta("n", long, build, false, false, es, 512))
	require.NoError(t, err)
	require.Nil(t, m.endorse, "left out when it does not fit")

	// truncated or padded trailers are refused
	good := encodeSignedMeta("n", "c1", "", false, false, sg, 512)
	_, err = parseMeta(good[:len(good)-1])
	require.Error(t, err)
	_, err = parseMeta(append(bytes.Clone(good), 0))
	require.Error(t, err)
}

// A rotated cluster's member re-pins a receiver that trusted the old key
// from its metadata alone (the endorsement rides in it).
func TestMetaEndorsedRotation(t *testing.T) {
	own := NewSigner(signingKey(3))
	tr, err := NewTrust(map[string][]byte{"c1": pub(signingKey(1))}, false, "c3", own.PublicKey(), nil, testLogger())
	require.NoError(t, err)
	ma := newMemberAuth(tr, false)
	es := NewEndorsedSigner(signingKey(2), Endorse("c1", signingKey(1), pub(signingKey(2))))
	_, err = ma.check("n", encodeSignedMeta("n", "c1", "", true, false, es, 512))
	require.NoError(t, err)
	require.Equal(t, pub(signingKey(2)), tr.Key("c1"))
	reason, err := ma.check("m", encodeSignedMeta("m", "c1", "", true, false,
		NewEndorsedSigner(signingKey(4), Endorse("c1", signingKey(9), pub(signingKey(4)))), 512))
	require.Error(t, err, "endorsed by a key that is not c1's")
	require.Equal(t, crdt.ReasonKeyMismatch, reason)
	reason, err = ma.check("k", encodeSignedMeta("k", "c1", "", true, false, NewSigner(signingKey(2)), 512))
	require.NoError(t, err, "c1's current key")
	_ = reason
	bad := encodeSignedMeta("j", "c1", "", true, false, NewSigner(signingKey(2)), 512)
	bad[len(bad)-1] ^= 0xff // a signature that does not verify under the right key
	reason, err = ma.check("j", bad)
	require.Error(t, err)
	require.Equal(t, dropMetaSignature, reason, "a bad signature, not another key")
}

func TestIncarnationBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	inc := newIncarnations(func() time.Time { return now })
	ok := func(node string, i uint32) error { return inc.admit([]incClaim{{node, i}}) }
	require.NoError(t, ok("x", 7))
	require.NoError(t, ok("x", 7), "same incarnation")
	require.NoError(t, ok("x", 3), "older: memberlist ignores it")
	require.NoError(t, ok("x", 8), "+1: a refutation")
	require.ErrorIs(t, ok("x", math.MaxUint32), errIncarnation, "the wrap")
	require.ErrorIs(t, ok("x", incCeiling), errIncarnation)
	require.ErrorIs(t, ok("y", incFirstMax), errIncarnation, "first seen high")
	require.NoError(t, ok("y", incFirstMax-1))
	// below 2^24 raises are free (an honest node after a long partition)
	require.NoError(t, ok("x", 1_000_000))
	require.NoError(t, ok("x", incFirstMax-1))
	// above, the credit: a burst, then incPerSecond
	require.NoError(t, ok("x", incFirstMax-1+incBurst))
	require.ErrorIs(t, ok("x", incFirstMax-1+incBurst+2), errIncarnation, "credit spent")
	now = now.Add(2 * time.Second)
	require.NoError(t, ok("x", incFirstMax-1+incBurst+2), "refilled")
	require.ErrorIs(t, ok("x", incFirstMax+2*incBurst), errIncarnation, "one raise beyond the burst")
	// a packet is admitted whole or not at all
	require.ErrorIs(t, inc.admit([]incClaim{{"z", 1}, {"x", math.MaxUint32}}), errIncarnation)
	require.NoError(t, ok("z", incFirstMax-1), "z was not recorded by the refused packet")
	// stepping towards the ceiling takes decades
	steps := float64(incCeiling-incFirstMax) / incPerSecond
	require.Greater(t, steps/(365*24*3600), 60.0)
}

// Mixed versions over real memberlist: a daemon that announces what the
// previous release announces (unsigned version 1 metadata, no heartbeats;
// here a node without a signing key, which checks no signature either) is
// refused by an upgraded daemon, and kept as a member by one started with
// AllowUnsignedMeta. It reads the upgraded daemons' version 2 metadata.
func TestMixedVersionMembership(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	rolling := startNode(t, "rolling", "c1", keys, func(c *Config) {
		signed(t, signingKey(1))(c)
		c.AllowUnsignedMeta = true
	})
	strict := startNode(t, "strict", "c2", keys, signed(t, signingKey(2)))
	old := startNode(t, "old", "c3", keys, nil) // no signing key: version 1 metadata
	_, err := strict.Join(rolling.Addr())
	require.NoError(t, err)
	_, err = old.Join(rolling.Addr(), strict.Addr())
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		c, alive := clusterOf(rolling, "old")
		return c == "c3" && alive
	}, waitMembership, pollEvery, "the rolling-upgrade daemon did not keep the old member")
	require.Eventually(t, func() bool {
		c1, a1 := clusterOf(old, "rolling")
		c2, a2 := clusterOf(old, "strict")
		return c1 == "c1" && a1 && c2 == "c2" && a2
	}, waitMembership, pollEvery, "the old daemon does not read version 2 metadata")
	require.Eventually(t, func() bool { return dropped(strict, dropMetaUnsigned) > 0 }, waitMembership, pollEvery)
	_, alive := clusterOf(strict, "old")
	require.False(t, alive, "the upgraded daemon admitted unsigned metadata")
	require.Zero(t, dropped(rolling, dropMetaUnsigned))
}
