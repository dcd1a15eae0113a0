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
	require.Empty(t, unprovenPolicies("c2", r.Digest(), view), "in order: proven")

	_, err = r.Apply(ds[2]) // ds[1] missing: shop/b sits above the watermark
	require.NoError(t, err)
	require.Equal(t, map[string]struct{}{"c1/shop/b": {}}, unprovenPolicies("c2", r.Digest(), view))

	_, err = r.Apply(ds[1])
	require.NoError(t, err)
	_, err = r.Apply(ds[2]) // anti-entropy re-sends what lies above the new watermark
	require.NoError(t, err)
	require.Empty(t, unprovenPolicies("c2", r.Digest(), view), "the gap filled: proven")
}

// ownWrites are three MCNP writes of c1 (shop/a, shop/b, shop/c).
func ownWrites(t *testing.T) []crdt.Delta {
	t.Helper()
	w := crdt.NewState("c1")
	require.NoError(t, w.SetEpoch(1))
	var ds []crdt.Delta
	for i, name := range []string{"shop/a", "shop/b", "shop/c"} {
		d, _, err := w.Write(crdt.KindPolicy, name, []byte{0x80}, false, int64(i+1))
		require.NoError(t, err)
		ds = append(ds, d)
	}
	return ds
}

// The own cluster's MCNPs are never frozen as unproven (nemesis seed 29206:
// a standby that received its own cluster's entries out of order became
// leader with its own watermark behind its entries, and its own MCNP's
// generated policy kept a deleted pod's IP admitted).
func TestOwnPoliciesNeverUnproven(t *testing.T) {
	ds := ownWrites(t)
	standby := crdt.NewState("c1") // the same cluster's other daemon
	view := func(fn func(*crdt.State)) { fn(standby) }
	for _, d := range []crdt.Delta{ds[0], ds[2]} { // ds[1] missing
		_, err := standby.Apply(d)
		require.NoError(t, err)
	}
	require.False(t, allProven(standby.Digest()["c1"]), "the own origin's watermark is behind its entries")
	require.Empty(t, unprovenPolicies("c1", standby.Digest(), view), "own MCNPs are not frozen")
	require.Equal(t, map[string]struct{}{"c1/shop/c": {}}, unprovenPolicies("c3", standby.Digest(), view),
		"the same entries are unproven for another cluster")
}

// /debug/state's unproven count is what the daemon holds: the own
// cluster's entries above its watermark are not counted (they are never
// frozen), another origin's are, and a fully proven origin has none.
func TestDebugUnprovenExcludesOwnOrigin(t *testing.T) {
	ds := ownWrites(t)
	standby := crdt.NewState("c1")
	view := func(fn func(*crdt.State)) { fn(standby) }
	for _, d := range []crdt.Delta{ds[0], ds[2]} { // ds[1] missing
		_, err := standby.Apply(d)
		require.NoError(t, err)
	}
	_, mcnps, unproven := liveEntries("c1", standby.Digest(), view)
	require.Equal(t, []string{"c1/shop/a", "c1/shop/c"}, mcnps)
	require.Empty(t, unproven, "own entries are never held")
	_, _, unproven = liveEntries("c3", standby.Digest(), view)
	require.Equal(t, map[string]int{"c1": 1}, unproven, "another cluster holds the entry above the gap")
	wm := watermarks(standby.Digest())["c1"]
	require.Equal(t, ds[0].To.String(), wm.Max, "/debug/state shows the watermark stopped at the gap")
	require.Equal(t, ds[2].To.String(), wm.Top, "and the highest version held above it")
	for _, d := range []crdt.Delta{ds[1], ds[2]} { // anti-entropy re-sends what lies above the new watermark
		_, err := standby.Apply(d)
		require.NoError(t, err)
	}
	_, _, unproven = liveEntries("c3", standby.Digest(), view)
	require.Empty(t, unproven, "the gap filled: proven")
}
