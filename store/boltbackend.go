package store

import (
	"errors"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// boltBackend is the Backend of OpenReplica: a Store opened with its page
// check (if one is due) running in the background while Load restores.
type boltBackend struct{ s *Store }

var _ Backend = (*boltBackend)(nil)

// Load implements Backend: fn runs inside the read transaction, so entry
// values alias the mmap and the replica's restore copies only what it
// keeps. The deferred page check's verdict decides whether the loaded
// state may be used; a corrupt file is moved aside and fn runs again on an
// empty snapshot.
func (b *boltBackend) Load(fn func(*Snapshot) error) error {
	s := b.s
	start := time.Now()
	err := s.load(false, fn)
	if cerr := s.finishOpen(); cerr != nil && (err == nil || errors.Is(err, ErrCorrupt)) {
		err = cerr
	}
	if errors.Is(err, ErrCorrupt) {
		if rerr := s.recoverCorrupt(err); rerr != nil {
			return rerr
		}
		err = fn(&Snapshot{Digest: crdt.Digest{}, Proofs: map[string]crdt.Proof{}})
	}
	if err != nil {
		return err
	}
	s.m.loadSeconds.Set(time.Since(start).Seconds())
	return nil
}

// Commit implements Backend with the group committer.
func (b *boltBackend) Commit(batch *Batch) <-chan error { return b.s.submit(batch) }

// Close implements Backend.
func (b *boltBackend) Close() error { return b.s.Close() }
