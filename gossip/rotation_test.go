package gossip

import (
	"crypto/ed25519"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Key rotation (docs/SECURITY.md): cluster c1 rotates from key A to key B,
// B endorsed by A. The new writer re-publishes at a new epoch and seals the
// prior ones. These tests run the real Trust against real crdt.States.

type rotationFixture struct {
	oldKey, newKey ed25519.PrivateKey
	endorsement    []byte
	w1             *crdt.State // c1's writer with the old key
	pods           []string
}

func seedKey(b byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = b
	}
	return ed25519.NewKeyFromSeed(s)
}

func pub(k ed25519.PrivateKey) []byte { return k.Public().(ed25519.PublicKey) }

func newRotationFixture(t *testing.T) *rotationFixture {
	t.Helper()
	f := &rotationFixture{oldKey: seedKey(1), newKey: seedKey(2)}
	f.endorsement = Endorse("c1", f.oldKey, pub(f.newKey))
	f.w1 = crdt.NewState("c1")
	f.w1.SetSigner(NewSigner(f.oldKey))
	require.NoError(t, f.w1.SetEpoch(1))
	for _, p := range []string{"ns/a", "ns/b", "ns/c", "ns/d"} {
		_, _, err := f.w1.Write(crdt.KindPod, p, []byte{0x80}, false, 1)
		require.NoError(t, err)
		f.pods = append(f.pods, p)
	}
	return f
}

// replica is a verifying replica in another cluster.
func replica(t *testing.T, self string, pins map[string][]byte, repin func(string, []byte, []byte) error) (*crdt.State, *Trust) {
	t.Helper()
	own := seedKey(byte(len(self) + 10))
	tr, err := NewTrust(pins, false, self, pub(own), nil, testLogger())
	require.NoError(t, err)
	tr.Repin = repin
	s := crdt.NewState(self)
	s.SetVerifier(tr, nil)
	return s, tr
}

// syncFrom applies everything src has that dst lacks; it returns the
// first refusal.
func syncFrom(dst, src *crdt.State) error {
	for _, d := range src.DeltaSince(dst.Digest(), 1000) {
		b, err := crdt.EncodeDelta(d) // through the wire format
		if err != nil {
			return err
		}
		d, err = crdt.DecodeDelta(b)
		if err != nil {
			return err
		}
		if _, err := dst.Apply(d); err != nil {
			return err
		}
	}
	return nil
}

func livePods(s *crdt.State, origin string) map[string]crdt.Version {
	out := map[string]crdt.Version{}
	s.Range(origin, crdt.KindPod, func(e crdt.Entry) bool {
		if !e.Deleted {
			out[e.Name] = e.Version
		}
		return true
	})
	return out
}

// rotate is the takeover of c1 by a writer with the new key: it has c1's
// state, re-publishes every live object at epoch 2 and seals epoch 1.
func (f *rotationFixture) rotate(t *testing.T, sg crdt.Signer) *crdt.State {
	t.Helper()
	w2 := f.takeover(t, sg)
	for _, p := range f.pods {
		_, _, err := w2.Write(crdt.KindPod, p, []byte{0x80}, false, 2)
		require.NoError(t, err)
	}
	_, _, err := w2.SealPriorEpochs()
	require.NoError(t, err)
	return w2
}

// takeover: a writer of c1 with c1's state and the key sg, at epoch 2.
func (f *rotationFixture) takeover(t *testing.T, sg crdt.Signer) *crdt.State {
	t.Helper()
	w2 := crdt.NewState("c1")
	require.NoError(t, syncFrom(w2, f.w1)) // restored from its store: not re-verified
	w2.SetSigner(sg)
	// As in the daemon: the writer verifies too, its own pin being its key.
	own, err := NewTrust(nil, false, "c1", sg.PublicKey(), nil, testLogger())
	require.NoError(t, err)
	w2.SetVerifier(own, nil)
	require.NoError(t, w2.SetEpoch(2))
	return w2
}

func TestRotationEndorsedKeyIsAcceptedWithoutGap(t *testing.T) {
	f := newRotationFixture(t)
	var repinned [][]byte
	r, tr := replica(t, "c2", nil, func(o string, old, key []byte) error {
		repinned = append(repinned, old, key)
		return nil
	})
	require.NoError(t, syncFrom(r, f.w1))
	require.Equal(t, pub(f.oldKey), tr.Key("c1"), "pinned on first use")
	require.Len(t, livePods(r, "c1"), 4)

	// The new writer's first write, before the re-publish reached r: the
	// endorsement rides with it.
	w2 := f.rotate(t, NewEndorsedSigner(f.newKey, f.endorsement))
	_, _, err := w2.Write(crdt.KindPod, "ns/e", []byte{0x80}, false, 3)
	require.NoError(t, err)
	require.NoError(t, syncFrom(r, w2))
	require.Equal(t, pub(f.newKey), tr.Key("c1"), "re-pinned to the endorsed key")
	require.Equal(t, [][]byte{pub(f.oldKey), pub(f.newKey)}, repinned, "the rotated pin is persisted")
	live := livePods(r, "c1")
	require.Len(t, live, 5, "no live pod lost across the rotation")
	for _, v := range live {
		require.Equal(t, uint32(2), v.Epoch(), "everything re-published with the new key")
	}
	require.Equal(t, r.Digest()["c1"], w2.Digest()["c1"], "converged")

	// Mid-takeover (re-publishing, not sealed yet), a replica that
	// re-pinned from the endorsement but lacks some old-key data takes it
	// from a relay that has not seen the rotation and presents the old
	// key: not refused as a rogue, the predecessor's signatures stay valid.
	relay, _ := replica(t, "c3", nil, nil)
	require.NoError(t, syncFrom(relay, f.w1))
	partial, ptr := replica(t, "c4", nil, nil)
	_, err = partial.Apply(f.w1.DeltaSince(partial.Digest(), 2)[0])
	require.NoError(t, err)
	w3 := f.takeover(t, NewEndorsedSigner(f.newKey, f.endorsement))
	d, _, err := w3.Write(crdt.KindPod, f.pods[0], []byte{0x80}, false, 4)
	require.NoError(t, err)
	_, err = partial.Apply(d)
	require.NoError(t, err)
	require.Equal(t, pub(f.newKey), ptr.Key("c1"))
	require.NoError(t, syncFrom(partial, relay), "old-key data from a lagging relay is not refused")
	require.Len(t, livePods(partial, "c1"), 4, "the old pods the re-publish has not reached yet are kept")
	select {
	case m := <-tr.Mismatches():
		t.Fatalf("an endorsed rotation must not be reported as a mismatch: %+v", m)
	default:
	}
}

func TestRotationUnendorsedKeyChangeIsRefused(t *testing.T) {
	f := newRotationFixture(t)
	r, tr := replica(t, "c2", nil, nil)
	require.NoError(t, syncFrom(r, f.w1))
	before := livePods(r, "c1")

	// plain new key, no endorsement: a rogue claiming c1
	w2 := f.rotate(t, NewSigner(f.newKey))
	err := syncFrom(r, w2)
	require.Equal(t, crdt.ReasonKeyMismatch, crdt.TrustReason(err), "%v", err)
	require.Equal(t, pub(f.oldKey), tr.Key("c1"))
	require.Equal(t, before, livePods(r, "c1"), "nothing of c1 changed")
	m := <-tr.Mismatches()
	require.Equal(t, pub(f.newKey), m.Presented)

	// self-endorsed (the rogue signs its own key over): refused too
	rogue := seedKey(9)
	w3 := f.rotate(t, NewEndorsedSigner(f.newKey, Endorse("c1", rogue, pub(f.newKey))))
	require.Error(t, syncFrom(r, w3))
	require.Equal(t, pub(f.oldKey), tr.Key("c1"))

	// an endorsement for another cluster does not transfer
	w4 := f.rotate(t, NewEndorsedSigner(f.newKey, Endorse("c9", f.oldKey, pub(f.newKey))))
	require.Error(t, syncFrom(r, w4))
	require.Equal(t, pub(f.oldKey), tr.Key("c1"))
	require.Equal(t, before, livePods(r, "c1"))

	// a tampered endorsement
	bad := append([]byte(nil), f.endorsement...)
	bad[len(bad)-1] ^= 1
	require.Error(t, syncFrom(r, f.rotate(t, NewEndorsedSigner(f.newKey, bad))))
	require.Equal(t, pub(f.oldKey), tr.Key("c1"))
}

func TestRotationFreshPeerVerifiesEverything(t *testing.T) {
	f := newRotationFixture(t)
	r, _ := replica(t, "c2", nil, nil)
	require.NoError(t, syncFrom(r, f.w1))
	w2 := f.rotate(t, NewEndorsedSigner(f.newKey, f.endorsement))
	require.NoError(t, syncFrom(r, w2))

	// A fresh peer learns c1 only through the relay r: every record it
	// takes verifies with the new key.
	fresh, ftr := replica(t, "c5", nil, nil)
	require.NoError(t, syncFrom(fresh, r))
	require.Equal(t, pub(f.newKey), ftr.Key("c1"))
	require.Equal(t, livePods(w2, "c1"), livePods(fresh, "c1"))
	require.Equal(t, w2.Digest()["c1"], fresh.Digest()["c1"])

	// A peer that pinned the old key and was offline during the rotation
	// re-pins through the endorsement the relay forwards.
	offline, otr := replica(t, "c6", map[string][]byte{"c1": pub(f.oldKey)}, nil)
	require.NoError(t, syncFrom(offline, r))
	require.Equal(t, pub(f.newKey), otr.Key("c1"))
	require.Equal(t, livePods(w2, "c1"), livePods(offline, "c1"))
}

// Issue 29, item 7: a leaked rotated-out key endorsed its successor and
// signs nothing else a receiver takes: no retirement (it used to freeze c1
// for ever with Retire{c1, 2^64-1}), no head, no entry of the successor's
// epoch. And any signed retirement, even with the current key, is bounded
// by the versions c1 has signed.
func TestAttackRotatedOutKeySignsNothing(t *testing.T) {
	f := newRotationFixture(t)
	r, tr := replica(t, "c2", nil, nil)
	require.NoError(t, syncFrom(r, f.w1))
	w2 := f.rotate(t, NewEndorsedSigner(f.newKey, f.endorsement))
	require.NoError(t, syncFrom(r, w2))
	require.Equal(t, pub(f.newKey), tr.Key("c1"))
	before, digest := livePods(r, "c1"), r.Digest()["c1"]
	top := crdt.Version(math.MaxUint64)

	old := NewSigner(f.oldKey)
	_, err := r.ApplyRetire(crdt.Retire{Origin: "c1", UpTo: top, Key: pub(f.oldKey),
		Sig: old.Sign(crdt.MarkSigMessage("c1", crdt.MarkRetire, top))})
	require.Equal(t, crdt.ReasonKeyMismatch, crdt.TrustReason(err), "%v", err)

	_, err = r.Apply(crdt.Delta{Origin: "c1", From: digest.Max, To: digest.Max, Key: pub(f.oldKey),
		Head: top, HeadSig: old.Sign(crdt.MarkSigMessage("c1", crdt.MarkHead, top))})
	require.Equal(t, crdt.ReasonKeyMismatch, crdt.TrustReason(err), "%v", err)

	forger := crdt.NewState("c1")
	forger.SetSigner(old)
	require.NoError(t, forger.SetEpoch(3))
	d, _, err := forger.Write(crdt.KindPod, "ns/evil", []byte{0x80}, false, 9)
	require.NoError(t, err)
	d.From = digest.Max
	_, err = r.Apply(d)
	require.Equal(t, crdt.ReasonKeyMismatch, crdt.TrustReason(err), "%v", err)

	// The current key: a retirement above what c1 has signed is refused.
	_, err = r.ApplyRetire(w2.SignRetire(crdt.Retire{Origin: "c1", UpTo: top}))
	require.Equal(t, crdt.ReasonUnprovenWatermark, crdt.TrustReason(err), "%v", err)

	require.Equal(t, before, livePods(r, "c1"), "nothing of c1 changed")
	require.Equal(t, digest, r.Digest()["c1"])

	// c1 keeps writing and is heard; its own decommission is honoured.
	_, _, err = w2.Write(crdt.KindPod, "ns/new", []byte{0x80}, false, 5)
	require.NoError(t, err)
	require.NoError(t, syncFrom(r, w2))
	require.Len(t, livePods(r, "c1"), len(before)+1)
	_, err = r.ApplyRetire(w2.SignRetire(w2.RetireRecord("c1")))
	require.NoError(t, err)
	require.Empty(t, livePods(r, "c1"))
}
