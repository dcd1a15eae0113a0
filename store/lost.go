package store

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// bucketLost holds the last-known policies of lost clusters: (origin) ->
// msgpack LostOrigin. Created on first use, so older files open unchanged.
var bucketLost = []byte("lost")

// LostOrigin is what this cluster keeps of a cluster that was retired
// because it disappeared (a retirement decided by membership after the
// reconnect timeout, not a decommission): the MultiClusterNetworkPolicies
// it had originated, as last replicated, which this cluster keeps
// enforcing until they are released (docs/SEMANTICS.md, "Lost origins").
type LostOrigin struct {
	Origin string `msgpack:"o"`
	// UpTo is the retirement that lost the origin.
	UpTo crdt.Version `msgpack:"u"`
	// Since is when this replica applied it (unix nanoseconds).
	Since int64 `msgpack:"s"`
	// Policies are the origin's live policy entries at that moment.
	Policies []crdt.Entry `msgpack:"p"`
}

// LostOrigins returns every kept lost origin. A record that does not decode
// is an error naming it (ErrCorrupt): the caller reports it; the others are
// still returned.
func (s *Store) LostOrigins() (map[string]LostOrigin, error) {
	out := map[string]LostOrigin{}
	var bad []string
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLost)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var l LostOrigin
			c, err := decodeKey(k, 1)
			if err == nil {
				err = msgpack.Unmarshal(v, &l)
			}
			if err != nil || l.Origin != c[0] {
				bad = append(bad, fmt.Sprintf("%x", k))
				return nil
			}
			out[l.Origin] = l
			return nil
		})
	})
	if err == nil && len(bad) > 0 {
		err = fmt.Errorf("%w: undecodable lost-origin records %v", ErrCorrupt, bad)
	}
	return out, err
}

// PutLost persists (fsynced) the record of a lost origin, replacing any
// earlier one.
func (s *Store) PutLost(l LostOrigin) error {
	v, err := msgpack.Marshal(&l)
	if err != nil {
		return fmt.Errorf("store: encode lost origin %s: %w", l.Origin, err)
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketLost)
		if err != nil {
			return err
		}
		return b.Put(encodeKey(l.Origin), v)
	})
}

// DeleteLost forgets a lost origin (released, decommissioned, or back).
func (s *Store) DeleteLost(origin string) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLost)
		if b == nil {
			return nil
		}
		return b.Delete(encodeKey(origin))
	})
}
