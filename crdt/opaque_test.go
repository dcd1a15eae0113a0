package crdt

import (
	"bytes"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kindOpaque stands for a kind a later build adds (a Service kind, say):
// this build does not know it.
const kindOpaque = Kind(numKinds + 1)

// testKinds are the kinds the law tests compare: every known one and one
// opaque one.
var testKinds = []Kind{KindCluster, KindNamespace, KindPod, KindPolicy, KindReport, kindOpaque}

// relay copies every delta src offers dst through the wire codec.
func relay(t *testing.T, dst, src *State) {
	t.Helper()
	for range 10 {
		ds := src.DeltaSince(dst.Digest(), 0)
		if len(ds) == 0 {
			return
		}
		for _, d := range ds {
			b, err := EncodeDelta(d)
			require.NoError(t, err)
			d2, err := DecodeDelta(b)
			require.NoError(t, err)
			_, err = dst.Apply(d2)
			require.NoError(t, err)
		}
	}
	t.Fatal("relay did not converge")
}

func TestOpaqueKindStoredAndForwardedWithSignature(t *testing.T) {
	f := newTrustFixture(t, 2)
	// The newer writer writes its new kind between two known-kind writes,
	// so one delta carries both.
	fresh := NewState("c2")
	fresh.SetVerifier(f.pins, nil)
	_, _, err := f.writer.write(kindOpaque, "shop/svc", []byte{0x81, 0xa1, 'v', 1}, false, 7)
	require.NoError(t, err)
	_, _, err = f.writer.Write(KindPod, "ns/late", []byte{0x80}, false, 8)
	require.NoError(t, err)
	ds := f.writer.DeltaSince(fresh.Digest(), 0)
	require.Len(t, ds, 1)
	kinds := map[Kind]bool{}
	for _, e := range ds[0].Entries {
		kinds[e.Kind] = true
	}
	require.True(t, kinds[kindOpaque] && kinds[KindPod], "one delta mixes the kinds")

	// An older peer (it verifies signatures) takes the whole delta.
	relay(t, f.victim, f.writer)
	want, ok := f.writer.Get(Key{"c1", kindOpaque, "shop/svc"})
	require.True(t, ok)
	got, ok := f.victim.Get(Key{"c1", kindOpaque, "shop/svc"})
	require.True(t, ok, "the old peer stores the entry it cannot read")
	assert.Equal(t, want, got)
	require.Len(t, got.Sig, SigSize)
	_, ok = f.victim.Get(Key{"c1", KindPod, "ns/late"})
	assert.True(t, ok, "the known entries of the delta are applied too")
	assert.Equal(t, f.writer.Digest()["c1"], f.victim.Digest()["c1"])

	// A third replica learns it only through the old peer, signature
	// included, and verifies it.
	third := NewState("c3")
	third.SetVerifier(f.pins, nil)
	relay(t, third, f.victim)
	got3, ok := third.Get(Key{"c1", kindOpaque, "shop/svc"})
	require.True(t, ok)
	assert.Equal(t, want, got3)
	assert.Equal(t, f.writer.Digest()["c1"], third.Digest()["c1"])

	// Readers that iterate the registry never meet it.
	for _, spec := range Kinds() {
		f.victim.Range("c1", spec.Kind, func(e Entry) bool {
			assert.NotEqual(t, kindOpaque, e.Kind)
			return true
		})
	}

	// A tombstone and GC of the opaque entry travel the same way.
	d, _, err := f.writer.write(kindOpaque, "shop/svc", nil, true, 9)
	require.NoError(t, err)
	gc, _ := f.writer.CollectGarbage(d.To)
	relay(t, f.victim, f.writer)
	relay(t, third, f.victim)
	for _, s := range []*State{f.victim, third} {
		_, ok := s.Get(Key{"c1", kindOpaque, "shop/svc"})
		assert.False(t, ok, "collected")
		assert.Equal(t, gc.GC, s.Digest()["c1"].GC)
		assert.Empty(t, s.origins["c1"].opaque, "the empty index is dropped")
	}
}

func TestOpaqueEntryStillVerified(t *testing.T) {
	f := newTrustFixture(t, 1)
	d, _, err := f.writer.write(kindOpaque, "x", []byte{0x80}, false, 1)
	require.NoError(t, err)
	d.Entries[0].Value = []byte{0x81} // tampered by a relay
	before := f.victim.Digest()
	_, err = f.victim.Apply(d)
	requireReason(t, err, ReasonBadSignature)
	assert.Equal(t, before, f.victim.Digest())
}

// A known kind keeps its full validation even next to an opaque entry: the
// delta is refused whole.
func TestOpaqueDoesNotRelaxKnownKinds(t *testing.T) {
	a := writer(t, "a", 1)
	d1, _, err := a.write(kindOpaque, "anything/at/all", []byte("x"), false, 0)
	require.NoError(t, err)
	d2 := mustWrite(t, a, KindPod, "ns/p", "y", false)
	d := Delta{Origin: "a", To: d2.To, Entries: []Entry{d1.Entries[0], d2.Entries[0]}}
	d.Entries[1].Name = "no-slash"
	b := NewState("b")
	_, err = b.Apply(d)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Empty(t, b.Origins())
	d.Entries[1].Name = "ns/p"
	mustApply(t, b, d)
	assert.Equal(t, a.Digest(), b.Digest())
}

func TestWriteRefusesUnknownKinds(t *testing.T) {
	a := writer(t, "a", 1)
	for _, k := range []Kind{0, kindOpaque, 255} {
		_, _, err := a.Write(k, "ns/x", []byte("x"), false, 0)
		require.ErrorIs(t, err, ErrInvalid, "kind %d", k)
	}
	assert.False(t, Kind(0).Valid() || Kind(0).Opaque())
	assert.True(t, kindOpaque.Opaque())
	assert.False(t, KindReport.Opaque())
}

func TestRestoreKeepsOpaqueEntries(t *testing.T) {
	a := writer(t, "a", 1)
	_, _, err := a.write(kindOpaque, "k", []byte("x"), false, 0)
	require.NoError(t, err)
	mustWrite(t, a, KindPod, "ns/p", "y", false)
	c := clone(t, a)
	assert.Equal(t, a.Digest(), c.Digest())
	e, ok := c.Get(Key{"a", kindOpaque, "k"})
	require.True(t, ok)
	assert.Equal(t, []byte("x"), e.Value)
}

// FuzzOpaqueEntry: a delta that carries an entry of any kind and name next
// to a known one is either refused as a whole (kind 0, a name no kind may
// have) or applied whole, and then relayed byte for byte.
func FuzzOpaqueEntry(f *testing.F) {
	f.Add(uint8(kindOpaque), "ns/svc", []byte{0x80})
	f.Add(uint8(255), "", []byte(nil))
	f.Add(uint8(0), "ns/x", []byte{1})
	f.Add(uint8(200), "\xff", []byte{2})
	f.Fuzz(func(t *testing.T, kind uint8, name string, value []byte) {
		k := Kind(kind)
		if k.Valid() || len(value) > MaxValueBytes {
			return
		}
		w := writer(t, "w", 1)
		dOpaque, _, err := w.write(k, name, value, false, 1)
		require.NoError(t, err)
		dPod := mustWrite(t, w, KindPod, "ns/p", "v", false)
		d := Delta{Origin: "w", To: dPod.To, Entries: []Entry{dOpaque.Entries[0], dPod.Entries[0]}}
		old := NewState("old")
		b, encErr := EncodeDelta(d)
		_, applyErr := old.Apply(d)
		ok := k != 0 && len(name) <= MaxNameBytes && utf8.ValidString(name)
		if !ok {
			require.ErrorIs(t, encErr, ErrInvalid)
			require.ErrorIs(t, applyErr, ErrInvalid)
			require.Empty(t, old.Origins())
			return
		}
		require.NoError(t, encErr)
		require.NoError(t, applyErr)
		d2, err := DecodeDelta(b)
		require.NoError(t, err)
		third := NewState("third")
		mustApply(t, third, d2)
		for _, s := range []*State{old, third} {
			e, found := s.Get(Key{"w", k, name})
			require.True(t, found)
			require.True(t, bytes.Equal(value, e.Value) || (len(value) == 0 && len(e.Value) == 0))
			_, found = s.Get(Key{"w", KindPod, "ns/p"})
			require.True(t, found)
			require.Equal(t, w.Digest(), s.Digest())
			checkInvariants(t, s)
		}
	})
}
