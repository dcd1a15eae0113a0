package store

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Replica is the daemon's single copy of the replicated state: a
// crdt.State guarded by a mutex, kept durable by a Backend (bbolt in the
// daemon, memory in tests), with a change feed. It knows nothing of the
// storage format; the Backend knows nothing of CRDT semantics.
//
// Durability contract: Write, WriteMany, Apply, ApplyRetire,
// CollectGarbage, SetMinEpoch and BumpEpoch return only after the batch
// holding their effect (entries together with the digests covering them)
// is committed (for bbolt: fsynced). Every one of them goes through
// mutate, the one write path: concurrent callers are group-committed.
// Subscribers are called after the commit, in commit order, on a
// dedicated goroutine outside every lock (a subscriber may call back into
// the Replica).
//
// Between the in-memory mutation and the commit, readers (Digest,
// DeltaSince, View) may already see the new state. That is safe: data from
// peers is re-pulled if lost, and the writer's own versions are fenced by
// the epoch bump on every open, so a version seen by a peer but lost in a
// crash is never reused. If a commit fails, the caller gets the error, the
// change feed never sees the failed batch, and the Replica refuses every
// further mutation (the in-memory state is then ahead of the backend): it
// fails closed until the daemon restarts, reloads and resyncs.
type Replica struct {
	mu      sync.RWMutex
	state   *crdt.State
	backend Backend
	self    string
	opts    Options
	log     *slog.Logger
	failed  error // first commit error; guarded by mu

	subsMu sync.Mutex
	subs   []func([]crdt.Change)
	notify *notifier

	reset []string

	// pv pre-verifies large batches' signatures in parallel (preverify.go);
	// nil without a verifier.
	pv *preVerifier
}

// OpenReplica opens (or creates) the bbolt store at path and returns a
// replica on it (NewReplica).
//
// A corrupt file - detected at open, while loading, or because the loaded
// entries do not restore - is moved aside and the replica starts empty.
func OpenReplica(path, self string, opts Options) (*Replica, error) {
	opts.defaults()
	sopts := opts
	sopts.OnCommitError = nil // the replica reports it, for every backend
	s, err := open(path, sopts, true)
	if err != nil {
		return nil, err
	}
	r, err := NewReplica(&boltBackend{s: s}, self, opts)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return r, nil
}

// NewReplica loads backend into a fresh crdt.State for cluster self ("" =
// observer, never writes), and, for a writer, commits a new epoch before
// returning: max(persisted epoch + 1, state.MinEpoch()). Of opts it uses
// Logger, Now, VerifyWorkers and OnCommitError (called once, by the caller
// that hit the first failed commit). The Replica owns backend from then on
// (Close closes it); on error the caller still does.
func NewReplica(backend Backend, self string, opts Options) (*Replica, error) {
	opts.defaults()
	start := time.Now()
	l, err := restore(backend, self, opts)
	if err != nil {
		return nil, err
	}
	r := &Replica{state: l.st, backend: backend, self: self, opts: opts, reset: l.reset,
		log: opts.Logger.With("component", "store")}
	info := r.Info()
	r.log.Info("store loaded", "backend", describe(backend), "entries", l.entries, "duration", time.Since(start), "self", self,
		"unclean_shutdown", info.Unclean, "page_check", info.Checked, "reset_origins", l.reset)
	r.notify = newNotifier(r.deliver)
	b := &Batch{Self: &self, Digests: l.resetDigs}
	if self != "" {
		epoch := max(l.writer.Epoch+1, l.st.MinEpoch())
		if l.writer.Epoch >= crdt.MaxEpoch || epoch > crdt.MaxEpoch {
			r.notify.close()
			return nil, fmt.Errorf("store: writer epoch exhausted (persisted %d)", l.writer.Epoch)
		}
		if err := l.st.SetEpoch(epoch); err != nil {
			r.notify.close()
			return nil, fmt.Errorf("store: set epoch: %w", err)
		}
		b.Writer = r.writerMeta()
	}
	// Persist the new epoch (and any reset digests) before the first write.
	if err := <-backend.Commit(b); err != nil {
		r.notify.close()
		return nil, err
	}
	return r, nil
}

// loaded is what a replica restores from its backend.
type loaded struct {
	st        *crdt.State
	writer    WriterMeta
	reset     []string
	resetDigs crdt.Digest
	entries   int
}

// restore loads the backend into a fresh crdt.State (OnLoad running
// alongside); a corrupt backend calls back again with an empty snapshot.
func restore(backend Backend, self string, opts Options) (loaded, error) {
	var l loaded
	err := backend.Load(func(snap *Snapshot) (err error) {
		if snap.Self != "" && snap.Self != self {
			return fmt.Errorf("store: %s belongs to cluster %q, not %q; refusing to mix identities (move the file away to start over)",
				describe(backend), snap.Self, self)
		}
		if opts.OnLoad != nil {
			// Waited for before the snapshot's memory goes away, even if
			// Restore panics on a fault.
			done := make(chan error, 1)
			go func() { done <- observeLoad(opts.OnLoad, snap.Entries) }()
			defer func() {
				if oerr := <-done; err == nil {
					err = oerr
				}
			}()
		}
		l.st = crdt.NewState(self)
		if err := l.st.Restore(snap.Digest, snap.Entries); err != nil {
			return fmt.Errorf("%w: restore: %v", ErrCorrupt, err)
		}
		l.st.RestoreProofs(snap.Proofs)
		l.writer, l.reset, l.entries = snap.Writer, snap.Reset, len(snap.Entries)
		l.resetDigs = crdt.Digest{}
		for _, o := range l.reset {
			l.resetDigs[o] = snap.Digest[o]
		}
		return nil
	})
	return l, err
}

// observeLoad runs Options.OnLoad. A memory fault while it reads the
// snapshot (values may alias the mmap of a damaged file) makes the load
// corrupt, as it does on the restoring goroutine; any other panic is a bug
// of the observer and is not taken for a bad file.
func observeLoad(fn func([]crdt.Entry), entries []crdt.Entry) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("%w: fault at %#x while observing the load: %v", ErrCorrupt, f.Addr(), r)
				return
			}
			panic(r)
		}
	}()
	fn(entries)
	return nil
}

// describe names a backend in messages: the file path for bbolt.
func describe(b Backend) string {
	if bb, ok := b.(*boltBackend); ok {
		return bb.s.path
	}
	return "the in-memory state"
}

// Info reports what opening the file found (fresh file, moved-aside file);
// zero for a backend other than bbolt.
func (r *Replica) Info() OpenInfo {
	if s := r.Store(); s != nil {
		return s.Info()
	}
	return OpenInfo{}
}

// ResetOrigins lists origins whose persisted digest disagreed with their
// entries at load; they were marked for re-pull (Max lowered to 0).
func (r *Replica) ResetOrigins() []string { return append([]string(nil), r.reset...) }

// Store exposes the underlying bbolt store (pins, index queries); nil for
// another backend.
func (r *Replica) Store() *Store {
	if b, ok := r.backend.(*boltBackend); ok {
		return b.s
	}
	return nil
}

// Epoch returns the writer epoch in use.
func (r *Replica) Epoch() uint32 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.Epoch()
}

// must hold r.mu.
func (r *Replica) writerMeta() *WriterMeta {
	return &WriterMeta{Epoch: r.state.Epoch(), LastVersion: r.state.Digest()[r.self].Max}
}

// effect is what one mutation did to the state, for mutate to commit.
type effect struct {
	changes []crdt.Change
	// origins whose digest (and signed proof) may have moved.
	origins map[string]struct{}
	// writer: persist this cluster's writer metadata (epoch, last version).
	writer bool
}

// own is the effect of a mutation of this cluster's own origin.
func (r *Replica) own(changes []crdt.Change) effect {
	return effect{changes: changes, origins: map[string]struct{}{r.self: {}}, writer: true}
}

// mutate is the replica's one write path. Under the write lock it refuses
// if a commit failed before, runs fn on the state and hands what fn did to
// the backend as one Batch, so batches reach the backend (and the change
// feed) in mutation order; it waits for the commit outside the lock, so
// concurrent callers group-commit. fn reports its own errors through its
// closure; an effect with nothing in it is not committed.
//
// With dedupe, digests equal to those before fn are not rewritten, and a
// batch with no change and no moved digest is not committed at all:
// gossip re-delivers known deltas constantly and each commit costs an
// fsync.
//
// The error is a refusal or a commit error. A commit error makes the
// replica refuse every further mutation (fail closed).
func (r *Replica) mutate(dedupe bool, fn func(*crdt.State) effect) error {
	r.mu.Lock()
	if r.failed != nil {
		r.mu.Unlock()
		return r.failed
	}
	var before crdt.Digest
	if dedupe {
		before = r.state.Digest()
	}
	eff := fn(r.state)
	b := r.batch(&eff, dedupe, before)
	if b == nil {
		r.mu.Unlock()
		return nil
	}
	done := r.backend.Commit(b)
	r.mu.Unlock()
	err := <-done
	if err != nil && !errors.Is(err, ErrClosed) {
		r.mu.Lock()
		first := r.failed == nil
		if first {
			r.failed = err
		}
		r.mu.Unlock()
		if first && r.opts.OnCommitError != nil {
			r.opts.OnCommitError(err)
		}
	}
	return err
}

// batch turns an effect into the Batch to commit, or nil when there is
// nothing to commit. Must hold r.mu (write).
func (r *Replica) batch(eff *effect, dedupe bool, before crdt.Digest) *Batch {
	if len(eff.changes) == 0 && len(eff.origins) == 0 && !eff.writer {
		return nil
	}
	d := r.state.Digest()
	digests := make(crdt.Digest, len(eff.origins))
	for o := range eff.origins {
		if od, ok := d[o]; ok {
			if prev, seen := before[o]; dedupe && seen && prev == od {
				continue
			}
			digests[o] = od
		}
	}
	if dedupe && len(eff.changes) == 0 && len(digests) == 0 {
		return nil
	}
	b := &Batch{Changes: eff.changes, Digests: digests}
	for o := range digests {
		if p := r.state.Proof(o); p.Head != 0 || p.HeadSig != nil || p.GCSig != nil || p.RetiredSig != nil || p.Mark.Sig != nil {
			if b.Proofs == nil {
				b.Proofs = map[string]crdt.Proof{}
			}
			b.Proofs[o] = p
		}
	}
	if eff.writer {
		b.Writer = r.writerMeta()
	}
	if changes := eff.changes; len(changes) > 0 {
		b.OnCommit = func() { r.notify.push(changes) }
	}
	return b
}

var errObserver = errors.New("store: observer replica cannot write")

// Write records a local change of this cluster's own entry and returns the
// delta to gossip, after it is durable.
func (r *Replica) Write(kind crdt.Kind, name string, value []byte, deleted bool) (crdt.Delta, error) {
	if r.self == "" {
		return crdt.Delta{}, errObserver
	}
	var delta crdt.Delta
	var werr error
	err := r.mutate(false, func(st *crdt.State) effect {
		d, changes, err := st.Write(kind, name, value, deleted, r.opts.Now().UnixNano())
		if err != nil {
			werr = err
			return effect{}
		}
		delta = d
		return r.own(changes)
	})
	if err = cmpErr(err, werr); err != nil {
		return crdt.Delta{}, err
	}
	return delta, nil
}

// cmpErr is the error of a mutation: the commit's, else the operation's.
func cmpErr(commitErr, opErr error) error {
	if commitErr != nil {
		return commitErr
	}
	return opErr
}

// WriteOp is one local write for WriteMany.
type WriteOp struct {
	Kind    crdt.Kind
	Name    string
	Value   []byte
	Deleted bool
}

// WriteMany performs several local writes atomically durable in ONE
// transaction (one fsync), e.g. the full inventory sync at start, where a
// Write per object would cost an fsync each. It stops at the first invalid
// op; the writes before it are persisted and their deltas returned with the
// error.
func (r *Replica) WriteMany(ops []WriteOp) ([]crdt.Delta, error) {
	if r.self == "" {
		return nil, errObserver
	}
	var deltas []crdt.Delta
	var werr error
	err := r.mutate(false, func(st *crdt.State) effect {
		stamp := r.opts.Now().UnixNano()
		deltas = make([]crdt.Delta, 0, len(ops))
		var changes []crdt.Change
		for _, op := range ops {
			d, ch, err := st.Write(op.Kind, op.Name, op.Value, op.Deleted, stamp)
			if err != nil {
				werr = fmt.Errorf("store: write %s %q: %w", op.Kind, op.Name, err)
				break
			}
			deltas = append(deltas, d)
			changes = append(changes, ch...)
		}
		if len(deltas) == 0 {
			return effect{}
		}
		return r.own(changes)
	})
	if err != nil || len(deltas) == 0 {
		return nil, cmpErr(err, werr)
	}
	return deltas, werr
}

// CollectGarbage advances this cluster's tombstone GC watermark (dropping
// its own tombstones up to upTo) and returns the delta announcing it.
func (r *Replica) CollectGarbage(upTo crdt.Version) (crdt.Delta, []crdt.Change, error) {
	if r.self == "" {
		return crdt.Delta{}, nil, errors.New("store: observer replica cannot collect garbage")
	}
	var delta crdt.Delta
	var changes []crdt.Change
	err := r.mutate(false, func(st *crdt.State) effect {
		delta, changes = st.CollectGarbage(upTo)
		return r.own(changes)
	})
	if err != nil {
		return crdt.Delta{}, nil, err
	}
	return delta, changes, nil
}

// Apply merges deltas from peers and returns their effects after they are
// durable. Deltas are applied in order (those of one origin; origins with
// a checkpoint are first re-cut at its segment bounds, see
// SplitAtCheckpoints); on the first invalid delta Apply stops, persists
// what was applied, and returns those changes with the error.
func (r *Replica) Apply(deltas ...crdt.Delta) ([]crdt.Change, error) {
	var all []crdt.Change
	var applyErr error
	err := r.mutate(true, func(st *crdt.State) effect {
		deltas, _ := st.SplitAtCheckpoints(deltas, true)
		origins := map[string]struct{}{}
		var prepared []bool
		if r.pv != nil && r.pv.workers > 1 && entryCount(deltas) >= preVerifyMin {
			prepared = make([]bool, len(deltas))
		}
		for i, d := range deltas {
			if prepared != nil && !prepared[i] {
				// origins pinned by the deltas before (trust on first use)
				// become eligible here
				r.pv.prepare(deltas[i:], prepared[i:], st.Digest(), st.Vouched)
			}
			ch, err := st.Apply(d)
			all = append(all, ch...)
			origins[d.Origin] = struct{}{}
			if err != nil {
				applyErr = err
				break
			}
		}
		if prepared != nil {
			r.pv.reset()
		}
		for _, c := range all {
			origins[c.Key.Origin] = struct{}{}
		}
		return effect{changes: all, origins: origins, writer: r.self != "" && hasOrigin(origins, r.self)}
	})
	if err != nil {
		return nil, err
	}
	return all, applyErr
}

func hasOrigin(m map[string]struct{}, o string) bool { _, ok := m[o]; return ok }

func entryCount(ds []crdt.Delta) int {
	n := 0
	for i := range ds {
		n += len(ds[i].Entries)
	}
	return n
}

// ApplyRetire merges a retirement record and returns its effects after they
// are durable.
func (r *Replica) ApplyRetire(rt crdt.Retire) ([]crdt.Change, error) {
	var changes []crdt.Change
	var aerr error
	err := r.mutate(true, func(st *crdt.State) effect {
		changes, aerr = st.ApplyRetire(rt)
		if aerr != nil && len(changes) == 0 {
			return effect{}
		}
		return effect{changes: changes, origins: map[string]struct{}{rt.Origin: {}}, writer: rt.Origin == r.self && r.self != ""}
	})
	if err != nil || (aerr != nil && len(changes) == 0) {
		return nil, cmpErr(err, aerr)
	}
	return changes, aerr
}

// SealEpochsBelow retires every version of the own origin from epochs
// before epoch (crdt.State.SealEpochsBelow), durably, and returns the
// signed record to disseminate and its effects.
func (r *Replica) SealEpochsBelow(epoch uint32) (crdt.Retire, []crdt.Change, error) {
	var rt crdt.Retire
	var changes []crdt.Change
	var serr error
	err := r.mutate(false, func(st *crdt.State) effect {
		rt, changes, serr = st.SealEpochsBelow(epoch)
		if serr != nil && len(changes) == 0 {
			return effect{}
		}
		return effect{changes: changes, origins: map[string]struct{}{r.self: {}}, writer: true}
	})
	if err != nil || (serr != nil && len(changes) == 0) {
		return crdt.Retire{}, nil, cmpErr(err, serr)
	}
	return rt, changes, serr
}

// RetireOwn retires the own origin up to its current watermark (a
// decommission), durably, and returns the record to disseminate, signed
// when the replica has a signer; a zero Retire when nothing is left to
// retire.
func (r *Replica) RetireOwn() (crdt.Retire, error) {
	if r.self == "" {
		return crdt.Retire{}, crdt.ErrObserver
	}
	var rt crdt.Retire
	var changes []crdt.Change
	var aerr error
	err := r.mutate(true, func(st *crdt.State) effect {
		od := st.Digest()[r.self]
		if od.Max == 0 || od.Retired >= od.Max {
			return effect{}
		}
		rt = st.SignRetire(crdt.Retire{Origin: r.self, UpTo: od.Max})
		changes, aerr = st.ApplyRetire(rt)
		if aerr != nil && len(changes) == 0 {
			return effect{}
		}
		return effect{changes: changes, origins: map[string]struct{}{r.self: {}}, writer: true}
	})
	if err != nil || (aerr != nil && len(changes) == 0) {
		return crdt.Retire{}, cmpErr(err, aerr)
	}
	return rt, aerr
}

// RetireRecord returns the record that retires origin at its current Max.
func (r *Replica) RetireRecord(origin string) crdt.Retire {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.RetireRecord(origin)
}

var errNoEpoch = errors.New("store: observer replica has no writer epoch")

// SetMinEpoch raises the writer epoch to at least epoch (the daemon feeds
// the Lease's leaseTransitions here), and to at least State.MinEpoch (the
// versions of our own origin seen so far), and persists it before
// returning. It never lowers the epoch.
func (r *Replica) SetMinEpoch(epoch uint32) error {
	if r.self == "" {
		return errNoEpoch
	}
	var serr error
	err := r.mutate(false, func(st *crdt.State) effect {
		// The hint is a floor: a writer that has seen later versions of
		// its own origin (a lost store, peers that still hold them) must
		// go above those too, not fail.
		epoch := max(epoch, st.MinEpoch())
		if epoch <= st.Epoch() {
			return effect{}
		}
		if serr = st.SetEpoch(epoch); serr != nil {
			return effect{}
		}
		return effect{writer: true}
	})
	return cmpErr(err, serr)
}

// BumpEpoch moves the writer to a fresh epoch, max(MinEpoch, Epoch+1),
// persisted before returning. Call it when Write fails with
// crdt.ErrNeedsEpochBump (our own origin was retired, or a later version
// of it was seen), then re-publish every live object.
func (r *Replica) BumpEpoch() (uint32, error) {
	if r.self == "" {
		return 0, errNoEpoch
	}
	var epoch uint32
	var serr error
	err := r.mutate(false, func(st *crdt.State) effect {
		epoch = max(st.Epoch()+1, st.MinEpoch())
		if serr = st.SetEpoch(epoch); serr != nil {
			return effect{}
		}
		return effect{writer: true}
	})
	if err = cmpErr(err, serr); err != nil {
		return 0, err
	}
	return epoch, nil
}

// Digest returns the current digest.
func (r *Replica) Digest() crdt.Digest {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.Digest()
}

// DeltaSince returns what remote lacks (see crdt.State.DeltaSince).
func (r *Replica) DeltaSince(remote crdt.Digest, maxEntries int) []crdt.Delta {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.DeltaSince(remote, maxEntries)
}

// Behind lists origins where remote has something this replica lacks.
func (r *Replica) Behind(remote crdt.Digest) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.Behind(remote)
}

// View runs fn with read access to the state. fn must not retain the state
// nor call mutating methods.
func (r *Replica) View(fn func(*crdt.State)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn(r.state)
}

// Subscribe registers fn to receive every non-empty set of changes after it
// is committed, in commit order, from one goroutine.
func (r *Replica) Subscribe(fn func([]crdt.Change)) {
	r.subsMu.Lock()
	r.subs = append(r.subs, fn)
	r.subsMu.Unlock()
}

func (r *Replica) deliver(changes []crdt.Change) {
	r.subsMu.Lock()
	subs := slices.Clone(r.subs)
	r.subsMu.Unlock()
	for _, fn := range subs {
		fn(changes)
	}
}

// Barrier calls fn on the change-feed goroutine once every change set of
// the mutations made before the call has been delivered to the
// subscribers (it rides an empty batch through the commit queue, which
// commits in order). A decision taken on the replica's state (its digest)
// can so wait until what the subscribers built from it has caught up.
func (r *Replica) Barrier(fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// the result channel is buffered; a failed commit never runs fn (the
	// store then refuses writes and the daemon stops)
	_ = r.backend.Commit(&Batch{OnCommit: func() { r.notify.enqueue(notice{fn: fn}) }})
}

// Close flushes pending commits, delivers pending notifications and closes
// the backend.
func (r *Replica) Close() error {
	err := r.backend.Close()
	r.notify.close()
	return err
}

// notifier delivers change sets in order on one goroutine through an
// unbounded queue, so the committer never blocks on a slow subscriber.
type notifier struct {
	mu     sync.Mutex
	cond   *sync.Cond
	q      []notice
	closed bool
	done   chan struct{}
}

// notice is one item of the change feed: a change set, or a barrier's
// function (Replica.Barrier).
type notice struct {
	changes []crdt.Change
	fn      func()
}

func newNotifier(deliver func([]crdt.Change)) *notifier {
	n := &notifier{done: make(chan struct{})}
	n.cond = sync.NewCond(&n.mu)
	go func() {
		defer close(n.done)
		for {
			n.mu.Lock()
			for len(n.q) == 0 && !n.closed {
				n.cond.Wait()
			}
			if len(n.q) == 0 {
				n.mu.Unlock()
				return
			}
			next := n.q[0]
			n.q[0] = notice{}
			n.q = n.q[1:]
			n.mu.Unlock()
			if next.fn != nil {
				next.fn()
			} else {
				deliver(next.changes)
			}
		}
	}()
	return n
}

func (n *notifier) push(changes []crdt.Change) { n.enqueue(notice{changes: changes}) }

func (n *notifier) enqueue(it notice) {
	n.mu.Lock()
	n.q = append(n.q, it)
	n.mu.Unlock()
	n.cond.Signal()
}

func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.mu.Unlock()
	n.cond.Broadcast()
	<-n.done
}

// SetSigner makes this replica sign its own origin's writes, GC watermarks
// and retirements (crdt.State.SetSigner).
func (r *Replica) SetSigner(sg crdt.Signer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state.SetSigner(sg)
}

// SetVerifier makes Apply and ApplyRetire refuse what the origin did not
// sign (crdt.State.SetVerifier).
func (r *Replica) SetVerifier(v crdt.Verifier, authority crdt.RetireAuthority) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v == nil {
		r.pv = nil
		r.state.SetVerifier(nil, authority)
		return
	}
	r.pv = newPreVerifier(v, r.opts.VerifyWorkers)
	r.state.SetVerifier(r.pv, authority)
}

// SignRetire signs a retirement of this replica's own origin.
func (r *Replica) SignRetire(rt crdt.Retire) crdt.Retire {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.SignRetire(rt)
}

// SetLimits bounds what peers can make this replica hold (crdt.Limits).
func (r *Replica) SetLimits(l crdt.Limits) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state.SetLimits(l)
}

// Failed returns the commit error that made the replica refuse writes, or
// nil.
func (r *Replica) Failed() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.failed
}
