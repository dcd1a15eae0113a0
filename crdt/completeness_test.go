package crdt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 29, item 1: a signature covers an entry, not a delta's (From, To]
// range. A key holder relaying signed entries used to leave a permanent hole
// (skip) or keep a deleted and collected key (resurrect). The origin now
// signs a digest of its whole state with its head (StateMark), and a
// replica moves its watermark only to a head whose digest it reproduces.

// antiEntropy brings dst up to date from src through DeltaSince, as
// anti-entropy does, for a few rounds.
func antiEntropy(t *testing.T, src, dst *State) {
	t.Helper()
	require.Zero(t, antiEntropyMismatches(t, src, dst))
}

// antiEntropyMismatches is antiEntropy that counts the deltas refused as
// completeness_mismatch (a hole found during repair) instead of failing.
func antiEntropyMismatches(t *testing.T, src, dst *State) int {
	t.Helper()
	n := 0
	for range 4 {
		for _, d := range src.DeltaSince(dst.Digest(), 0) {
			_, err := dst.Apply(d)
			if TrustReason(err) == ReasonCompletenessMismatch {
				n++
				continue
			}
			require.NoError(t, err)
		}
	}
	return n
}

// Skip: the relay forwards only the newest signed entry of c1, with From
// set to the victim's watermark (and, variant, an empty unsigned delta
// after an out-of-order arrival). The victim merges what is signed, but
// its watermark stays below the hole, the mismatch is counted, and an
// honest peer fills the hole: nothing is lost for good, and the victim
// never re-forwards the hole as complete.
func TestAttackSkipLeavesNoHole(t *testing.T) {
	for _, variant := range []string{"newest-only", "empty-after-out-of-order", "newest-only-mark-stripped"} {
		t.Run(variant, func(t *testing.T) {
			f := newTrustFixture(t, 3)
			honest := NewState("c9")
			honest.SetVerifier(f.pins, nil)
			antiEntropy(t, f.victim, honest)
			base := f.victim.Digest()["c1"].Max

			// c1 writes a new MCNP, then a pod: the relay has both.
			mcnp, _, err := f.writer.Write(KindPolicy, "ns/deny-db", []byte{0x80}, false, 10)
			require.NoError(t, err)
			pod, _, err := f.writer.Write(KindPod, "ns/late", []byte{0x80}, false, 11)
			require.NoError(t, err)
			for _, d := range []Delta{mcnp, pod} {
				_, err := honest.Apply(d)
				require.NoError(t, err)
			}

			var attack []Delta
			switch variant {
			case "newest-only":
				skip := pod
				skip.From = base // claims (base, pod] holds nothing else
				attack = []Delta{skip}
			case "empty-after-out-of-order":
				attack = []Delta{pod, {Origin: "c1", From: base, To: pod.To}}
			case "newest-only-mark-stripped":
				skip := pod
				skip.From, skip.Mark = base, StateMark{}
				attack = []Delta{skip}
			}
			var lastErr error
			for _, d := range attack {
				_, lastErr = f.victim.Apply(d)
			}
			if variant == "newest-only-mark-stripped" {
				// nothing to check against yet: only unproven progress
				require.NoError(t, lastErr)
				require.Equal(t, pod.To, f.victim.Digest()["c1"].Reset)
			} else {
				requireReason(t, lastErr, ReasonCompletenessMismatch)
			}
			got := f.victim.Digest()["c1"]
			assert.Equal(t, base, got.Max, "the watermark stays below the hole")
			_, ok := f.victim.Get(Key{"c1", KindPod, "ns/late"})
			assert.True(t, ok, "signed entries still merge")
			_, ok = f.victim.Get(Key{"c1", KindPolicy, "ns/deny-db"})
			assert.False(t, ok)

			// A third replica syncing from the victim is not told the
			// range is complete either.
			third := NewState("c7")
			third.SetVerifier(f.pins, nil)
			antiEntropy(t, f.victim, third)
			assert.Equal(t, base, third.Digest()["c1"].Max)

			// Repair: the honest peer sends from the proven watermark. A
			// stripped mark left only unproven progress: the honest
			// peer's mark finds the hole (counted), then fills it.
			found := antiEntropyMismatches(t, honest, f.victim)
			if variant == "newest-only-mark-stripped" {
				assert.Equal(t, 1, found)
			} else {
				assert.Zero(t, found)
			}
			_, ok = f.victim.Get(Key{"c1", KindPolicy, "ns/deny-db"})
			assert.True(t, ok, "the skipped MCNP arrived")
			assert.Equal(t, f.writer.Digest()["c1"], f.victim.Digest()["c1"])
			antiEntropy(t, f.victim, third)
			assert.Equal(t, f.writer.Digest()["c1"], third.Digest()["c1"])
		})
	}
}

// Resurrect: a fresh replica is served first with a deleted and collected
// allow-all MCNP (its old, genuinely signed version) plus a subset of the
// live keys, as a complete reset stream under c1's real GC watermark and
// state mark. The stream does not reproduce the mark: the watermark does
// not move, the mismatch is counted, and the first honest reset drops the
// deleted MCNP and brings the live deny MCNP.
func TestAttackResurrectRepaired(t *testing.T) {
	f := newTrustFixture(t, 3)
	allow, _, err := f.writer.Write(KindPolicy, "ns/allow-all", []byte{0x80}, false, 10)
	require.NoError(t, err)
	del, _, err := f.writer.Write(KindPolicy, "ns/allow-all", nil, true, 11)
	require.NoError(t, err)
	deny, _, err := f.writer.Write(KindPolicy, "ns/deny-all", []byte{0x80}, false, 12)
	require.NoError(t, err)
	gc, _ := f.writer.CollectGarbage(del.To)
	for _, d := range []Delta{allow, del, deny, gc} {
		_, err := f.victim.Apply(d)
		require.NoError(t, err)
	}
	_, ok := f.victim.Get(Key{"c1", KindPolicy, "ns/allow-all"})
	require.False(t, ok, "tombstone collected at the honest relay")

	head := f.writer.Proof("c1").Mark
	require.Equal(t, deny.To, head.Head)
	pa, ok := f.writer.Get(Key{"c1", KindPod, "ns/pa"})
	require.True(t, ok)
	for _, reset := range []bool{true, false} {
		fresh := NewState("c5")
		fresh.SetVerifier(f.pins, nil)
		evil := Delta{Origin: "c1", From: 0, To: head.Head, GC: del.To, GCSig: f.writer.Proof("c1").GCSig,
			Reset: reset, Final: reset, Entries: []Entry{pa, allow.Entries[0]}, Mark: head}
		_, err = fresh.Apply(evil)
		if reset {
			requireReason(t, err, ReasonCompletenessMismatch)
		} else {
			require.NoError(t, err, "a normal delta to a stale replica is merged, never trusted as complete")
		}
		got := fresh.Digest()["c1"]
		assert.Less(t, got.Max, got.GC, "still stale: a reset must follow")

		// honest anti-entropy (the relay sees a stale peer: reset stream)
		antiEntropy(t, f.victim, fresh)
		_, ok = fresh.Get(Key{"c1", KindPolicy, "ns/allow-all"})
		assert.False(t, ok, "the deleted allow-all MCNP is gone")
		_, ok = fresh.Get(Key{"c1", KindPolicy, "ns/deny-all"})
		assert.True(t, ok, "the live deny MCNP arrived")
		assert.Equal(t, f.writer.Digest()["c1"], fresh.Digest()["c1"])
	}
}

// A takeover from a lagging replica signs a state that receivers holding
// the previous leader's extra records do not reproduce; the seal (which
// carries the post-seal mark) lets them prove their watermark again.
func TestStateMarkAfterSeal(t *testing.T) {
	f := newTrustFixture(t, 3)
	require.NoError(t, f.writer.SetEpoch(f.writer.MinEpoch()))
	d, _, err := f.writer.Write(KindPod, "ns/pb", []byte{0x80}, false, 11)
	require.NoError(t, err)
	seal, _, err := f.writer.SealPriorEpochs()
	require.NoError(t, err)
	require.False(t, seal.Mark.IsZero())
	fresh := NewState("c5")
	fresh.SetVerifier(f.pins, nil)
	antiEntropy(t, f.victim, fresh)
	_, err = f.victim.Apply(d)
	require.NoError(t, err)
	_, err = f.victim.ApplyRetire(seal)
	require.NoError(t, err)
	_, err = fresh.ApplyRetire(seal)
	require.NoError(t, err)
	antiEntropy(t, f.victim, fresh)
	assert.Equal(t, f.writer.Digest()["c1"], f.victim.Digest()["c1"])
	assert.Equal(t, f.writer.Digest()["c1"], fresh.Digest()["c1"])
}

// Honest churn is never reported: a replica that holds a key's newer
// version (pushed ahead) cannot reproduce an older head and does not
// claim a mismatch; the newer mark proves its watermark.
func TestCompletenessChurnNotReported(t *testing.T) {
	f := newTrustFixture(t, 3)
	relay := NewState("c8")
	relay.SetVerifier(f.pins, nil)
	antiEntropy(t, f.victim, relay)
	base := f.victim.Digest()["c1"].Max
	d4, _, err := f.writer.Write(KindPod, "ns/pa", []byte{0x81}, false, 4)
	require.NoError(t, err)
	d5, _, err := f.writer.Write(KindPod, "ns/pb", []byte{0x81}, false, 5)
	require.NoError(t, err)
	d6, _, err := f.writer.Write(KindPod, "ns/pa", []byte{0x82}, false, 6)
	require.NoError(t, err)
	for _, d := range []Delta{d4, d5} {
		_, err := relay.Apply(d)
		require.NoError(t, err)
	}
	_, err = f.victim.Apply(d6) // out of order: ahead of the relay
	require.NoError(t, err)
	require.Equal(t, base, f.victim.Digest()["c1"].Max)
	for _, d := range relay.DeltaSince(f.victim.Digest(), 0) {
		_, err := f.victim.Apply(d)
		require.NoError(t, err, "an honest stream to an older head is not a mismatch")
	}
	assert.Equal(t, f.writer.Digest()["c1"], f.victim.Digest()["c1"], "the newest mark proves the watermark")
}

// A delta without a state mark (a peer before state marks, or a relay that
// strips it) still merges its signed entries, but proves nothing: the
// watermark waits for a mark (its progress is advertised in Reset).
func TestCompletenessUnmarkedDeltaProvesNothing(t *testing.T) {
	f := newTrustFixture(t, 2)
	base := f.victim.Digest()["c1"].Max
	d, _, err := f.writer.Write(KindPod, "ns/new", []byte{0x80}, false, 3)
	require.NoError(t, err)
	old := d
	old.Mark = StateMark{}
	_, err = f.victim.Apply(old)
	require.NoError(t, err)
	got := f.victim.Digest()["c1"]
	assert.Equal(t, base, got.Max)
	assert.Equal(t, d.To, got.Reset, "progress advertised")
	_, ok := f.victim.Get(Key{"c1", KindPod, "ns/new"})
	assert.True(t, ok)
	_, err = f.victim.Apply(d)
	require.NoError(t, err)
	assert.Equal(t, d.To, f.victim.Digest()["c1"].Max)
}

// A push carries its entry and the state mark that signed that entry's
// record (StateMark.HeadEntry): one verification, not two. The same entry
// relayed without the mark, or tampered with under the genuine mark, is
// verified on its own.
func TestStateMarkVouchesHeadEntry(t *testing.T) {
	f := newTrustFixture(t, 1)
	v := &countingVerifier{pinVerifier: f.pins}
	r := NewState("c6")
	r.SetVerifier(v, nil)
	antiEntropy(t, f.victim, r)
	d, _, err := f.writer.Write(KindPod, "ns/push", []byte{0x80}, false, 3)
	require.NoError(t, err)
	require.Len(t, d.Mark.HeadEntry, StateHashSize)

	tampered := d
	tampered.Entries = []Entry{d.Entries[0]}
	tampered.Entries[0].Value = []byte{0x81}
	_, err = r.Apply(tampered)
	requireReason(t, err, ReasonBadSignature)

	v.calls = 0
	before := r.CheckpointStats().MarkVouched
	_, err = r.Apply(d)
	require.NoError(t, err)
	assert.Equal(t, 1, v.calls, "the mark's verification covers the entry")
	assert.EqualValues(t, 1, r.CheckpointStats().MarkVouched-before)
	assert.Equal(t, d.To, r.Digest()["c1"].Max)

	bare := NewState("c7")
	bv := &countingVerifier{pinVerifier: f.pins}
	bare.SetVerifier(bv, nil)
	antiEntropy(t, f.victim, bare)
	bv.calls = 0
	stripped := d
	stripped.Mark = StateMark{}
	_, err = bare.Apply(stripped)
	require.NoError(t, err)
	assert.Equal(t, 1, bv.calls, "without the mark the entry is verified itself")
}

// A replica that received a contiguous stream up to a peer's watermark but
// cannot prove it (it holds a newer version of a key above it) pulls the
// entries the peer holds above that watermark (Behind's gap case). The
// peer's plan answered with a normal stream from the replica's progress,
// which is empty when that progress is the peer's watermark, so the entry
// never came and the pair pulled from each other for good (the signed
// simulator's message storms, seed 7187724677420191503 and three more).
// The peer now sends its entries above the watermark as a gap delta, with
// its newest mark, which proves the replica's state whole.
func TestGapEntriesReachAReplicaWaitingForProof(t *testing.T) {
	f := newTrustFixture(t, 3) // c1 wrote pa, pb, pc; the victim holds them
	a := f.victim
	b := NewState("c3")
	b.SetVerifier(f.pins, nil)
	antiEntropy(t, a, b)
	write := func(name string) Delta {
		d, _, err := f.writer.Write(KindPod, name, []byte{0x81}, false, 20)
		require.NoError(t, err)
		return d
	}
	apply := func(st *State, d Delta) {
		_, err := st.Apply(d)
		require.NoError(t, err)
	}
	d4 := write("ns/pd") // a new key
	d5 := write("ns/pa") // pa again: its first version is replaced
	d6 := write("ns/pf") // a new key
	apply(a, d4)
	relayed := d5
	relayed.Mark = StateMark{} // relayed by a peer whose newest mark is older
	apply(b, relayed)          // out of order: held above b's watermark
	apply(b, d4)               // contiguous to d4, but pa's version at d4's head is gone: unproven
	apply(a, d6)               // out of order: held above a's watermark
	da, db := a.Digest()["c1"], b.Digest()["c1"]
	require.Equal(t, d4.To, da.Max)
	require.Equal(t, d6.To, da.Top)
	require.Less(t, db.Max, d4.To, "b cannot prove d4's head")
	require.Equal(t, d4.To, db.Reset, "b received everything up to a's watermark")
	require.Equal(t, []string{"c1"}, b.Behind(a.Digest()), "b lacks a's entry above the watermark")

	antiEntropy(t, a, b)
	_, ok := b.Get(Key{"c1", KindPod, "ns/pf"})
	require.True(t, ok, "the entry above a's watermark reached b")
	require.Equal(t, d6.To, b.Digest()["c1"].Max, "and a's newest mark proved b's whole state")
	require.Empty(t, b.Behind(a.Digest()), "no pull left")
	antiEntropy(t, b, a)
	require.Equal(t, f.writer.Digest()["c1"], a.Digest()["c1"])
	require.Equal(t, f.writer.Digest()["c1"], b.Digest()["c1"])
}

// A standby of the sealing cluster that gets its leader's seal before any
// entry of the new epoch accepts it: the mark the seal carries is its own
// cluster's signed statement of a version past the seal, as it is for
// every other cluster (it refused it, counted as an unproven watermark,
// which raises the signature-drop alert on an honest failover: nemesis
// seed 31403's kept logs).
func TestOwnStandbyAcceptsItsLeadersSeal(t *testing.T) {
	f := newTrustFixture(t, 3)
	standby := NewState("c1")
	standby.SetSigner(f.c1)
	standby.SetVerifier(f.pins, func(string) bool { return false })
	antiEntropy(t, f.writer, standby)
	require.NoError(t, f.writer.SetEpoch(f.writer.MinEpoch()))
	_, _, err := f.writer.Write(KindPod, "ns/pa", []byte{0x81}, false, 11) // re-published, not yet at the standby
	require.NoError(t, err)
	seal, _, err := f.writer.SealPriorEpochs()
	require.NoError(t, err)
	require.Greater(t, seal.UpTo, standby.Digest()["c1"].Max, "the standby has seen nothing past the seal")
	_, err = standby.ApplyRetire(seal)
	require.NoError(t, err, "the own leader's seal is accepted on its mark")
	assert.Equal(t, seal.UpTo, standby.Digest()["c1"].Retired)
	antiEntropy(t, f.writer, standby)
	assert.Equal(t, f.writer.Digest()["c1"], standby.Digest()["c1"])
}

// Finding 18: a relay that got a takeover's seal but none of the new
// epoch's entries cannot prove the seal's mark, so its own proof stays
// below the retirement. A replica further behind accepts a relayed signed
// retirement only up to a version the origin signed; the relay sends the
// seal's mark with it (the only such version it holds), or the replica
// refuses it on every round (unproven_watermark for an honest mesh).
func TestRelayedSealCarriesItsMark(t *testing.T) {
	f := newTrustFixture(t, 3)
	auth := func(string) bool { return false }
	relay, lagging := NewState("c3"), NewState("c4")
	relay.SetVerifier(f.pins, auth)
	lagging.SetVerifier(f.pins, auth)
	antiEntropy(t, f.writer, lagging)
	for _, n := range []string{"ns/pd", "ns/pe"} {
		_, _, err := f.writer.Write(KindPod, n, []byte{0x80}, false, 5)
		require.NoError(t, err)
	}
	antiEntropy(t, f.writer, relay)

	require.NoError(t, f.writer.SetEpoch(f.writer.MinEpoch()))
	_, _, err := f.writer.Write(KindPod, "ns/pa", []byte{0x81}, false, 11) // re-published
	require.NoError(t, err)
	seal, _, err := f.writer.SealPriorEpochs()
	require.NoError(t, err)
	_, err = relay.ApplyRetire(seal)
	require.NoError(t, err)
	require.Less(t, relay.Proof("c1").Mark.Head, seal.UpTo, "the relay could not prove the seal's mark (no entry of the new epoch)")
	require.Greater(t, seal.UpTo, lagging.Digest()["c1"].Max)

	antiEntropy(t, relay, lagging) // refused without the mark: unproven_watermark
	assert.Equal(t, seal.UpTo, lagging.Digest()["c1"].Retired)
	assert.Zero(t, lagging.Len("c1"), "everything below the seal is retired")
	antiEntropy(t, f.writer, lagging)
	assert.Equal(t, f.writer.Digest()["c1"], lagging.Digest()["c1"])
}
