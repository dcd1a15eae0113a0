package crdt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// allEntries returns o's stored records at or below v, in version order.
func allEntries(o *originState, v Version) []Entry {
	var out []Entry
	o.byVer.Ascend(func(r *record) bool {
		if r.version > v {
			return false
		}
		out = append(out, o.entry(r))
		return true
	})
	return out
}

// The set hash is maintained incrementally through writes, overwrites,
// tombstones, GC and out-of-order arrivals, and always equals the hash
// recomputed from scratch over what is stored, whatever the order.
func TestSetHashIncremental(t *testing.T) {
	w := NewState("c1")
	w.enableCompleteness()
	require.NoError(t, w.SetEpoch(1))
	rng := rand.New(rand.NewPCG(1, 2))
	var ds []Delta
	for i := 0; i < 400; i++ {
		name := fmt.Sprintf("ns/p%d", rng.IntN(60))
		d, _, err := w.Write(KindPod, name, []byte{0x80}, rng.IntN(4) == 0, int64(i))
		require.NoError(t, err)
		ds = append(ds, d)
		if i%97 == 0 {
			_, _ = w.CollectGarbage(w.Digest()["c1"].Max - 20)
		}
	}
	o := w.origins["c1"]
	require.Equal(t, digestOf(allEntries(o, o.max)), o.strong.digest(o.count))
	require.Equal(t, digestOf(allEntries(o, o.max)), o.stateDigest(o.max))

	// a receiver applying the pushes in a shuffled order (and turning
	// the set hash on halfway: computed once, then kept) ends with the
	// same digest, and stateDigest(v) below its top subtracts the rest.
	r := NewState("c2")
	rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	for i, d := range ds {
		if i == len(ds)/2 {
			r.enableCompleteness()
		}
		_, err := r.Apply(d)
		require.NoError(t, err)
	}
	require.Equal(t, digestOf(allEntries(r.origins["c1"], r.origins["c1"].top())), r.origins["c1"].strong.digest(r.origins["c1"].count))
	ro := r.origins["c1"]
	mid := ro.top() - 50
	require.Equal(t, digestOf(allEntries(ro, mid)), ro.stateDigest(mid))
}

func TestSetHashSeparates(t *testing.T) {
	e := func(name string, v Version, del bool) Entry {
		return Entry{Key: Key{Origin: "c1", Kind: KindPod, Name: name}, Version: v, Deleted: del}
	}
	a := digestOf([]Entry{e("ns/a", 1, false), e("ns/b", 2, false)})
	require.Equal(t, a, digestOf([]Entry{e("ns/b", 2, false), e("ns/a", 1, false)}), "order independent")
	for _, other := range [][]Entry{
		{e("ns/a", 1, false)},
		{e("ns/a", 1, false), e("ns/b", 3, false)},
		{e("ns/a", 1, false), e("ns/b", 2, true)},
		{e("ns/a", 1, false), e("ns/c", 2, false)},
		{e("ns/a", 1, false), e("ns/b", 2, false), e("ns/b", 2, false)},
		{},
	} {
		require.NotEqual(t, a, digestOf(other), "%v", other)
	}
	var h setHash
	var eh elemHasher
	h.add(&eh, KindPod, "ns/a", 1, false, false)
	h.add(&eh, KindPod, "ns/a", 1, false, true)
	require.Equal(t, setHash{}, h, "remove undoes add")
}

// digestOf is the completeness digest of a set of entries (tombstones
// included), as an origin signs it in a StateMark, computed from scratch:
// the oracle for State's incremental one.
func digestOf(entries []Entry) [StateHashSize]byte {
	var h setHash
	var eh elemHasher
	for i := range entries {
		e := &entries[i]
		h.add(&eh, e.Kind, e.Name, e.Version, e.Deleted, false)
	}
	return h.digest(len(entries))
}
