package store

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// OnLoad sees, once and sorted by origin, kind and name, exactly the
// entries the replica restores (values included), before OpenReplica
// returns.
func TestOnLoadSeesRestoredEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	for i := range 50 {
		_, err = r.Write(crdt.KindPod, fmt.Sprintf("ns/p%d", i), podValue(t, map[string]string{"i": fmt.Sprint(i)}, "10.0.0.1"), i%7 == 0)
		require.NoError(t, err)
	}
	_, err = r.Write(crdt.KindNamespace, "ns", nil, false)
	require.NoError(t, err)
	other := crdt.NewState("c0")
	require.NoError(t, other.SetEpoch(1))
	d, _, err := other.Write(crdt.KindPod, "ns/q", podValue(t, nil), false, 1)
	require.NoError(t, err)
	_, err = r.Apply(d)
	require.NoError(t, err)
	require.NoError(t, r.Close())

	var seen [][]crdt.Entry
	r2 := openReplica(t, path, "c1", Options{OnLoad: func(entries []crdt.Entry) {
		cp := make([]crdt.Entry, len(entries))
		for i, e := range entries {
			e.Value, e.Sig = slices.Clone(e.Value), nil // valid only during the call
			cp[i] = e
		}
		seen = append(seen, cp)
	}})
	require.Len(t, seen, 1)
	require.Len(t, seen[0], 52)
	require.True(t, slices.IsSortedFunc(seen[0], func(a, b crdt.Entry) int {
		return cmp.Or(cmp.Compare(a.Origin, b.Origin), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	}))
	var want []crdt.Entry
	r2.View(func(st *crdt.State) { want = stateEntries(st) })
	for i := range want {
		want[i].Sig = nil
		if len(want[i].Value) == 0 {
			want[i].Value = nil
		}
	}
	require.Equal(t, want, seen[0])
}

// faultLike is what a panic on a memory fault looks like (runtime.Error
// with Addr, under debug.SetPanicOnFault).
type faultLike struct{ error }

func (faultLike) Addr() uintptr { return 0xdead }

// Corrupt content that is found while OnLoad runs (Restore refuses it, or
// reading a value faults) makes the replica start empty, and OnLoad is
// called again with the empty state, last; a file is moved aside.
func TestOnLoadCorruptStartsOver(t *testing.T) {
	t.Run("restore refuses", func(t *testing.T) {
		mb := NewMemBackend()
		e := crdt.Entry{Key: crdt.Key{Origin: "c9", Kind: crdt.KindPod, Name: "ns/p"}, Version: crdt.MakeVersion(1, 1), Value: podValue(t, nil)}
		require.NoError(t, <-mb.Commit(&Batch{Changes: []crdt.Change{{Key: e.Key, New: &e}}})) // no digest for c9
		var seen []int
		r, err := NewReplica(mb, "", Options{OnLoad: func(es []crdt.Entry) { seen = append(seen, len(es)) }})
		require.NoError(t, err)
		defer func() { require.NoError(t, r.Close()) }()
		require.Equal(t, []int{1, 0}, seen)
		require.Empty(t, r.Digest())
	})
	t.Run("fault while observing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "r.db")
		populated(t, path)
		var seen []int
		r := openReplica(t, path, "", Options{OnLoad: func(es []crdt.Entry) {
			seen = append(seen, len(es))
			if len(es) > 0 {
				panic(faultLike{errors.New("unexpected fault address")})
			}
		}})
		require.Equal(t, []int{3000, 0}, seen)
		require.ErrorIs(t, r.Info().Corrupt, ErrCorrupt)
		require.FileExists(t, r.Info().MovedAside)
		require.Empty(t, r.Digest())
	})
	t.Run("identity mismatch", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "r.db")
		r, err := OpenReplica(path, "c1", Options{})
		require.NoError(t, err)
		require.NoError(t, r.Close())
		calls := 0
		_, err = OpenReplica(path, "c2", Options{OnLoad: func([]crdt.Entry) { calls++ }})
		require.Error(t, err)
		require.Zero(t, calls)
	})
}
