package crdt

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writer(t testing.TB, self string, epoch uint32) *State {
	t.Helper()
	s := NewState(self)
	require.NoError(t, s.SetEpoch(epoch))
	return s
}

func mustWrite(t testing.TB, s *State, kind Kind, name, val string, deleted bool) Delta {
	t.Helper()
	d, _, err := s.Write(kind, name, []byte(val), deleted, 0)
	require.NoError(t, err)
	return d
}

func mustApply(t testing.TB, s *State, ds ...Delta) []Change {
	t.Helper()
	var all []Change
	for _, d := range ds {
		ch, err := s.Apply(d)
		require.NoError(t, err)
		all = append(all, ch...)
	}
	return all
}

// sync pulls everything from src into dst via digest/DeltaSince.
func syncFrom(t testing.TB, dst, src *State, maxEntries int) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		ds := src.DeltaSince(dst.Digest(), maxEntries)
		if len(ds) == 0 {
			return
		}
		mustApply(t, dst, ds...)
	}
	t.Fatalf("sync did not converge")
}

func TestWriteVersionsAndEpoch(t *testing.T) {
	s := NewState("a")
	_, _, err := s.Write(KindPod, "ns/p", []byte("x"), false, 0)
	require.ErrorIs(t, err, ErrNeedsEpochBump)
	require.NoError(t, s.SetEpoch(3))
	d1 := mustWrite(t, s, KindPod, "ns/p", "x", false)
	d2 := mustWrite(t, s, KindPod, "ns/q", "y", false)
	assert.Equal(t, MakeVersion(3, 1), d1.To)
	assert.Equal(t, Version(0), d1.From)
	assert.Equal(t, d1.To, d2.From)
	assert.Equal(t, MakeVersion(3, 2), d2.To)
	assert.Equal(t, uint32(4), s.MinEpoch())
	assert.Error(t, s.SetEpoch(3))
	require.NoError(t, s.SetEpoch(5))
	d3 := mustWrite(t, s, KindPod, "ns/p", "", true)
	assert.Equal(t, MakeVersion(5, 1), d3.To)
	e, ok := s.Get(Key{"a", KindPod, "ns/p"})
	require.True(t, ok)
	assert.True(t, e.Deleted)
	assert.Nil(t, e.Value)

	obs := NewState("")
	_, _, err = obs.Write(KindPod, "ns/p", nil, false, 0)
	assert.ErrorIs(t, err, ErrObserver)
	// bad names
	_, _, err = s.Write(KindPod, "nons", nil, false, 0)
	assert.ErrorIs(t, err, ErrInvalid)
	_, _, err = s.Write(Kind(9), "a/b", nil, false, 0)
	assert.ErrorIs(t, err, ErrInvalid)
	_, _, err = s.Write(KindPod, "a/b", make([]byte, MaxValueBytes+1), false, 0)
	assert.ErrorIs(t, err, ErrValueTooLarge)
}

func TestApplyOutOfOrderAndIdempotent(t *testing.T) {
	a := writer(t, "a", 1)
	d1 := mustWrite(t, a, KindPod, "ns/p", "1", false)
	d2 := mustWrite(t, a, KindPod, "ns/p", "2", false)
	d3 := mustWrite(t, a, KindPod, "ns/q", "3", false)

	b := NewState("b")
	ch := mustApply(t, b, d3) // gap: applied, watermark stays
	require.Len(t, ch, 1)
	assert.Nil(t, ch[0].Old)
	assert.Equal(t, Version(0), b.Digest()["a"].Max)
	assert.Equal(t, d3.To, b.Digest()["a"].Top)
	mustApply(t, b, d2)
	assert.Equal(t, Version(0), b.Digest()["a"].Max)
	mustApply(t, b, d1) // fills the gap
	assert.Equal(t, d1.To, b.Digest()["a"].Max)
	syncFrom(t, b, a, 0)
	assert.Equal(t, a.Digest(), b.Digest())
	// duplicates are no-ops
	assert.Empty(t, mustApply(t, b, d1, d2, d3))
	e, _ := b.Get(Key{"a", KindPod, "ns/p"})
	assert.Equal(t, "2", string(e.Value))
}

func TestChangeFeed(t *testing.T) {
	a := writer(t, "a", 1)
	b := NewState("b")
	ch := mustApply(t, b, mustWrite(t, a, KindPod, "ns/p", "1", false))
	require.Len(t, ch, 1)
	assert.Nil(t, ch[0].Old)
	assert.Equal(t, "1", string(ch[0].New.Value))
	ch = mustApply(t, b, mustWrite(t, a, KindPod, "ns/p", "2", false))
	require.Len(t, ch, 1)
	assert.Equal(t, "1", string(ch[0].Old.Value))
	assert.Equal(t, "2", string(ch[0].New.Value))
	ch = mustApply(t, b, mustWrite(t, a, KindPod, "ns/p", "", true))
	require.Len(t, ch, 1)
	assert.True(t, ch[0].New.Deleted)
	gcd, gch := a.CollectGarbage(a.Digest()["a"].Max)
	require.Len(t, gch, 1)
	assert.Nil(t, gch[0].New)
	ch = mustApply(t, b, gcd)
	require.Len(t, ch, 1)
	assert.Nil(t, ch[0].New)
	assert.True(t, ch[0].Old.Deleted)
	_, ok := b.Get(Key{"a", KindPod, "ns/p"})
	assert.False(t, ok)
	assert.Equal(t, a.Digest(), b.Digest())
}

func TestValidationRejectsPoisonWithoutPartialApply(t *testing.T) {
	a := writer(t, "a", 1)
	d1 := mustWrite(t, a, KindPod, "ns/p", "1", false)
	d2 := mustWrite(t, a, KindPod, "ns/q", "2", false)
	good := Delta{Origin: "a", From: 0, To: d2.To, Entries: []Entry{d1.Entries[0], d2.Entries[0]}}
	cases := map[string]func(d *Delta){
		"empty origin":   func(d *Delta) { d.Origin = "" },
		"foreign entry":  func(d *Delta) { d.Entries[1].Origin = "b" },
		"kind 0":         func(d *Delta) { d.Entries[1].Kind = 0 },
		"known shape":    func(d *Delta) { d.Entries[1].Kind = KindCluster },
		"empty name":     func(d *Delta) { d.Entries[1].Name = "" },
		"unsorted":       func(d *Delta) { d.Entries[0], d.Entries[1] = d.Entries[1], d.Entries[0] },
		"above to":       func(d *Delta) { d.To = d1.To },
		"from above to":  func(d *Delta) { d.From = d.To + 1 },
		"at from":        func(d *Delta) { d.From = d1.To },
		"zero version":   func(d *Delta) { d.Entries[0].Version = 0; d.From = 0 },
		"oversize value": func(d *Delta) { d.Entries[1].Value = make([]byte, MaxValueBytes+1) },
		"tomb value":     func(d *Delta) { d.Entries[1].Deleted = true },
		"retired entry":  func(d *Delta) { d.Retired = d1.To },
		"final no reset": func(d *Delta) { d.Final = true },
		"gc'd tombstone": func(d *Delta) { d.Entries[1].Deleted = true; d.Entries[1].Value = nil; d.GC = d2.To },
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			d := good
			d.Entries = append([]Entry(nil), good.Entries...)
			mut(&d)
			b := NewState("b")
			before := b.Digest()
			_, err := b.Apply(d)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, before, b.Digest())
			assert.Empty(t, b.Origins())
		})
	}
	b := NewState("b")
	mustApply(t, b, good)
	assert.Equal(t, a.Digest(), b.Digest())
}

func TestDeltaSinceChunksAnyPrefix(t *testing.T) {
	a := writer(t, "a", 1)
	for i := 0; i < 50; i++ {
		mustWrite(t, a, KindPod, podName(i%20), "v", false)
	}
	c := writer(t, "c", 1)
	for i := 0; i < 7; i++ {
		mustWrite(t, c, KindNamespace, "ns"+string(rune('a'+i)), "v", false)
	}
	src := NewState("")
	syncFrom(t, src, a, 0)
	syncFrom(t, src, c, 0)
	ds := src.DeltaSince(Digest{}, 5)
	total := 0
	for _, d := range ds {
		total += len(d.Entries)
	}
	assert.LessOrEqual(t, total, 5)
	// round robin: both origins appear among the first chunks
	require.GreaterOrEqual(t, len(ds), 2)
	assert.NotEqual(t, ds[0].Origin, ds[1].Origin)
	// every prefix applies cleanly and never regresses
	full := src.DeltaSince(Digest{}, 0)
	for cut := 0; cut <= len(full); cut++ {
		dst := NewState("")
		mustApply(t, dst, full[:cut]...)
		syncFrom(t, dst, src, 3)
		assert.Equal(t, src.Digest(), dst.Digest(), "cut %d", cut)
	}
}

func podName(i int) string { return "ns/p" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) }

func TestDeltaSinceProportional(t *testing.T) {
	a := writer(t, "a", 1)
	for i := 0; i < 5000; i++ {
		mustWrite(t, a, KindPod, podName(i), "v", false)
	}
	b := NewState("b")
	syncFrom(t, b, a, 0)
	for i := 0; i < 10; i++ {
		mustWrite(t, a, KindPod, podName(i*7), "w", false)
	}
	ds := a.DeltaSince(b.Digest(), 0)
	require.Len(t, ds, 1)
	assert.Len(t, ds[0].Entries, 10)
	assert.Equal(t, []string{"a"}, b.Behind(a.Digest()))
	assert.Empty(t, a.Behind(b.Digest()))
}

func TestRetireAndRejoin(t *testing.T) {
	a := writer(t, "a", 1)
	b := writer(t, "b", 1)
	mustApply(t, b, mustWrite(t, a, KindPod, "ns/p", "1", false))
	mustApply(t, b, mustWrite(t, a, KindPod, "ns/q", "1", false))
	late := mustWrite(t, a, KindPod, "ns/r", "1", false) // b has not seen it

	r := b.RetireRecord("a")
	assert.Equal(t, MakeVersion(1, 2), r.UpTo)
	ch, err := b.ApplyRetire(r)
	require.NoError(t, err)
	assert.Len(t, ch, 2)
	assert.Equal(t, 0, b.Len("a"))
	// stale data below the retirement never comes back
	d := Delta{Origin: "a", From: 0, To: MakeVersion(1, 2), Entries: []Entry{
		{Key: Key{"a", KindPod, "ns/p"}, Version: MakeVersion(1, 1), Value: []byte("1")},
	}}
	ch, err = b.Apply(d)
	require.NoError(t, err)
	assert.Empty(t, ch)
	// a write after the retirement point survives
	mustApply(t, b, late)
	_, ok := b.Get(Key{"a", KindPod, "ns/r"})
	assert.True(t, ok)

	// the retired writer learns it was retired and must bump its epoch
	ch, err = a.ApplyRetire(r)
	require.NoError(t, err)
	assert.Len(t, ch, 2)
	assert.False(t, a.NeedsEpochBump() == false)
	_, _, err = a.Write(KindPod, "ns/p", []byte("2"), false, 0)
	assert.ErrorIs(t, err, ErrNeedsEpochBump)
	assert.Equal(t, uint32(2), a.MinEpoch())
	require.NoError(t, a.SetEpoch(a.MinEpoch()))
	rej := mustWrite(t, a, KindPod, "ns/p", "2", false)
	assert.Equal(t, uint32(2), rej.To.Epoch())
	syncFrom(t, b, a, 0)
	e, ok := b.Get(Key{"a", KindPod, "ns/p"})
	require.True(t, ok)
	assert.Equal(t, "2", string(e.Value))
	assert.Equal(t, a.Digest(), b.Digest())
}

func TestGCResetBehindPeer(t *testing.T) {
	a := writer(t, "a", 1)
	b := NewState("b")
	mustApply(t, b, mustWrite(t, a, KindPod, "ns/keep", "1", false))
	mustApply(t, b, mustWrite(t, a, KindPod, "ns/gone", "1", false))
	// b misses the deletion and the GC
	mustWrite(t, a, KindPod, "ns/gone", "", true)
	mustWrite(t, a, KindPod, "ns/keep", "2", false)
	gcd, _ := a.CollectGarbage(a.Digest()["a"].Max)
	assert.Equal(t, 1, a.Len("a"), "tombstone of ns/gone dropped")
	// b learns GC first (broadcast): it becomes stale and stops serving.
	mustApply(t, b, gcd)
	assert.Less(t, b.Digest()["a"].Max, b.Digest()["a"].GC)
	assert.Empty(t, b.DeltaSince(Digest{}, 0), "a stale replica must not push")
	// a normal delta cannot clear staleness
	ds := a.DeltaSince(b.Digest(), 0)
	require.NotEmpty(t, ds)
	assert.True(t, ds[0].Reset)
	// apply the reset stream in tiny chunks; live keys never disappear
	for _, d := range a.DeltaSince(b.Digest(), 1) {
		ch := mustApply(t, b, d)
		for _, c := range ch {
			if c.Key.Name == "ns/keep" {
				assert.NotNil(t, c.New, "live key transiently dropped")
			}
		}
	}
	syncFrom(t, b, a, 1)
	_, ok := b.Get(Key{"a", KindPod, "ns/gone"})
	assert.False(t, ok, "deleted entry resurrected")
	assert.Equal(t, a.Digest(), b.Digest())
	// and the stale entry can't be pushed back into a
	stale := Delta{Origin: "a", From: 0, To: MakeVersion(1, 2), Entries: []Entry{
		{Key: Key{"a", KindPod, "ns/gone"}, Version: MakeVersion(1, 2), Value: []byte("1")},
	}}
	ch, err := a.Apply(stale)
	require.NoError(t, err)
	assert.Empty(t, ch)
}

func TestHashMismatchResetsToAgreement(t *testing.T) {
	// Two replicas that disagree at equal watermarks (a writer reused a
	// version, or a lagging takeover before its seal) reset each other and
	// converge on what both hold; nothing below the watermark is re-admitted.
	x := NewState("")
	y := NewState("")
	mk := func(names ...string) Delta {
		d := Delta{Origin: "a", From: 0, To: MakeVersion(1, 3)}
		for i, n := range names {
			d.Entries = append(d.Entries, Entry{Key: Key{"a", KindPod, n}, Version: MakeVersion(1, uint64(i+1)), Value: []byte("v")})
		}
		return d
	}
	mustApply(t, x, mk("ns/common", "ns/x"))
	mustApply(t, y, mk("ns/common", "ns/y"))
	require.NotEqual(t, x.Digest()["a"].Hash, y.Digest()["a"].Hash)
	assert.Equal(t, []string{"a"}, x.Behind(y.Digest()))
	assert.Equal(t, []string{"a"}, y.Behind(x.Digest()))
	for i := 0; i < 3; i++ {
		for _, d := range y.DeltaSince(x.Digest(), 1) {
			for _, c := range mustApply(t, x, d) {
				assert.Nil(t, c.New, "a reset at equal watermarks only drops")
			}
		}
		mustApply(t, y, x.DeltaSince(y.Digest(), 0)...)
	}
	assert.Equal(t, x.Digest(), y.Digest())
	_, ok := x.Get(Key{"a", KindPod, "ns/common"})
	assert.True(t, ok)
	assert.Equal(t, 1, x.Len("a"))
	assert.Empty(t, x.DeltaSince(y.Digest(), 0))
}

func TestRestoreVerifiesHash(t *testing.T) {
	a := writer(t, "a", 1)
	mustWrite(t, a, KindPod, "ns/p", "1", false)
	mustWrite(t, a, KindNamespace, "ns", "1", false)
	var entries []Entry
	for _, o := range a.Origins() {
		for k := KindCluster; k <= KindReport; k++ {
			a.Range(o, k, func(e Entry) bool { entries = append(entries, e); return true })
		}
	}
	r := NewState("a")
	require.NoError(t, r.Restore(a.Digest(), entries))
	assert.Equal(t, a.Digest(), r.Digest())
	assert.Equal(t, uint32(2), r.MinEpoch())
	require.NoError(t, r.SetEpoch(2))

	bad := NewState("a")
	entries[0].Version++
	err := bad.Restore(a.Digest(), entries)
	require.Error(t, err)
	assert.Empty(t, bad.Origins())
	err = bad.Restore(Digest{}, entries)
	assert.True(t, errors.Is(err, ErrInvalid))
}

func TestGapEntriesSpread(t *testing.T) {
	a := writer(t, "a", 1)
	mustWrite(t, a, KindPod, "ns/p", "1", false)
	lost := mustWrite(t, a, KindPod, "ns/q", "1", false)
	late := mustWrite(t, a, KindPod, "ns/r", "1", false)
	_ = lost
	// x saw only the last broadcast; the writer then disappears for good.
	x, y := NewState("x"), NewState("y")
	mustApply(t, x, late)
	assert.Equal(t, Version(0), x.Digest()["a"].Max)
	assert.Equal(t, []string{"a"}, y.Behind(x.Digest()), "y must pull x's out-of-order entries")
	ds := x.DeltaSince(y.Digest(), 0)
	require.Len(t, ds, 1)
	assert.True(t, ds[0].Gap)
	mustApply(t, y, ds...)
	assert.Equal(t, x.Digest(), y.Digest())
	_, ok := y.Get(Key{"a", KindPod, "ns/r"})
	assert.True(t, ok)
	assert.Empty(t, y.Behind(x.Digest()))
	assert.Empty(t, x.DeltaSince(y.Digest(), 0))
	// Retiring what we know finishes the origin for good.
	r := x.RetireRecord("a")
	assert.Equal(t, late.To, r.UpTo)
}

// A standby that received its own cluster's entries out of order and then
// took over (nemesis seed 29206) proves its own epoch at the seal: its
// watermark covers its own writes, later writes move it, and its own GC
// collects its tombstones again.
func TestSealProvesTheNewWritersEpoch(t *testing.T) {
	old := NewState("a")
	require.NoError(t, old.SetEpoch(1))
	var ds []Delta
	for _, n := range []string{"ns/p1", "ns/p2", "ns/p3"} {
		d, _, err := old.Write(KindPod, n, []byte{0x80}, false, 0)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	s := NewState("a")
	for _, d := range []Delta{ds[0], ds[2]} { // ds[1] missing: own records above the watermark
		_, err := s.Apply(d)
		require.NoError(t, err)
	}
	require.NoError(t, s.SetEpoch(2))
	_, _, err := s.Write(KindPod, "ns/p4", []byte{0x80}, false, 0)
	require.NoError(t, err)
	_, _, err = s.Write(KindPod, "ns/p4", nil, true, 0) // a tombstone of the new epoch
	require.NoError(t, err)
	require.Less(t, s.Digest()["a"].Max, MakeVersion(2, 1), "before the seal the own watermark is behind (Write moves it only from the base)")

	_, _, err = s.SealEpochsBelow(2)
	require.NoError(t, err)
	require.Equal(t, MakeVersion(2, 2), s.Digest()["a"].Max, "the seal proves the writer's own epoch")
	_, _, err = s.Write(KindPod, "ns/p5", []byte{0x80}, false, 0)
	require.NoError(t, err)
	require.Equal(t, MakeVersion(2, 3), s.Digest()["a"].Max, "later writes move it")
	_, _ = s.CollectGarbage(MakeVersion(2, 2))
	_, ok := s.Get(Key{Origin: "a", Kind: KindPod, Name: "ns/p4"})
	require.False(t, ok, "the own tombstone is collected")
}
