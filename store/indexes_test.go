package store

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func indexKeyCount(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		for _, b := range indexBuckets {
			n += tx.Bucket(b).Stats().KeyN
		}
		return nil
	}))
	return n
}

// Without Options.Indexes (the default) no index is written and the
// queries say so; opening with it rebuilds every index from the entries
// (equal to the brute-force derivation); opening without again clears them,
// so a later opt-in can never read stale keys.
func TestIndexesOptIn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := openTestStore(t, path, Options{})
	var changes []crdt.Change
	for i := 0; i < 50; i++ {
		changes = append(changes, put(podEntry(t, "c1", fmt.Sprintf("ns-%d/p%d", i%3, i), crdt.Version(i+1),
			map[string]string{"app": fmt.Sprintf("a%d", i%4)}, fmt.Sprintf("10.0.0.%d", i))))
	}
	require.NoError(t, s.Commit(changes, crdt.Digest{"c1": {Max: 50}}, nil))
	require.Zero(t, indexKeyCount(t, s), "no index maintained without a reader")
	_, err := s.PodsInNamespace("c1", "ns-0")
	require.ErrorIs(t, err, ErrNoIndexes)
	require.NoError(t, s.Close())

	s = openTestStore(t, path, Options{Indexes: true})
	checkIndexes(t, s)
	require.NotZero(t, indexKeyCount(t, s))
	pods, err := s.PodsInNamespace("c1", "ns-0")
	require.NoError(t, err)
	require.Len(t, pods, 17)
	// maintained from now on
	require.NoError(t, s.Commit([]crdt.Change{put(podEntry(t, "c1", "ns-0/new", 51, map[string]string{"app": "a0"}, "10.0.1.1"))},
		crdt.Digest{"c1": {Max: 51}}, nil))
	checkIndexes(t, s)
	require.NoError(t, s.Close())

	s = openTestStore(t, path, Options{})
	require.Zero(t, indexKeyCount(t, s), "cleared when opened without")
	require.NoError(t, s.Close())
}
