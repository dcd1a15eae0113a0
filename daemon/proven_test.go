package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// An MCNP entry held above its origin's watermark (here received out of
// order) is unproven until the range below it arrives; the other kinds and
// proven MCNPs are not listed.
func TestUnprovenPolicies(t *testing.T) {
	w := crdt.NewState("c1")
	require.NoError(t, w.SetEpoch(1))
	var ds []crdt.Delta
	for i, k := range []struct {
		kind crdt.Kind
		name string
	}{{crdt.KindPolicy, "shop/a"}, {crdt.KindPod, "shop/web"}, {crdt.KindPolicy, "shop/b"}} {
		d, _, err := w.Write(k.kind, k.name, []byte{0x80}, false, int64(i+1))
		require.NoError(t, err)
		ds = append(ds, d)
	}
	r := crdt.NewState("c2")
	view := func(fn func(*crdt.State)) { fn(r) }
	_, err := r.Apply(ds[0])
	require.NoError(t, err)
	require.Empty(t, unprovenPolicies(r.Digest(), view), "in order: proven")

	_, err = r.Apply(ds[2]) // ds[1] missing: shop/b sits above the watermark
	require.NoError(t, err)
	require.Equal(t, map[string]struct{}{"c1/shop/b": {}}, unprovenPolicies(r.Digest(), view))

	_, err = r.Apply(ds[1])
	require.NoError(t, err)
	_, err = r.Apply(ds[2]) // anti-entropy re-sends what lies above the new watermark
	require.NoError(t, err)
	require.Empty(t, unprovenPolicies(r.Digest(), view), "the gap filled: proven")
}
