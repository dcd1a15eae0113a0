package store

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// A read-only open reads a closed file, refuses one a daemon holds with
// ErrLocked within its timeout, and says when there is no file.
func TestOpenReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Commit([]crdt.Change{put(podEntry(t, "eu-1", "shop/a", 1, nil, "10.0.0.1")),
		put(nsEntry(t, "eu-1", "shop", 2))}, crdt.Digest{"eu-1": {Max: 2}}, nil))

	start := time.Now()
	_, err = OpenReadOnly(path, 100*time.Millisecond)
	require.ErrorIs(t, err, ErrLocked)
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, s.Close())

	ro, err := OpenReadOnly(path, time.Second)
	require.NoError(t, err)
	var got []string
	require.NoError(t, ro.Scan("/coastguard/eu-1/pod/", 0, func(p string, _ crdt.Entry) error { got = append(got, p); return nil }))
	require.Equal(t, []string{"/coastguard/eu-1/pod/shop/a"}, got)
	ro2, err := OpenReadOnly(path, time.Second)
	require.NoError(t, err, "readers share the file")
	require.NoError(t, ro2.Close())
	require.NoError(t, ro.Close())

	_, err = OpenReadOnly(filepath.Join(t.TempDir(), "none.db"), time.Second)
	require.ErrorContains(t, err, "does not exist")
}

// kindByName inverts Kind.String, opaque kinds included.
func TestKindByName(t *testing.T) {
	for _, s := range crdt.Kinds() {
		k, ok := kindByName(s.Name)
		require.True(t, ok)
		require.Equal(t, s.Kind, k)
	}
	k, ok := kindByName(crdt.Kind(200).String())
	require.True(t, ok)
	require.Equal(t, crdt.Kind(200), k)
	for _, bad := range []string{"", "pods", "kind(0)", "kind(256)", "kind(7"} {
		_, ok := kindByName(bad)
		require.False(t, ok, bad)
	}
}
