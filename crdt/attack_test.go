package crdt

import (
	"bytes"
	"crypto/ed25519"
	"math"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The attacks of issue 15 against the merge itself. A key holder of the
// gossip layer can hand any replica any delta or retirement; with a
// Verifier installed, only what the origin signed is merged.

type edSigner struct{ priv ed25519.PrivateKey }

func (s edSigner) PublicKey() []byte      { return s.priv.Public().(ed25519.PublicKey) }
func (s edSigner) Sign(msg []byte) []byte { return ed25519.Sign(s.priv, msg) }

func newEdSigner(seed byte) edSigner {
	return edSigner{ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))}
}

// pinVerifier trusts a fixed key per origin (a trust bundle).
type pinVerifier map[string]ed25519.PublicKey

func (p pinVerifier) Verify(origin string, key, msg, sig []byte) error {
	pin, ok := p[origin]
	if !ok {
		return trustErr(ReasonUnknownKey, origin, "no key")
	}
	if key != nil && !bytes.Equal(key, pin) {
		return trustErr(ReasonKeyMismatch, origin, "presented key differs from pin")
	}
	if len(sig) != SigSize || !ed25519.Verify(pin, msg, sig) {
		return trustErr(ReasonBadSignature, origin, "signature does not verify")
	}
	return nil
}

func (p pinVerifier) Key(origin string) []byte { return p[origin] }

type trustFixture struct {
	c1, rogue edSigner
	pins      pinVerifier
	writer    *State // c1's writer
	victim    *State // a replica in another cluster
	live      map[string]bool
}

func newTrustFixture(t *testing.T, pods int) *trustFixture {
	t.Helper()
	f := &trustFixture{c1: newEdSigner(1), rogue: newEdSigner(2), live: map[string]bool{"c1": true}}
	f.pins = pinVerifier{"c1": ed25519.PublicKey(f.c1.PublicKey())}
	auth := func(o string) bool { return !f.live[o] }
	f.writer = NewState("c1")
	f.writer.SetSigner(f.c1)
	f.writer.SetVerifier(f.pins, auth)
	require.NoError(t, f.writer.SetEpoch(1))
	f.victim = NewState("c2")
	f.victim.SetVerifier(f.pins, auth)
	for i := 0; i < pods; i++ {
		d, _, err := f.writer.Write(KindPod, "ns/p"+string(rune('a'+i)), []byte{0x80}, false, int64(i))
		require.NoError(t, err)
		_, err = f.victim.Apply(d)
		require.NoError(t, err)
	}
	require.Equal(t, pods, f.victim.Len("c1"))
	return f
}

func requireReason(t *testing.T, err error, reason string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrUntrusted)
	require.Equal(t, reason, TrustReason(err), err.Error())
}

// Attack 1: entries written under another cluster's ID.
func TestAttackForgedEntriesRefused(t *testing.T) {
	f := newTrustFixture(t, 2)
	before := f.victim.Digest()
	max := before["c1"].Max
	forged := Entry{Key: Key{"c1", KindPod, "ns/evil"}, Version: max + 1, Value: []byte{0x80}}

	// unsigned
	_, err := f.victim.Apply(Delta{Origin: "c1", From: max, To: max + 1, Entries: []Entry{forged}})
	requireReason(t, err, ReasonUnsigned)
	// signed with the rogue's own key, presenting it
	forged.Sig = f.rogue.Sign(EntrySigMessage(&forged))
	_, err = f.victim.Apply(Delta{Origin: "c1", From: max, To: max + 1, Entries: []Entry{forged}, Key: f.rogue.PublicKey()})
	requireReason(t, err, ReasonKeyMismatch)
	// signed with the rogue key, presenting none
	_, err = f.victim.Apply(Delta{Origin: "c1", From: max, To: max + 1, Entries: []Entry{forged}})
	requireReason(t, err, ReasonBadSignature)
	// a real signature on altered content (relay tampering)
	real, ok := f.writer.Get(Key{"c1", KindPod, "ns/pa"})
	require.True(t, ok)
	real.Value = []byte{0x81}
	real.Version = max + 1
	_, err = f.victim.Apply(Delta{Origin: "c1", From: max, To: max + 1, Entries: []Entry{real}})
	requireReason(t, err, ReasonBadSignature)
	// the same reaches c1's own writer: refused there too
	_, err = f.writer.Apply(Delta{Origin: "c1", From: max, To: max + 1, Entries: []Entry{forged}})
	requireReason(t, err, ReasonBadSignature)

	assert.Equal(t, before, f.victim.Digest(), "victim unchanged")
	_, ok = f.victim.Get(Key{"c1", KindPod, "ns/evil"})
	assert.False(t, ok)
}

// Attack 2: an empty reset stream wipes an origin.
func TestAttackEmptyResetDoesNotWipe(t *testing.T) {
	f := newTrustFixture(t, 5)
	max := f.victim.Digest()["c1"].Max
	_, err := f.victim.Apply(Delta{Origin: "c1", From: 0, To: max, Reset: true, Final: true})
	requireReason(t, err, ReasonUnprovenReset)
	assert.Equal(t, 5, f.victim.Len("c1"), "nothing the origin's signed GC watermark does not explain is dropped")

	// An unsigned GC watermark that would make the victim stale is refused.
	_, err = f.victim.Apply(Delta{Origin: "c1", From: 0, To: max, GC: max, Reset: true, Final: true})
	requireReason(t, err, ReasonUnsigned)
	assert.Equal(t, 5, f.victim.Len("c1"))
}

// Attack 3: a watermark jump to 2^64-1 freezes an origin.
func TestAttackWatermarkJumpRefused(t *testing.T) {
	f := newTrustFixture(t, 2)
	max := f.victim.Digest()["c1"].Max
	for _, d := range []Delta{
		{Origin: "c1", From: max, To: math.MaxUint64},
		{Origin: "c1", From: 0, To: math.MaxUint64, Gap: true},
		{Origin: "c1", From: max, To: math.MaxUint64, Head: math.MaxUint64, HeadSig: f.rogue.Sign(MarkSigMessage("c1", MarkHead, math.MaxUint64))},
	} {
		_, err := f.victim.Apply(d)
		require.Error(t, err)
		assert.Contains(t, []string{ReasonUnprovenWatermark, ReasonBadSignature}, TrustReason(err))
	}
	assert.Equal(t, max, f.victim.Digest()["c1"].Max)
	// later real writes still land
	d, _, err := f.writer.Write(KindPod, "ns/later", []byte{0x80}, false, 9)
	require.NoError(t, err)
	_, err = f.victim.Apply(d)
	require.NoError(t, err)
	_, ok := f.victim.Get(Key{"c1", KindPod, "ns/later"})
	assert.True(t, ok)
}

// Attack 4: anyone retires any cluster, saturating its writer's epoch.
func TestAttackRetireNeedsAuthority(t *testing.T) {
	f := newTrustFixture(t, 3)
	max := f.victim.Digest()["c1"].Max
	bad := Retire{Origin: "c1", UpTo: math.MaxUint64}
	_, err := f.victim.ApplyRetire(bad)
	requireReason(t, err, ReasonRetireRefused)
	_, err = f.writer.ApplyRetire(bad)
	requireReason(t, err, ReasonRetireRefused)
	assert.False(t, f.writer.NeedsEpochBump(), "the writer keeps writing")
	// a rogue signature is not the origin's
	bad.Sig, bad.Key = f.rogue.Sign(MarkSigMessage("c1", MarkRetire, bad.UpTo)), f.rogue.PublicKey()
	_, err = f.victim.ApplyRetire(bad)
	requireReason(t, err, ReasonKeyMismatch)
	// the retired watermark riding a delta is refused the same way
	_, err = f.victim.Apply(Delta{Origin: "c1", From: max, To: max, Retired: max})
	requireReason(t, err, ReasonRetireRefused)
	assert.Equal(t, 3, f.victim.Len("c1"))

	// Once membership has seen no live member for the reconnect timeout,
	// an unsigned retirement up to the highest signed version is honoured,
	// one above it is not.
	f.live["c1"] = false
	_, err = f.victim.ApplyRetire(Retire{Origin: "c1", UpTo: math.MaxUint64})
	requireReason(t, err, ReasonUnprovenWatermark)
	_, err = f.victim.ApplyRetire(Retire{Origin: "c1", UpTo: max})
	require.NoError(t, err)
	assert.Equal(t, 0, f.victim.Len("c1"))
}

// A graceful decommission is signed by the origin and honoured even while
// its members are alive.
func TestSignedRetireHonoured(t *testing.T) {
	f := newTrustFixture(t, 2)
	r := f.writer.SignRetire(f.writer.RetireRecord("c1"))
	require.Len(t, r.Sig, SigSize)
	_, err := f.victim.ApplyRetire(r)
	require.NoError(t, err)
	assert.Equal(t, 0, f.victim.Len("c1"))
}

// Relays forward what the origin signed, unchanged, on every path:
// DeltaSince rebuilds deltas from state with the stored signatures and
// proofs, including GC watermarks, seals and resets of a stale replica.
func TestRelayedSignaturesVerify(t *testing.T) {
	f := newTrustFixture(t, 4)
	// tombstone + GC on the writer
	d, _, err := f.writer.Write(KindPod, "ns/pa", nil, true, 10)
	require.NoError(t, err)
	_, err = f.victim.Apply(d)
	require.NoError(t, err)
	gc, _ := f.writer.CollectGarbage(d.To)
	_, err = f.victim.Apply(gc)
	require.NoError(t, err)

	// a fresh third replica learns everything through the relay
	third := NewState("c3")
	third.SetVerifier(f.pins, nil)
	for i := 0; i < 3; i++ {
		ds := f.victim.DeltaSince(third.Digest(), 2)
		for _, d := range ds {
			b, err := EncodeDelta(d)
			require.NoError(t, err)
			d2, err := DecodeDelta(b)
			require.NoError(t, err)
			_, err = third.Apply(d2)
			require.NoError(t, err)
		}
	}
	assert.Equal(t, f.victim.Digest()["c1"], third.Digest()["c1"])
	assert.Equal(t, f.writer.Digest()["c1"].Hash, third.Digest()["c1"].Hash)

	// a stale replica (behind the GC watermark) is reset through the relay
	stale := NewState("c4")
	stale.SetVerifier(f.pins, nil)
	for range 3 {
		for _, d := range third.DeltaSince(stale.Digest(), 0) {
			_, err := stale.Apply(d)
			require.NoError(t, err)
		}
	}
	assert.Equal(t, third.Digest()["c1"], stale.Digest()["c1"])

	// a sealed takeover: new epoch, retire of prior epochs, signed
	require.NoError(t, f.writer.SetEpoch(f.writer.MinEpoch()))
	d, _, err = f.writer.Write(KindPod, "ns/pb", []byte{0x80}, false, 11)
	require.NoError(t, err)
	seal, _, err := f.writer.SealPriorEpochs()
	require.NoError(t, err)
	_, err = f.victim.Apply(d)
	require.NoError(t, err)
	_, err = f.victim.ApplyRetire(seal)
	require.NoError(t, err)
	for _, d := range f.victim.DeltaSince(third.Digest(), 0) {
		_, err := third.Apply(d)
		require.NoError(t, err)
	}
	assert.Equal(t, f.victim.Digest()["c1"], third.Digest()["c1"])
}

// Cold start: restored entries keep their signatures and proofs, so a
// restarted relay still serves verifiable deltas (nothing re-verified).
func TestRestoreKeepsSignatures(t *testing.T) {
	f := newTrustFixture(t, 3)
	var entries []Entry
	f.victim.Range("c1", KindPod, func(e Entry) bool { entries = append(entries, e); return true })
	for _, e := range entries {
		require.Len(t, e.Sig, SigSize)
	}
	r := NewState("c2")
	r.SetVerifier(f.pins, nil)
	require.NoError(t, r.Restore(f.victim.Digest(), entries))
	r.RestoreProofs(map[string]Proof{"c1": f.victim.Proof("c1")})
	fresh := NewState("c3")
	fresh.SetVerifier(f.pins, nil)
	for _, d := range r.DeltaSince(fresh.Digest(), 0) {
		_, err := fresh.Apply(d)
		require.NoError(t, err)
	}
	assert.Equal(t, f.victim.Digest()["c1"], fresh.Digest()["c1"])
}

func BenchmarkSignEntry(b *testing.B) {
	s := newEdSigner(1)
	e := Entry{Key: Key{"eu-1", KindPod, "default/web-5d9c7b6f4-abcde"}, Version: MakeVersion(3, 12345), Value: bytes.Repeat([]byte{1}, 200), Stamp: 1}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Sign(EntrySigMessage(&e))
	}
}

func BenchmarkVerifyEntry(b *testing.B) {
	s := newEdSigner(1)
	v := pinVerifier{"eu-1": ed25519.PublicKey(s.PublicKey())}
	e := Entry{Key: Key{"eu-1", KindPod, "default/web-5d9c7b6f4-abcde"}, Version: MakeVersion(3, 12345), Value: bytes.Repeat([]byte{1}, 200), Stamp: 1}
	sig := s.Sign(EntrySigMessage(&e))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify("eu-1", nil, EntrySigMessage(&e), sig); err != nil {
			b.Fatal(err)
		}
	}
}

// Attack 8 (values): an 11-byte PodValue declaring a huge IP list must not
// make the decoder allocate for it.
func TestAttackValueDeclaredLengthsBounded(t *testing.T) {
	// {"v":1,"ip":array32(10,000,000)}
	evil := []byte{0x82, 0xa1, 'v', 0x01, 0xa2, 'i', 'p', 0xdd, 0x00, 0x98, 0x96}
	evil = append(evil, 0x80)
	var ms1, ms2 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	var v PodValue
	err := DecodeValue(evil, &v)
	runtime.ReadMemStats(&ms2)
	require.Error(t, err)
	assert.Less(t, ms2.TotalAlloc-ms1.TotalAlloc, uint64(1<<20), "decoder allocated for the declared length")

	// Legitimate values still decode, and every real encoding passes the
	// check.
	good, err := EncodeValue(&PodValue{IPs: []string{"10.0.0.1"}, Labels: map[string]string{"app": "web"}, Phase: "Running"})
	require.NoError(t, err)
	require.NoError(t, checkMsgpackLengths(good))
	require.NoError(t, DecodeValue(good, &v))
	require.Equal(t, []string{"10.0.0.1"}, v.IPs)
	require.Error(t, checkMsgpackLengths(append(good, 0)), "trailing bytes")
	require.Error(t, checkMsgpackLengths(good[:len(good)-1]), "truncated")
}

func FuzzCheckMsgpackLengths(f *testing.F) {
	good, _ := EncodeValue(&PodValue{IPs: []string{"10.0.0.1"}, Labels: map[string]string{"a": "b"}})
	f.Add(good)
	f.Add([]byte{0x82, 0xa1, 'v', 0x01, 0xa2, 'i', 'p', 0xdd, 0x00, 0x98, 0x96, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkMsgpackLengths(b) != nil {
			return
		}
		// Whatever passes is one complete value: every decode of it stays
		// within its bytes (no panic, bounded allocation).
		var v PodValue
		_ = DecodeValue(b, &v)
	})
}

// Attack 8 (budget): a hash-mismatch reset reply used to ignore the entry
// budget and build the whole origin at once.
func TestAttackMismatchResetRespectsBudget(t *testing.T) {
	x, y := NewState(""), NewState("")
	const n = 3000
	mk := func(extra string) []Delta {
		var out []Delta
		d := Delta{Origin: "a", From: 0, To: MakeVersion(1, n+1)}
		for i := 0; i < n; i++ {
			d.Entries = append(d.Entries, Entry{Key: Key{"a", KindPod, "ns/p" + strconv.Itoa(i)}, Version: MakeVersion(1, uint64(i+1)), Value: []byte("v")})
			if len(d.Entries) == MaxDeltaEntries/2 {
				d.To = d.Entries[len(d.Entries)-1].Version
				out = append(out, d)
				d = Delta{Origin: "a", From: d.To, To: MakeVersion(1, n+1)}
			}
		}
		d.Entries = append(d.Entries, Entry{Key: Key{"a", KindPod, extra}, Version: MakeVersion(1, n+1), Value: []byte("v")})
		return append(out, d)
	}
	mustApply(t, x, mk("ns/x")...)
	mustApply(t, y, mk("ns/y")...)
	total := 0
	for _, d := range y.DeltaSince(x.Digest(), 100) {
		total += len(d.Entries)
	}
	assert.LessOrEqual(t, total, 100, "reset reply over budget")
	assert.Positive(t, total)
}

// Attack 8 (origins, entries): 5000 fake origins used to make the digest
// impossible to encode; one origin could grow without bound.
func TestAttackOriginAndEntryLimits(t *testing.T) {
	s := NewState("c2")
	s.SetLimits(Limits{MaxOrigins: 50, MaxEntriesPerOrigin: 10})
	refused := 0
	for i := 0; i < 5000; i++ {
		o := "fake-" + strconv.Itoa(i)
		_, err := s.Apply(Delta{Origin: o, From: 0, To: 1, Entries: []Entry{{Key: Key{o, KindPod, "ns/p"}, Version: 1, Value: []byte{0x80}}}})
		if err != nil {
			require.Equal(t, ReasonOriginLimit, TrustReason(err))
			refused++
		}
	}
	assert.Equal(t, 4950, refused)
	assert.Len(t, s.Digest(), 50)
	_, err := EncodeDigest(s.Digest())
	require.NoError(t, err, "digest stays encodable")

	var es []Entry
	for i := 0; i < 20; i++ {
		es = append(es, Entry{Key: Key{"fake-0", KindPod, "ns/q" + strconv.Itoa(i)}, Version: Version(2 + i), Value: []byte{0x80}})
	}
	_, err = s.Apply(Delta{Origin: "fake-0", From: 1, To: 21, Entries: es})
	require.Equal(t, ReasonEntryLimit, TrustReason(err))
	assert.Equal(t, 1, s.Len("fake-0"))
}

// signingWriter is cluster c1's writer at epoch 1, signing with key 1.
func signingWriter(f *testing.F) (edSigner, *State) {
	sg := newEdSigner(1)
	w := NewState("c1")
	w.SetSigner(sg)
	if err := w.SetEpoch(1); err != nil {
		f.Fatal(err)
	}
	return sg, w
}

// FuzzVerifySignedRetire: a verifying replica applies only the retirement
// its origin signed, whatever the up-to version, signature and key.
func FuzzVerifySignedRetire(f *testing.F) {
	sg, w := signingWriter(f)
	if _, _, err := w.Write(KindPod, "ns/a", []byte{0x80}, false, 1); err != nil {
		f.Fatal(err)
	}
	r := w.SignRetire(w.RetireRecord("c1"))
	f.Add(uint64(r.UpTo), r.Sig, r.Key)
	f.Add(uint64(r.UpTo)+1, r.Sig, r.Key)
	f.Add(uint64(r.UpTo), []byte{1}, r.Key)
	pins := pinVerifier{"c1": ed25519.PublicKey(sg.PublicKey())}
	f.Fuzz(func(t *testing.T, upTo uint64, sig, key []byte) {
		rt := Retire{Origin: "c1", UpTo: Version(upTo), Sig: sig, Key: key}
		s := NewState("c2")
		s.SetVerifier(pins, nil)
		if _, err := s.ApplyRetire(rt); err == nil && rt.UpTo > 0 && (rt.UpTo != r.UpTo || !bytes.Equal(rt.Sig, r.Sig)) {
			t.Fatalf("a retirement the origin did not sign was accepted: %+v", rt)
		}
	})
}

// FuzzVerifySignedDelta: signed deltas (the 13-element wire form) decode,
// round-trip and are verified without panics; tampered ones never change
// a verifying replica's view of the origin beyond what the origin signed.
func FuzzVerifySignedDelta(f *testing.F) {
	sg, w := signingWriter(f)
	for _, n := range []string{"ns/a", "ns/b"} {
		d, _, err := w.Write(KindPod, n, []byte{0x80}, false, 1)
		if err != nil {
			f.Fatal(err)
		}
		b, err := EncodeDelta(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	gc, _ := w.CollectGarbage(w.Digest()["c1"].Max)
	if b, err := EncodeDelta(gc); err == nil {
		f.Add(b)
	}
	pins := pinVerifier{"c1": ed25519.PublicKey(sg.PublicKey())}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDelta(b)
		if err != nil {
			return
		}
		b2, err := EncodeDelta(d)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := DecodeDelta(b2); err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		s := NewState("c2")
		s.SetVerifier(pins, nil)
		if _, err := s.Apply(d); err != nil {
			return
		}
		// Whatever was accepted is signed by c1's key.
		s.Range("c1", KindPod, func(e Entry) bool {
			if !ed25519.Verify(ed25519.PublicKey(sg.PublicKey()), EntrySigMessage(&e), e.Sig) {
				t.Fatalf("accepted entry %s without c1's signature", e.Key)
			}
			return true
		})
	})
}

// Control: without a Verifier (main before issue 15, or --insecure-gossip)
// each of attacks 1-4 succeeds. This keeps the tests above honest: they
// fail if the Verifier stops being consulted.
func TestAttacksSucceedWithoutVerifier(t *testing.T) {
	open := func() (*State, Version) {
		f := newTrustFixture(t, 5)
		s := NewState("c2")
		for _, d := range f.writer.DeltaSince(s.Digest(), 0) {
			_, err := s.Apply(d)
			require.NoError(t, err)
		}
		return s, s.Digest()["c1"].Max
	}
	s, max := open()
	_, err := s.Apply(Delta{Origin: "c1", From: max, To: max + 1, Entries: []Entry{{Key: Key{"c1", KindPod, "ns/evil"}, Version: max + 1, Value: []byte{0x80}}}})
	require.NoError(t, err)
	_, ok := s.Get(Key{"c1", KindPod, "ns/evil"})
	assert.True(t, ok, "attack 1 (forged entry) succeeds unverified")

	s, max = open()
	_, err = s.Apply(Delta{Origin: "c1", From: 0, To: max, Reset: true, Final: true})
	require.NoError(t, err)
	assert.Equal(t, 0, s.Len("c1"), "attack 2 (empty reset) wipes unverified")

	s, max = open()
	_, err = s.Apply(Delta{Origin: "c1", From: max, To: math.MaxUint64})
	require.NoError(t, err)
	assert.Equal(t, Version(math.MaxUint64), s.Digest()["c1"].Max, "attack 3 (watermark jump) freezes unverified")

	s, _ = open()
	_, err = s.ApplyRetire(Retire{Origin: "c1", UpTo: math.MaxUint64})
	require.NoError(t, err)
	assert.Equal(t, 0, s.Len("c1"), "attack 4 (retire) succeeds unverified")
}

// Issue 29, item 6: the caps counted entries, not bytes, so one origin at
// 2^20 entries held 330-570 MiB, and 600 values of 256 KiB added 155 MiB.
// Bytes are now counted per origin and over all remote origins, before a
// delta is stored, and released when records go.
func TestAttackOriginByteLimits(t *testing.T) {
	s := NewState("c2")
	s.SetLimits(Limits{MaxBytesPerOrigin: 4 << 20, MaxBytes: 6 << 20})
	big := make([]byte, 256<<10)
	fill := func(o string) (stored int, err error) {
		for i := 0; i < 600; i++ {
			v := Version(i + 1)
			_, err = s.Apply(Delta{Origin: o, From: v - 1, To: v, Entries: []Entry{{Key: Key{o, KindPod, "ns/p" + strconv.Itoa(i)}, Version: v, Value: big}}})
			if err != nil {
				return i, err
			}
		}
		return 600, nil
	}
	n, err := fill("fake-0")
	require.Equal(t, ReasonByteLimit, TrustReason(err), "%v", err)
	assert.Less(t, n, 16, "one origin stopped at its byte cap")
	assert.LessOrEqual(t, s.RemoteBytes(), 4<<20)
	_, err = fill("fake-1")
	require.Equal(t, ReasonByteLimit, TrustReason(err), "%v", err)
	assert.LessOrEqual(t, s.RemoteBytes(), 6<<20, "all remote origins stopped at the total cap")

	// Released when the records go (retirement): the origin can be filled again.
	before := s.RemoteBytes()
	_, err = s.ApplyRetire(Retire{Origin: "fake-0", UpTo: s.Digest()["fake-0"].Max})
	require.NoError(t, err)
	assert.Less(t, s.RemoteBytes(), before-(3<<20))
	_, err = s.Apply(Delta{Origin: "fake-1", From: s.Digest()["fake-1"].Max, To: s.Digest()["fake-1"].Max + 1,
		Entries: []Entry{{Key: Key{"fake-1", KindPod, "ns/again"}, Version: s.Digest()["fake-1"].Max + 1, Value: big}}})
	require.NoError(t, err)
}

// Issue 29, item 6: invented origin IDs fill the origin and byte pools, but
// a cluster the replica knows independently of gossip still gets a slot,
// and its bytes are bounded by its own cap only.
func TestAttackInventedOriginsCannotStarveKnown(t *testing.T) {
	s := NewState("c2")
	known := map[string]bool{"c1": true, "c3": true}
	s.SetLimits(Limits{MaxOrigins: 8, MaxBytesPerOrigin: 2 << 20, MaxBytes: 3 << 20, Known: func(o string) bool { return known[o] }})
	one := func(o string, v Version, value []byte) error {
		_, err := s.Apply(Delta{Origin: o, From: v - 1, To: v, Entries: []Entry{{Key: Key{o, KindPod, "ns/p" + strconv.Itoa(int(v))}, Version: v, Value: value}}})
		return err
	}
	for i := 0; i < 100; i++ {
		if err := one("fake-"+strconv.Itoa(i), 1, []byte{0x80}); err != nil {
			require.Equal(t, ReasonOriginLimit, TrustReason(err))
		}
	}
	require.Len(t, s.Digest(), 8, "the unknown pool is full")
	require.Equal(t, ReasonOriginLimit, TrustReason(one("fake-late", 1, []byte{0x80})))
	require.NoError(t, one("c1", 1, []byte{0x80}), "a known cluster is never refused a slot")
	_, err := s.ApplyRetire(Retire{Origin: "c3", UpTo: 5})
	require.NoError(t, err, "nor is its retirement")

	// bytes: invented origins fill the shared pool; the known cluster
	// grows to its own cap regardless
	big := make([]byte, 256<<10)
	for o := 0; o < 8; o++ {
		for v := Version(2); v < 20; v++ {
			if err := one("fake-"+strconv.Itoa(o), v, big); err != nil {
				require.Equal(t, ReasonByteLimit, TrustReason(err))
				break
			}
		}
	}
	require.LessOrEqual(t, s.RemoteBytes(), 3<<20, "the shared pool is full")
	stored := 0
	for v := Version(2); v < 20; v++ {
		if err := one("c1", v, big); err != nil {
			require.Equal(t, ReasonByteLimit, TrustReason(err), "only c1's own cap stops it")
			break
		}
		stored++
	}
	require.GreaterOrEqual(t, stored, 6, "the known cluster was not starved by the shared pool")
	require.Less(t, stored, 9, "and stays under its own cap")
}
