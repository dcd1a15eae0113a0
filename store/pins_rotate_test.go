package store

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// ReplacePin moves a pin from the old key to the endorsed new one, survives
// a reopen, and refuses to move a pin it did not hold.
func TestReplacePin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	old, key, other := []byte("old-key-old-key-old-key-old-key-"), []byte("new-key-new-key-new-key-new-key-"), []byte("xxx-key-xxx-key-xxx-key-xxx-key-")
	require.NoError(t, r.Store().PutPin("c2", old))
	require.Error(t, r.Store().ReplacePin("c2", other, key), "not pinned to the claimed old key")
	require.NoError(t, r.Store().ReplacePin("c2", old, key))
	require.NoError(t, r.Store().ReplacePin("c2", old, key), "idempotent")
	require.NoError(t, r.Close())

	r2 := openReplica(t, path, "c1", Options{})
	pins, err := r2.Store().Pins()
	require.NoError(t, err)
	require.Equal(t, key, pins["c2"])
}
