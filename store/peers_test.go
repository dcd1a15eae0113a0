package store

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// The remembered gossip addresses survive a restart; a damaged record is
// ErrCorrupt (the daemon then starts with its seeds alone); the set is
// bounded.
func TestRememberedPeers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	got, err := s.Peers()
	require.NoError(t, err)
	require.Empty(t, got, "a file that never held any")
	addrs := []string{"10.1.0.5:7946", "10.2.0.9:7946"}
	require.NoError(t, s.PutPeers(addrs))
	require.NoError(t, s.Close())

	s, err = Open(path, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	got, err = s.Peers()
	require.NoError(t, err)
	require.Equal(t, addrs, got)

	many := make([]string, MaxPeers+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.0.%d:7946", i)
	}
	require.Error(t, s.PutPeers(many))
	got, err = s.Peers()
	require.NoError(t, err)
	require.Equal(t, addrs, got, "a refused set leaves the last one")

	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPeers).Put(keyPeers, []byte{0xc1})
	}))
	got, err = s.Peers()
	require.ErrorIs(t, err, ErrCorrupt)
	require.Empty(t, got)
}
