package store

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Pins returns the persisted trust-on-first-use pins: cluster ID -> Ed25519
// public key (docs/SECURITY.md).
func (s *Store) Pins() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPins)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			c, err := decodeKey(k, 1)
			if err != nil {
				return fmt.Errorf("%w: pin key %x: %v", ErrCorrupt, k, err)
			}
			out[c[0]] = bytes.Clone(v)
			return nil
		})
	})
	return out, err
}

// PutPin persists (fsynced) the pin of cluster origin. An existing pin is
// never overwritten: re-pinning is an operator decision (DeletePin).
func (s *Store) PutPin(origin string, key []byte) error {
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketPins)
		if err != nil {
			return err
		}
		k := encodeKey(origin)
		if old := b.Get(k); old != nil {
			if bytes.Equal(old, key) {
				return nil
			}
			return fmt.Errorf("store: cluster %q is already pinned to another key", origin)
		}
		return b.Put(k, bytes.Clone(key))
	})
}

// DeletePin forgets the pin of cluster origin (operator re-keying).
func (s *Store) DeletePin(origin string) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPins)
		if b == nil {
			return nil
		}
		return b.Delete(encodeKey(origin))
	})
}

// ReplacePin swaps the pin of cluster origin from old to key (an endorsed
// key rotation, verified by the caller): it fails if origin is pinned to
// anything but old or key.
func (s *Store) ReplacePin(origin string, old, key []byte) error {
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketPins)
		if err != nil {
			return err
		}
		k := encodeKey(origin)
		if cur := b.Get(k); cur != nil && !bytes.Equal(cur, old) && !bytes.Equal(cur, key) {
			return fmt.Errorf("store: cluster %q is pinned to neither the old nor the new key", origin)
		}
		return b.Put(k, bytes.Clone(key))
	})
}
