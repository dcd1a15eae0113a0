package enforce

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The pod table behaves like a map from name to pod under random puts,
// replacements and removals (backward-shift deletion, growth, shrinking),
// with hashes colliding on purpose.
func TestPodTableLikeMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var pt podTable
	want := map[string]*podEntry{}
	for step := 0; step < 20000; step++ {
		name := fmt.Sprintf("p-%d", rng.IntN(600))
		old := pt.get(name)
		require.Same(t, want[name], old, "step %d get %s", step, name)
		if rng.IntN(3) == 0 {
			if old != nil {
				pt.remove(old)
				delete(want, name)
			}
		} else {
			e := &podEntry{name: name}
			pt.put(e, old)
			want[name] = e
		}
		require.Equal(t, len(want), pt.Len())
		if step%1000 == 0 {
			seen := map[string]bool{}
			for e := range pt.all() {
				require.False(t, seen[e.name])
				seen[e.name] = true
				require.Same(t, want[e.name], e)
			}
			require.Len(t, seen, len(want))
		}
	}
	for name, e := range want {
		pt.remove(e)
		require.Nil(t, pt.get(name))
	}
	require.Zero(t, pt.Len())
}

// A table whose hash function maps everything onto few home slots still
// finds and deletes correctly (long probe runs wrapping around the end).
func TestPtrTableCollisions(t *testing.T) {
	type item struct{ k int }
	hash := func(x *item) uint64 { return uint64(x.k%3)*5 + (1<<20 - 3) } // homes near the end: runs wrap
	var tb ptrTable[item]
	items := map[int]*item{}
	rng := rand.New(rand.NewPCG(5, 6))
	for step := 0; step < 5000; step++ {
		k := rng.IntN(40)
		x := items[k]
		got := tb.find(hash(&item{k}), func(y *item) bool { return y.k == k })
		require.Same(t, x, got)
		if x != nil {
			tb.remove(hash(x), x, hash)
			delete(items, k)
		} else {
			x = &item{k}
			tb.insert(hash(x), x, hash)
			items[k] = x
		}
		require.Equal(t, len(items), tb.Len())
	}
}

// Values of 128 bytes and more (not valid label values, but the view must
// not depend on validation) keep their multi-byte length prefixes.
func TestLabelSetLongValues(t *testing.T) {
	in := newInterner()
	m := map[string]string{"a": strings.Repeat("x", 200), "b": "", "c": strings.Repeat("y", 70000), "d": "z"}
	s := in.labels(m)
	for k, v := range m {
		require.True(t, s.Has(k))
		require.Equal(t, v, s.Get(k))
	}
	require.Same(t, s, in.labels(map[string]string{"a": strings.Repeat("x", 200), "b": "", "c": strings.Repeat("y", 70000), "d": "z"}))
	require.NotSame(t, s, in.labels(map[string]string{"a": strings.Repeat("x", 200), "b": "", "c": strings.Repeat("y", 70000), "d": "zz"}))
}
