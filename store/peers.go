package store

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"
)

// bucketPeers holds the gossip addresses of the members this daemon last
// saw alive: key "addrs" -> msgpack []string. Created on first use, so older
// files open unchanged. A restart dials them with the seeds (gossip
// Config.KnownPeers), so a daemon whose seeds do not resolve still finds
// the mesh.
var (
	bucketPeers = []byte("peers")
	keyPeers    = []byte("addrs")
)

// MaxPeers bounds the remembered addresses.
const MaxPeers = 32

// Peers returns the remembered gossip addresses (none on a file that never
// held any). A record that does not decode is an ErrCorrupt error.
func (s *Store) Peers() ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPeers)
		if b == nil {
			return nil
		}
		v := b.Get(keyPeers)
		if v == nil {
			return nil
		}
		if err := msgpack.Unmarshal(v, &out); err != nil || len(out) > MaxPeers {
			out = nil
			return fmt.Errorf("%w: undecodable remembered peers record (%d bytes)", ErrCorrupt, len(v))
		}
		return nil
	})
	return out, err
}

// PutPeers replaces the remembered gossip addresses (at most MaxPeers; an
// unchanged set is not rewritten).
func (s *Store) PutPeers(addrs []string) error {
	if len(addrs) > MaxPeers {
		return fmt.Errorf("store: %d remembered peers, at most %d", len(addrs), MaxPeers)
	}
	v, err := msgpack.Marshal(addrs)
	if err != nil {
		return fmt.Errorf("store: encode remembered peers: %w", err)
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketPeers)
		if err != nil {
			return err
		}
		if bytes.Equal(b.Get(keyPeers), v) {
			return nil
		}
		return b.Put(keyPeers, v)
	})
}
