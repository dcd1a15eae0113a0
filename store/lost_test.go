package store

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func TestLostOriginRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	rec := LostOrigin{Origin: "c", UpTo: crdt.MakeVersion(3, 7), Since: 42, Policies: []crdt.Entry{{
		Key: crdt.Key{Origin: "c", Kind: crdt.KindPolicy, Name: "shop/deny"}, Version: crdt.MakeVersion(3, 5),
		Value: []byte{0x81}, Stamp: 9, Sig: []byte{1, 2}}}}
	require.NoError(t, s.PutLost(rec))
	require.NoError(t, s.Close())

	s, err = Open(path, Options{}) // survives a restart
	require.NoError(t, err)
	got, err := s.LostOrigins()
	require.NoError(t, err)
	require.Equal(t, map[string]LostOrigin{"c": rec}, got)

	// a damaged record is reported by name; the others are still returned
	require.NoError(t, s.PutLost(LostOrigin{Origin: "d", UpTo: 1}))
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLost).Put(encodeKey("c"), []byte{0xc1})
	}))
	got, err = s.LostOrigins()
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, got, "d")
	require.NotContains(t, got, "c")

	require.NoError(t, s.DeleteLost("c"))
	require.NoError(t, s.DeleteLost("d"))
	got, err = s.LostOrigins()
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, s.Close())
}
