package store

import (
	"cmp"
	"errors"
	"slices"
	"sync"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Backend is where a Replica keeps its state durable. The Replica owns the
// CRDT semantics, the lock and the change feed; a Backend only loads what
// was committed and commits batches, in order. Two implement it: bbolt
// (OpenReplica, the daemon's) and MemBackend (tests and the gossip
// simulator).
type Backend interface {
	// Load calls fn once with everything committed so far. The snapshot,
	// its entries' values included, may alias backend memory that is valid
	// only until fn returns. If the stored data is corrupt - found by the
	// backend, or fn returns an error wrapping ErrCorrupt - the backend
	// quarantines it, starts empty, and calls fn a second time with an
	// empty snapshot. Any other error of fn is returned as is.
	Load(fn func(*Snapshot) error) error
	// Commit queues b and returns at once; the channel receives the result
	// once b is durable (nil) or has failed. Batches commit in the order of
	// the Commit calls (a backend may coalesce several into one
	// transaction). b.OnCommit, if set, runs after b is durable and before
	// the result is delivered, in commit order. A failed commit is sticky:
	// every later batch fails too, until the backend is loaded again.
	Commit(b *Batch) <-chan error
	// Close flushes queued batches and releases the storage.
	Close() error
}

// Batch is one atomic unit of persistence: entry changes together with the
// digests (and signed proofs) of the origins they touch, so that stored
// entries and stored digests always agree.
type Batch struct {
	Changes []crdt.Change
	// Digests are the origin digests to store (only those that moved).
	Digests crdt.Digest
	// Proofs are the origins' signed watermarks (crdt.Proof) to store.
	Proofs map[string]crdt.Proof
	// Writer, when set, replaces this cluster's writer metadata.
	Writer *WriterMeta
	// Self, when set, records the cluster the data belongs to.
	Self *string
	// OnCommit runs after the batch is durable (see Backend.Commit).
	OnCommit func()
}

// MemBackend is a Backend in memory: nothing survives the process, but a
// MemBackend survives its Replica, so closing a Replica and opening a new
// one on the same MemBackend is a restart. Commits are synchronous. Entry
// values are shared with the committing replica, never copied: the crdt
// never modifies a value in place.
type MemBackend struct {
	mu      sync.Mutex
	self    string
	writer  WriterMeta
	digest  crdt.Digest
	proofs  map[string]crdt.Proof
	entries map[crdt.Key]crdt.Entry
	commits int
	failErr error // injected by FailCommits
	failed  error // sticky, until the next Load
	closed  bool
}

var _ Backend = (*MemBackend)(nil)

// NewMemBackend returns an empty in-memory backend.
func NewMemBackend() *MemBackend {
	return &MemBackend{digest: crdt.Digest{}, proofs: map[string]crdt.Proof{}, entries: map[crdt.Key]crdt.Entry{}}
}

// NewMemReplica returns a replica of cluster self ("" = observer) on a
// fresh MemBackend, with writer epoch 1: the gossip tests' and the
// simulator's replica. Opening an empty MemBackend cannot fail.
func NewMemReplica(self string) *Replica {
	r, err := NewReplica(NewMemBackend(), self, Options{})
	if err != nil {
		panic("store: opening an empty MemBackend: " + err.Error())
	}
	return r
}

// Load implements Backend. It also reopens a closed MemBackend and clears
// a commit failure (as a restart does).
func (m *MemBackend) Load(fn func(*Snapshot) error) error {
	m.mu.Lock()
	m.closed, m.failed, m.failErr = false, nil, nil
	snap := &Snapshot{
		Self:    m.self,
		Writer:  m.writer,
		Digest:  crdt.Digest{},
		Proofs:  map[string]crdt.Proof{},
		Entries: make([]crdt.Entry, 0, len(m.entries)),
	}
	for o, d := range m.digest {
		snap.Digest[o] = d
	}
	for o, p := range m.proofs {
		snap.Proofs[o] = p
	}
	for _, e := range m.entries {
		snap.Entries = append(snap.Entries, e)
	}
	m.mu.Unlock()
	// Same order as the file: by origin, then kind, then name.
	slices.SortFunc(snap.Entries, func(a, b crdt.Entry) int {
		return cmp.Or(cmp.Compare(a.Origin, b.Origin), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	err := fn(snap)
	if !errors.Is(err, ErrCorrupt) {
		return err
	}
	// Content the replica cannot restore: start empty, like a file moved
	// aside.
	m.mu.Lock()
	m.self, m.writer = "", WriterMeta{}
	clear(m.digest)
	clear(m.proofs)
	clear(m.entries)
	m.mu.Unlock()
	return fn(&Snapshot{Digest: crdt.Digest{}, Proofs: map[string]crdt.Proof{}})
}

// Commit implements Backend; the batch is applied before Commit returns.
func (m *MemBackend) Commit(b *Batch) <-chan error {
	done := make(chan error, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		done <- ErrClosed
	case m.failed != nil:
		done <- m.failed
	case m.failErr != nil:
		m.failed = &CommitError{Err: m.failErr}
		done <- m.failed
	default:
		m.apply(b)
		m.commits++
		if b.OnCommit != nil {
			b.OnCommit()
		}
		done <- nil
	}
	return done
}

// must hold m.mu.
func (m *MemBackend) apply(b *Batch) {
	for i := range b.Changes {
		ch := &b.Changes[i]
		if ch.New == nil {
			delete(m.entries, ch.Key)
		} else {
			m.entries[ch.Key] = *ch.New
		}
	}
	for o, d := range b.Digests {
		m.digest[o] = d
	}
	for o, p := range b.Proofs {
		m.proofs[o] = p
	}
	if b.Writer != nil {
		m.writer = *b.Writer
	}
	if b.Self != nil {
		m.self = *b.Self
	}
}

// Close implements Backend. The content is kept for the next Load.
func (m *MemBackend) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// FailCommits makes every later commit fail with a *CommitError wrapping
// err, as a full disk would, until the next Load (a restart on a repaired
// disk). For tests of the fail-closed path.
func (m *MemBackend) FailCommits(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failErr = err
}

// Commits returns the number of successful commits.
func (m *MemBackend) Commits() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.commits
}
