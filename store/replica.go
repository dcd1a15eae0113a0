package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Replica is the daemon's single copy of the replicated state: a
// crdt.State guarded by a mutex, mirrored durably in a Store, with a change
// feed.
//
// Durability contract: Write, Apply, ApplyRetire, CollectGarbage and
// SetMinEpoch return only after the bbolt transaction holding their effect
// (entries together with the digests covering them) has been committed and
// fsynced. Concurrent callers are group-committed into one transaction.
// Subscribers are called after the commit, in commit order, on a dedicated
// goroutine outside every lock (a subscriber may call back into the
// Replica).
//
// Between the in-memory mutation and the fsync, readers (Digest,
// DeltaSince, View) may already see the new state. That is safe: data from
// peers is re-pulled if lost, and the writer's own versions are fenced by
// the epoch bump on every open, so a version seen by a peer but lost in a
// crash is never reused. If a commit fails, the Replica refuses every
// further mutation (the in-memory state is then ahead of the file); the
// daemon must restart, reload the file and resync.
type Replica struct {
	mu    sync.RWMutex
	state *crdt.State
	store *Store
	self  string
	opts  Options

	subsMu sync.Mutex
	subs   []func([]crdt.Change)
	notify *notifier

	info  OpenInfo
	reset []string

	// pv pre-verifies large batches' signatures in parallel (preverify.go);
	// nil without a verifier.
	pv *preVerifier
}

// OpenReplica opens (or creates) the store at path, loads it into a fresh
// crdt.State for cluster self ("" = observer, never writes), and, for a
// writer, persists a new epoch before returning:
// max(persisted epoch + 1, state.MinEpoch()).
//
// A corrupt file - detected at open, while loading, or because the loaded
// entries do not restore - is moved aside and the replica starts empty.
func OpenReplica(path, self string, opts Options) (*Replica, error) {
	opts.defaults()
	s, err := open(path, opts, true)
	if err != nil {
		return nil, err
	}
	r, err := newReplica(s, self, opts)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return r, nil
}

func newReplica(s *Store, self string, opts Options) (*Replica, error) {
	var (
		st        *crdt.State
		writer    WriterMeta
		reset     []string
		resetDigs = crdt.Digest{}
	)
	start := time.Now()
	entries := 0
	// Restore inside the read transaction: values alias the mmap and
	// Restore copies what it keeps, so nothing is copied twice.
	err := s.load(false, func(snap *Snapshot) error {
		if snap.Self != "" && snap.Self != self {
			return fmt.Errorf("store: %s belongs to cluster %q, not %q; refusing to mix identities (move the file away to start over)",
				s.path, snap.Self, self)
		}
		st = crdt.NewState(self)
		if err := st.Restore(snap.Digest, snap.Entries); err != nil {
			return fmt.Errorf("%w: restore: %v", ErrCorrupt, err)
		}
		st.RestoreProofs(snap.Proofs)
		writer, reset, entries = snap.Writer, snap.Reset, len(snap.Entries)
		for _, o := range reset {
			resetDigs[o] = snap.Digest[o]
		}
		return nil
	})
	// The page check (if any) ran concurrently with the load; its verdict
	// decides whether the loaded state may be used.
	if cerr := s.finishOpen(); cerr != nil && (err == nil || errors.Is(err, ErrCorrupt)) {
		err = cerr
	}
	if errors.Is(err, ErrCorrupt) {
		if rerr := s.recoverCorrupt(err); rerr != nil {
			return nil, rerr
		}
		err, st, reset, writer, resetDigs = nil, crdt.NewState(self), nil, WriterMeta{}, crdt.Digest{}
	}
	if err != nil {
		return nil, err
	}
	took := time.Since(start)
	s.m.loadSeconds.Set(took.Seconds())
	info := s.Info()
	s.log.Info("store loaded", "entries", entries, "duration", took, "self", self,
		"unclean_shutdown", info.Unclean, "page_check", info.Checked, "reset_origins", reset)
	r := &Replica{state: st, store: s, self: self, opts: opts, info: info, reset: reset}
	r.notify = newNotifier(r.deliver)
	req := &commitReq{self: &self, digests: resetDigs}
	if self != "" {
		epoch := writer.Epoch + 1
		if m := st.MinEpoch(); m > epoch {
			epoch = m
		}
		if writer.Epoch >= crdt.MaxEpoch || epoch > crdt.MaxEpoch {
			r.notify.close()
			return nil, fmt.Errorf("store: writer epoch exhausted (persisted %d)", writer.Epoch)
		}
		if err := st.SetEpoch(epoch); err != nil {
			r.notify.close()
			return nil, fmt.Errorf("store: set epoch: %w", err)
		}
		req.writer = r.writerMeta()
	}
	// Persist the new epoch (and any reset digests) before the first write.
	if err := r.commit(req); err != nil {
		r.notify.close()
		return nil, err
	}
	return r, nil
}

// Info reports what opening the file found (fresh file, moved-aside file).
func (r *Replica) Info() OpenInfo { return r.info }

// ResetOrigins lists origins whose persisted digest disagreed with their
// entries at load; they were marked for re-pull (Max lowered to 0).
func (r *Replica) ResetOrigins() []string { return append([]string(nil), r.reset...) }

// Store exposes the underlying store for index queries.
func (r *Replica) Store() *Store { return r.store }

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

// must hold r.mu (write). Returns the request for the caller to wait on.
// With before non-nil, digests equal to before are not rewritten, and a
// request with nothing to write is not enqueued at all (nil, nil): gossip
// re-delivers known deltas constantly and each commit costs an fsync.
func (r *Replica) enqueue(changes []crdt.Change, origins map[string]struct{}, writer bool, before crdt.Digest) (*commitReq, error) {
	d := r.state.Digest()
	digests := make(crdt.Digest, len(origins))
	for o := range origins {
		if od, ok := d[o]; ok {
			if prev, seen := before[o]; before != nil && seen && prev == od {
				continue
			}
			digests[o] = od
		}
	}
	if before != nil && len(changes) == 0 && len(digests) == 0 {
		return nil, nil
	}
	var proofs map[string]crdt.Proof
	for o := range digests {
		if p := r.state.Proof(o); p.Head != 0 || p.HeadSig != nil || p.GCSig != nil || p.RetiredSig != nil {
			if proofs == nil {
				proofs = map[string]crdt.Proof{}
			}
			proofs[o] = p
		}
	}
	req := &commitReq{changes: changes, digests: digests, proofs: proofs}
	if writer {
		req.writer = r.writerMeta()
	}
	if len(changes) > 0 {
		req.onCommit = func() { r.notify.push(changes) }
	}
	return req, r.store.enqueue(req)
}

func (r *Replica) commit(req *commitReq) error {
	if err := r.store.enqueue(req); err != nil {
		return err
	}
	return <-req.done
}

// Write records a local change of this cluster's own entry and returns the
// delta to gossip, after it is durable.
func (r *Replica) Write(kind crdt.Kind, name string, value []byte, deleted bool) (crdt.Delta, error) {
	if r.self == "" {
		return crdt.Delta{}, errors.New("store: observer replica cannot write")
	}
	r.mu.Lock()
	delta, changes, err := r.state.Write(kind, name, value, deleted, r.opts.Now().UnixNano())
	if err != nil {
		r.mu.Unlock()
		return crdt.Delta{}, err
	}
	req, err := r.enqueue(changes, map[string]struct{}{r.self: {}}, true, nil)
	r.mu.Unlock()
	if err != nil {
		return crdt.Delta{}, err
	}
	if err := <-req.done; err != nil {
		return crdt.Delta{}, err
	}
	return delta, nil
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
		return nil, errors.New("store: observer replica cannot write")
	}
	r.mu.Lock()
	stamp := r.opts.Now().UnixNano()
	deltas := make([]crdt.Delta, 0, len(ops))
	var changes []crdt.Change
	var werr error
	for _, op := range ops {
		d, ch, err := r.state.Write(op.Kind, op.Name, op.Value, op.Deleted, stamp)
		if err != nil {
			werr = fmt.Errorf("store: write %s %q: %w", op.Kind, op.Name, err)
			break
		}
		deltas = append(deltas, d)
		changes = append(changes, ch...)
	}
	if len(deltas) == 0 {
		r.mu.Unlock()
		return nil, werr
	}
	req, err := r.enqueue(changes, map[string]struct{}{r.self: {}}, true, nil)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := <-req.done; err != nil {
		return nil, err
	}
	return deltas, werr
}

// CollectGarbage advances this cluster's tombstone GC watermark (dropping
// its own tombstones up to upTo) and returns the delta announcing it.
func (r *Replica) CollectGarbage(upTo crdt.Version) (crdt.Delta, []crdt.Change, error) {
	if r.self == "" {
		return crdt.Delta{}, nil, errors.New("store: observer replica cannot collect garbage")
	}
	r.mu.Lock()
	delta, changes := r.state.CollectGarbage(upTo)
	req, err := r.enqueue(changes, map[string]struct{}{r.self: {}}, true, nil)
	r.mu.Unlock()
	if err != nil {
		return crdt.Delta{}, nil, err
	}
	if err := <-req.done; err != nil {
		return crdt.Delta{}, nil, err
	}
	return delta, changes, nil
}

// Apply merges deltas from peers and returns their effects after they are
// durable. Deltas are applied in order; on the first invalid delta Apply
// stops, persists what was applied, and returns those changes with the
// error.
func (r *Replica) Apply(deltas ...crdt.Delta) ([]crdt.Change, error) {
	r.mu.Lock()
	before := r.state.Digest()
	var all []crdt.Change
	var applyErr error
	origins := map[string]struct{}{}
	var prepared []bool
	if r.pv != nil && r.pv.workers > 1 && entryCount(deltas) >= preVerifyMin {
		prepared = make([]bool, len(deltas))
	}
	for i, d := range deltas {
		if prepared != nil && !prepared[i] {
			// origins pinned by the deltas before (trust on first use)
			// become eligible here
			r.pv.prepare(deltas[i:], prepared[i:], r.state.Digest())
		}
		ch, err := r.state.Apply(d)
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
	req, err := r.enqueue(all, origins, r.self != "" && hasOrigin(origins, r.self), before)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if req != nil {
		if err := <-req.done; err != nil {
			return nil, err
		}
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
	r.mu.Lock()
	before := r.state.Digest()
	changes, aerr := r.state.ApplyRetire(rt)
	if aerr != nil && len(changes) == 0 {
		r.mu.Unlock()
		return nil, aerr
	}
	req, err := r.enqueue(changes, map[string]struct{}{rt.Origin: {}}, rt.Origin == r.self && r.self != "", before)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if req != nil {
		if err := <-req.done; err != nil {
			return nil, err
		}
	}
	return changes, aerr
}

// RetireRecord returns the record that retires origin at its current Max.
func (r *Replica) RetireRecord(origin string) crdt.Retire {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.RetireRecord(origin)
}

// SetMinEpoch raises the writer epoch to at least epoch (the daemon feeds
// the Lease's leaseTransitions here) and persists it before returning. It
// never lowers the epoch.
func (r *Replica) SetMinEpoch(epoch uint32) error {
	if r.self == "" {
		return errors.New("store: observer replica has no writer epoch")
	}
	r.mu.Lock()
	if epoch <= r.state.Epoch() {
		r.mu.Unlock()
		return nil
	}
	if err := r.state.SetEpoch(epoch); err != nil {
		r.mu.Unlock()
		return err
	}
	req := &commitReq{writer: r.writerMeta()}
	err := r.store.enqueue(req)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return <-req.done
}

// BumpEpoch moves the writer to a fresh epoch, max(MinEpoch, Epoch+1),
// persisted before returning. Call it when Write fails with
// crdt.ErrNeedsEpochBump (our own origin was retired, or a later version
// of it was seen), then re-publish every live object.
func (r *Replica) BumpEpoch() (uint32, error) {
	if r.self == "" {
		return 0, errors.New("store: observer replica has no writer epoch")
	}
	r.mu.Lock()
	epoch := r.state.Epoch() + 1
	if m := r.state.MinEpoch(); m > epoch {
		epoch = m
	}
	if err := r.state.SetEpoch(epoch); err != nil {
		r.mu.Unlock()
		return 0, err
	}
	req := &commitReq{writer: r.writerMeta()}
	err := r.store.enqueue(req)
	r.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return epoch, <-req.done
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

// Close flushes pending commits, delivers pending notifications and closes
// the file.
func (r *Replica) Close() error {
	err := r.store.Close()
	r.notify.close()
	return err
}

// notifier delivers change sets in order on one goroutine through an
// unbounded queue, so the committer never blocks on a slow subscriber.
type notifier struct {
	mu     sync.Mutex
	cond   *sync.Cond
	q      [][]crdt.Change
	closed bool
	done   chan struct{}
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
			n.q[0] = nil
			n.q = n.q[1:]
			n.mu.Unlock()
			deliver(next)
		}
	}()
	return n
}

func (n *notifier) push(changes []crdt.Change) {
	n.mu.Lock()
	n.q = append(n.q, changes)
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

// Failed returns the commit error that made the store refuse writes, or nil.
func (r *Replica) Failed() error { return r.store.Failed() }
