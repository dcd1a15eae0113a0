// Package store mirrors coastguard's replicated CRDT state (package crdt) in
// a local bbolt file, so a restarting daemon has its full picture - and can
// enforce correctly - before any peer answers.
//
// Layout, key encoding and crash-safety rules are described in
// docs/ARCHITECTURE.md, section "Store".
package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// SchemaVersion is the layout version this build writes. Files with a larger
// version are refused; files with a smaller one would be migrated (there is
// no older layout yet).
const SchemaVersion uint32 = 1

// ErrCorrupt wraps every error that means the file content cannot be trusted.
var ErrCorrupt = errors.New("store: file is corrupt")

// ErrClosed is returned by operations on a closed store.
var ErrClosed = errors.New("store: closed")

// SchemaError is returned when the file was written by a newer coastguard.
type SchemaError struct {
	Path      string
	Found     uint32
	Supported uint32
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("store: %s has schema version %d but this coastguard supports at most %d; "+
		"refusing to open it (run a newer coastguard, or move the file away to resync from peers)",
		e.Path, e.Found, e.Supported)
}

// Options tune a Store. The zero value is usable.
type Options struct {
	// Registerer receives the store's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// LockTimeout bounds the wait for the file lock held by another process
	// (default 5s). A locked file is an error, never "corrupt".
	LockTimeout time.Duration
	// Check selects when bbolt's full page check (tx.Check, which reads
	// every page of the file) runs at open. Default: after an unclean
	// shutdown only.
	Check CheckMode
	// MaxBatch caps the write requests coalesced into one transaction
	// (default 1024).
	MaxBatch int
	// QueueSize bounds the commit queue (default 256); writers block when it
	// is full.
	QueueSize int
	// NoPrefetch disables the sequential read of an existing file into the
	// page cache before it is opened.
	NoPrefetch bool
	// Now is the clock used for moved-aside file names and write stamps
	// (default time.Now).
	Now func() time.Time
	// OnCommitError, when set, is called once with the first failed
	// commit: from then on the store (or replica) refuses every write until
	// it is reopened. A Store calls it from the committer goroutine, a
	// Replica (any backend) from the caller that hit the failure. The
	// daemon makes it loud (readiness, Lease, exit).
	OnCommitError func(error)
	// VerifyWorkers is the number of goroutines that pre-verify the
	// signatures of a large incoming batch (Replica.Apply, preverify.go);
	// 0 means GOMAXPROCS when it is at least 4, else 1; 1 verifies
	// serially in the crdt only.
	VerifyWorkers int
	// OnLoad, when set, is called by NewReplica (and OpenReplica) with
	// every entry being restored, on a goroutine of its own, while
	// crdt.Restore runs on the caller's: the daemon builds its enforce
	// view on the second core instead of after the open (docs/PERFORMANCE.md,
	// cold start). The entries are sorted by origin, then kind, then name,
	// must not be modified, and (with their values) are valid only until
	// OnLoad returns. The replica waits for OnLoad before it returns. If
	// the stored data turns out corrupt, OnLoad is called again with the
	// empty state the replica starts from: each call replaces what the
	// previous one saw, and the last call is the replica's state. A memory
	// fault while OnLoad reads the file counts as a corrupt file.
	OnLoad func(entries []crdt.Entry)
}

// CommitError is a failed local commit (disk full, I/O error, file size
// limit). It is this replica's fault, never a peer's: callers can tell it
// from invalid input with IsLocalFailure or errors.As.
type CommitError struct{ Err error }

func (e *CommitError) Error() string {
	return "store: commit failed, refusing further writes until restart: " + e.Err.Error()
}

func (e *CommitError) Unwrap() error { return e.Err }

// LocalStoreFailure marks the error as a local storage failure (see
// gossip, which must not count it as a peer's invalid delta).
func (e *CommitError) LocalStoreFailure() bool { return true }

// Failed returns the commit error that made the store refuse writes, or nil.
func (s *Store) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 5 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1024
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// CheckMode selects when the full page check runs at open.
type CheckMode int

const (
	// CheckAfterUncleanShutdown runs the full check unless the file was
	// closed cleanly (Close writes a clean-shutdown mark, Open clears it).
	CheckAfterUncleanShutdown CheckMode = iota
	// CheckAlways runs it at every open.
	CheckAlways
	// CheckNever never runs it (the cheap checks still run).
	CheckNever
)

// OpenInfo reports what Open found.
type OpenInfo struct {
	// Created is true when a fresh file was created (missing, or the old one
	// was moved aside).
	Created bool
	// MovedAside is the path the corrupt file was renamed to, if any.
	MovedAside string
	// Corrupt is the reason the old file was rejected, if any.
	Corrupt error
	// Checked is true when the full page check ran on the existing file.
	Checked bool
	// Unclean is true when the existing file was not closed cleanly.
	Unclean bool
}

// WriterMeta is this cluster's writer state.
type WriterMeta struct {
	Epoch       uint32
	LastVersion crdt.Version
}

// Store is an open bbolt mirror. Reads may run concurrently; writes go
// through a single group-commit goroutine.
type Store struct {
	db   *bolt.DB
	path string
	opts Options
	log  *slog.Logger
	m    *metrics
	info OpenInfo

	mu     sync.Mutex // guards closed, failed, queue sends vs close
	closed bool
	failed error
	queue  chan *commitReq
	done   chan struct{}

	// corruptSeen is set when a read hit damaged content; Close then omits
	// the clean-shutdown mark so the next open runs the full page check.
	corruptSeen atomic.Bool

	// pending delivers the result of a deferred page check (OpenReplica).
	pending <-chan error

	countMu sync.Mutex
	counts  map[string]int // entries per origin, for the gauge
}

// Open opens or creates the store at path. A corrupt or truncated file is
// moved aside to <path>.corrupt-<timestamp> (never deleted), reported in
// Info(), the log and a metric, and a fresh store is created so the daemon
// resyncs from its peers. A file from a newer schema is refused with a
// *SchemaError.
func Open(path string, opts Options) (*Store, error) {
	return open(path, opts, false)
}

// open is Open; with deferCheck a needed page check runs in the background
// and finishOpen must be called before the first write (OpenReplica loads
// the state meanwhile, using both cores).
func open(path string, opts Options, deferCheck bool) (*Store, error) {
	opts.defaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &Store{
		path:   path,
		opts:   opts,
		log:    opts.Logger.With("component", "store", "path", path),
		m:      m,
		counts: map[string]int{},
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	db, pending, created, corrupt, err := tryOpen(path, &opts, &s.info, deferCheck)
	if err != nil {
		return nil, err
	}
	if corrupt != nil {
		if err := s.moveAside(corrupt); err != nil {
			return nil, err
		}
		db, pending, created, corrupt, err = tryOpen(path, &opts, &s.info, false)
		if err != nil {
			return nil, err
		}
		if corrupt != nil {
			return nil, fmt.Errorf("store: fresh file %s is unusable: %w", path, corrupt)
		}
	}
	s.db = db
	s.pending = pending
	s.info.Created = s.info.Created || created
	s.start()
	return s, nil
}

// finishOpen waits for a deferred page check. On success it clears the
// clean-shutdown mark; a failed check returns an ErrCorrupt error (the
// caller then calls recoverCorrupt). Without a pending check it is a no-op.
func (s *Store) finishOpen() error {
	if s.pending == nil {
		return nil
	}
	cerr := <-s.pending
	s.pending = nil
	if cerr != nil {
		return cerr
	}
	return s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(metaClean) })
}

// moveAside renames the current file to <path>.corrupt-<timestamp>.
func (s *Store) moveAside(cause error) error {
	ts := s.opts.Now().UTC().Format("20060102T150405.000000000Z")
	dst := s.path + ".corrupt-" + ts
	if err := os.Rename(s.path, dst); err != nil {
		return fmt.Errorf("store: cannot move corrupt file aside (%v): %w", cause, err)
	}
	s.info.MovedAside = dst
	s.info.Corrupt = cause
	s.info.Created = true
	s.m.corruptFiles.Inc()
	s.log.Error("store file is corrupt; moved it aside and starting empty - state will be resynced from peers",
		"moved_to", dst, "err", cause)
	return nil
}

// tryOpen opens path and verifies it. corrupt != nil means the file must be
// moved aside; err != nil is a hard error (locked, permission, newer schema).
//
// With deferCheck, a needed page check runs in the background: the result
// arrives on pending and the caller must call finishOpen before writing.
func tryOpen(path string, opts *Options, info *OpenInfo, deferCheck bool) (db *bolt.DB, pending <-chan error, created bool, corrupt, err error) {
	// A truncated mmap'd file faults (SIGBUS) instead of returning an error;
	// turn faults into recoverable panics on this goroutine.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				closeQuietly(db)
			}
			db, err, pending = nil, nil, nil
			corrupt = fmt.Errorf("%w: panic while opening: %v", ErrCorrupt, r)
		}
	}()
	var size int64
	if size, created, corrupt, err = statFile(path); corrupt != nil || err != nil {
		return nil, nil, false, corrupt, err
	}
	if !created && !opts.NoPrefetch {
		prefetch(path)
	}
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout})
	if err != nil {
		corrupt, err = classifyOpenError(path, err)
		return nil, nil, false, corrupt, err
	}
	if created {
		if err := initBuckets(db); err != nil {
			closeQuietly(db)
			return nil, nil, false, nil, fmt.Errorf("store: initialise %s: %w", path, err)
		}
		return db, nil, true, nil, nil
	}
	needCheck, corrupt, err := verify(db, path, size, opts.Check, info)
	if corrupt == nil && err == nil && needCheck {
		if deferCheck {
			ch := make(chan error, 1)
			go func() { ch <- pageCheck(db) }()
			return db, ch, false, nil, nil
		}
		corrupt = pageCheck(db)
	}
	if corrupt != nil || err != nil {
		closeQuietly(db)
		return nil, nil, false, corrupt, err
	}
	if err := clearCleanMark(db); err != nil {
		closeQuietly(db)
		return nil, nil, false, nil, fmt.Errorf("store: %s: %w", path, err)
	}
	return db, nil, false, nil, nil
}

// statFile classifies path before it is opened: missing (to be created),
// unusable (err: not a regular file, not readable) or empty (corrupt).
func statFile(path string) (size int64, missing bool, corrupt, err error) {
	fi, statErr := os.Stat(path)
	switch {
	case errors.Is(statErr, fs.ErrNotExist):
		return 0, true, nil, nil
	case statErr != nil:
		return 0, false, nil, fmt.Errorf("store: %w", statErr)
	case !fi.Mode().IsRegular():
		return 0, false, nil, fmt.Errorf("store: %s is not a regular file", path)
	case fi.Size() == 0:
		return 0, false, fmt.Errorf("%w: empty file", ErrCorrupt), nil
	}
	return fi.Size(), false, nil, nil
}

// classifyOpenError tells a bbolt open failure that is the file's content
// (corrupt: move it aside) from one that is not (err: locked, permission).
func classifyOpenError(path string, openErr error) (corrupt, err error) {
	switch {
	case errors.Is(openErr, berrors.ErrTimeout):
		return nil, fmt.Errorf("store: %s is locked by another process: %w", path, openErr)
	case errors.Is(openErr, fs.ErrPermission):
		return nil, fmt.Errorf("store: %w", openErr)
	}
	return fmt.Errorf("%w: %v", ErrCorrupt, openErr), nil
}

// prefetch reads the file sequentially once so the page cache holds it
// before the page check and the load walk the B+trees: on a cold cache,
// random page faults made a 1M-entry open ~4x slower than one sequential
// read (measured 11.6 s vs 1.9 s + 2.2 s). Errors are ignored: a file
// that cannot be read fails properly in bbolt a moment later.
func prefetch(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	buf := make([]byte, 4<<20)
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
	}
}

// clearCleanMark deletes the clean-shutdown mark: from now on a crash
// leaves it absent.
func clearCleanMark(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(metaClean) })
}

func closeQuietly(db *bolt.DB) {
	defer func() { _ = recover() }()
	_ = db.Close()
}

func initBuckets(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		for _, name := range append(allBuckets, legacyBuckets...) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u32(SchemaVersion))
	})
}

// verify checks an existing file: size against the high-water mark, schema,
// buckets, and (unless skipped) bbolt's page check.
func verify(db *bolt.DB, path string, size int64, mode CheckMode, info *OpenInfo) (needCheck bool, corrupt, err error) {
	err = db.View(func(tx *bolt.Tx) error {
		if need := tx.Size(); size < need {
			corrupt = fmt.Errorf("%w: truncated: file has %d bytes, its metadata needs %d", ErrCorrupt, size, need)
			return nil
		}
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			corrupt = fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketMeta)
			return nil
		}
		sv := meta.Get(metaSchema)
		if len(sv) != 4 {
			corrupt = fmt.Errorf("%w: malformed schema version", ErrCorrupt)
			return nil
		}
		if v := beU32(sv); v > SchemaVersion {
			return &SchemaError{Path: path, Found: v, Supported: SchemaVersion}
		} else if v == 0 {
			corrupt = fmt.Errorf("%w: schema version 0", ErrCorrupt)
			return nil
		}
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				corrupt = fmt.Errorf("%w: bucket %q missing", ErrCorrupt, name)
				return nil
			}
		}
		info.Unclean = !bytes.Equal(meta.Get(metaClean), []byte{1})
		if mode == CheckAlways || (mode == CheckAfterUncleanShutdown && info.Unclean) {
			info.Checked = true
			needCheck = true
		}
		return nil
	})
	return needCheck, corrupt, err
}

// pageCheck runs bbolt's full page check in a read transaction.
func pageCheck(db *bolt.DB) error {
	var errs []error
	err := db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			if len(errs) < 8 {
				errs = append(errs, e)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: page check: %v", ErrCorrupt, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: page check: %w", ErrCorrupt, errors.Join(errs...))
	}
	return nil
}

// recoverCorrupt is used when corruption is found after Open (while
// loading): it stops the committer, moves the file aside and starts over
// with a fresh file. Only valid before the store is shared.
func (s *Store) recoverCorrupt(cause error) error {
	if s.pending != nil {
		// The file is moved aside anyway; wait for the check so it stops
		// reading the file, and log its verdict (if any) with the cause.
		cause = errors.Join(cause, <-s.pending)
		s.pending = nil
	}
	s.mu.Lock()
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	closeQuietly(s.db)
	if err := s.moveAside(cause); err != nil {
		return err
	}
	db, _, _, corrupt, err := tryOpen(s.path, &s.opts, &s.info, false)
	if err != nil {
		return err
	}
	if corrupt != nil {
		return fmt.Errorf("store: fresh file %s is unusable: %w", s.path, corrupt)
	}
	s.db = db
	s.countMu.Lock()
	clear(s.counts)
	s.m.entriesPerOrigin.Reset()
	s.countMu.Unlock()
	s.start()
	return nil
}

// Info reports what Open found (fresh file, moved-aside corrupt file).
func (s *Store) Info() OpenInfo { return s.info }

// Path returns the file path.
func (s *Store) Path() string { return s.path }

// Close drains the commit queue and closes the file.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	failed := s.failed
	s.mu.Unlock()
	<-s.done
	if s.pending != nil {
		// A check nobody consumed: whatever its verdict, the file was not
		// confirmed sound while open; leave it unmarked so the next open
		// checks again.
		failed = errors.Join(errors.New("page check did not complete"), <-s.pending)
		s.pending = nil
	}
	var markErr error
	if failed == nil && !s.corruptSeen.Load() {
		markErr = s.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaClean, []byte{1}) })
	}
	return errors.Join(markErr, s.db.Close())
}

// ---------------------------------------------------------------- load

// Snapshot is everything persisted, as loaded at start.
type Snapshot struct {
	Self    string
	Writer  WriterMeta
	Digest  crdt.Digest
	Entries []crdt.Entry
	// Proofs are the origins' signed watermarks (crdt.Proof).
	Proofs map[string]crdt.Proof
	// Reset lists origins whose persisted digest did not match their
	// entries; their Max was lowered to 0 so they are re-pulled from peers.
	Reset []string
}

// Load reads the whole store into memory. Entry values are copied out of
// the mmap into a few large slabs (no per-entry value allocation).
// Malformed records yield an error wrapping ErrCorrupt.
func (s *Store) Load() (*Snapshot, error) {
	var out *Snapshot
	err := s.load(true, func(snap *Snapshot) error { out = snap; return nil })
	return out, err
}

// load reads the store in one read transaction and calls fn inside it.
// With copyValues false, entry values alias the mmap and are valid only
// until fn returns (crdt.State.Restore copies what it keeps).
func (s *Store) load(copyValues bool, fn func(*Snapshot) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: panic while loading: %v", ErrCorrupt, r)
		}
	}()
	snap := &Snapshot{Digest: crdt.Digest{}}
	return s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		snap.Self = string(meta.Get(metaSelf))
		if b := meta.Get(metaEpoch); len(b) == 4 {
			snap.Writer.Epoch = beU32(b)
		}
		if b := meta.Get(metaLastVersion); len(b) == 8 {
			snap.Writer.LastVersion = crdt.Version(beU64(b))
		}
		if err := loadDigests(tx, snap); err != nil {
			return err
		}
		hint := 0
		if b := meta.Get(metaEntryCount); len(b) == 8 {
			hint = int(min(beU64(b), 1<<26))
		}
		entries, err := loadEntries(tx.Bucket(bucketEntries), copyValues, hint)
		if err != nil {
			return err
		}
		snap.Entries = entries
		snap.Reset = reconcileDigests(snap.Digest, entries)
		for _, o := range snap.Reset {
			s.m.resetOrigins.Inc()
			s.log.Warn("persisted digest disagrees with stored entries; origin will be re-pulled from peers", "origin", o)
		}
		s.setCounts(entries)
		return fn(snap)
	})
}

// loadDigests reads every origin's digest and proof into snap.
func loadDigests(tx *bolt.Tx, snap *Snapshot) error {
	if err := loadByOrigin(tx.Bucket(bucketOrigins), "origin", "origin %q", decodeDigest, snap.Digest); err != nil {
		return err
	}
	snap.Proofs = map[string]crdt.Proof{}
	return loadByOrigin(tx.Bucket(bucketProofs), "proof", "proof of %q", decodeProof, snap.Proofs)
}

// loadByOrigin decodes every record of a bucket keyed by origin (nil: none)
// into into; what names its keys and recFmt (with the origin) a record in
// errors.
func loadByOrigin[T any](b *bolt.Bucket, what, recFmt string, decode func([]byte) (T, error), into map[string]T) error {
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		c, err := decodeKey(k, 1)
		if err != nil {
			return fmt.Errorf("%w: %s key %x: %v", ErrCorrupt, what, k, err)
		}
		rec, err := decode(v)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, fmt.Sprintf(recFmt, c[0]), err)
		}
		into[c[0]] = rec
		return nil
	})
}

// setCounts replaces the per-origin entry counts (and their gauge) with
// those of the loaded entries.
func (s *Store) setCounts(entries []crdt.Entry) {
	counts := map[string]int{}
	for i := range entries {
		counts[entries[i].Origin]++
	}
	s.countMu.Lock()
	s.counts = counts
	s.m.entriesPerOrigin.Reset()
	for o, n := range counts {
		s.m.entriesPerOrigin.WithLabelValues(o).Set(float64(n))
	}
	s.countMu.Unlock()
}

const slabSize = 4 << 20

// slabCopy copies b into the free tail of slab (a fresh 4 MiB slab when it
// does not fit) and returns the copy, capacity-capped so appends cannot
// spill into a neighbour, and the remaining tail. One allocation per slab
// instead of one per value.
func slabCopy(slab, b []byte) (cp, rest []byte) {
	n := len(b)
	if n > len(slab) {
		slab = make([]byte, max(slabSize, n))
	}
	copy(slab, b)
	return slab[:n:n], slab[n:]
}

// slabString is slabCopy for names: the bytes are never written again, so
// they can back a string without another copy.
func slabString(slab, b []byte) (string, []byte) {
	if len(b) == 0 {
		return "", slab
	}
	cp, rest := slabCopy(slab, b)
	return unsafe.String(&cp[0], len(cp)), rest
}

// loadEntries decodes every entry; hint (the persisted entry count) sizes
// the slice up front.
func loadEntries(b *bolt.Bucket, copyValues bool, hint int) ([]crdt.Entry, error) {
	entries := make([]crdt.Entry, 0, max(hint, 1024))
	var slab, names []byte
	var lastOrigin string
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var e crdt.Entry
		origin, rest, err := nextComponent(k)
		if err == nil {
			var kind, name []byte
			if kind, rest, err = nextComponent(rest); err == nil {
				if name, rest, err = nextComponent(rest); err == nil && (len(rest) != 0 || len(kind) != 1) {
					err = errBadKey
				}
				if err == nil {
					// Entries are sorted by origin: reuse the origin string.
					if string(origin) != lastOrigin {
						lastOrigin = string(origin)
					}
					e.Origin = lastOrigin
					e.Kind = crdt.Kind(kind[0])
					e.Name, names = slabString(names, name)
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: entry key %x: %v", ErrCorrupt, k, err)
		}
		if err := decodeRecord(k, v, &e); err != nil {
			return nil, fmt.Errorf("%w: entry %s: %v", ErrCorrupt, e.Key, err)
		}
		if e.Sig != nil && copyValues {
			e.Sig, slab = slabCopy(slab, e.Sig)
		}
		if n := len(e.Value); n > 0 && copyValues {
			e.Value, slab = slabCopy(slab, e.Value)
		} else if n == 0 {
			e.Value = nil
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// ---------------------------------------------------------------- writes

// commitReq is one unit of the group committer: a Batch, persisted
// atomically (possibly together with other requests) in one bbolt
// transaction, and the channel its result goes to.
type commitReq struct {
	Batch
	done chan error
}

func (s *Store) start() {
	s.queue = make(chan *commitReq, s.opts.QueueSize)
	s.done = make(chan struct{})
	go s.committer()
}

// submit hands b to the committer and returns the channel its result
// arrives on. Batches commit in submit order; b.OnCommit runs on the
// committer goroutine after a successful commit, in commit order, before
// the result is sent.
func (s *Store) submit(b *Batch) <-chan error {
	req := &commitReq{Batch: *b, done: make(chan error, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		req.done <- ErrClosed
	case s.failed != nil:
		req.done <- s.failed
	default:
		s.queue <- req
	}
	return req.done
}

// Commit persists changes, the digests of the origins they touch, and
// optionally the writer metadata, atomically, and returns after the
// transaction is fsynced. Concurrent Commit calls are coalesced into one
// transaction (group commit).
func (s *Store) Commit(changes []crdt.Change, digests crdt.Digest, writer *WriterMeta) error {
	return <-s.submit(&Batch{Changes: changes, Digests: digests, Writer: writer})
}

// SetSelf records the local cluster ID the file belongs to.
func (s *Store) SetSelf(self string) error {
	return <-s.submit(&Batch{Self: &self})
}

func (s *Store) committer() {
	defer close(s.done)
	batch := make([]*commitReq, 0, s.opts.MaxBatch)
	for req := range s.queue {
		batch = append(batch[:0], req)
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.commitBatch(batch)
		clear(batch)
	}
}

func (s *Store) commitBatch(batch []*commitReq) {
	s.mu.Lock()
	failed := s.failed
	s.mu.Unlock()
	if failed != nil {
		for _, r := range batch {
			r.done <- failed
		}
		return
	}
	start := time.Now()
	nchanges := 0
	countDelta := map[string]int{}
	err := s.update(func(tx *bolt.Tx) error {
		w := newTxWriter(tx)
		var err error
		nchanges, err = w.writeBatch(batch, countDelta)
		return err
	})
	s.m.commitLatency.Observe(time.Since(start).Seconds())
	s.m.batchRequests.Observe(float64(len(batch)))
	s.m.batchChanges.Observe(float64(nchanges))
	if err != nil {
		err = s.commitFailed(err)
	} else {
		s.countMu.Lock()
		for o, d := range countDelta {
			s.counts[o] += d
			s.m.entriesPerOrigin.WithLabelValues(o).Set(float64(s.counts[o]))
		}
		s.countMu.Unlock()
	}
	for _, r := range batch {
		if err == nil && r.OnCommit != nil {
			r.OnCommit()
		}
		r.done <- err
	}
}

// commitFailed makes the store refuse every later write, reports the
// first failure, and returns err as the *CommitError the writers get.
func (s *Store) commitFailed(err error) error {
	err = &CommitError{Err: err}
	s.log.Error("store commit failed", "err", err)
	s.m.commitErrors.Inc()
	s.mu.Lock()
	first := s.failed == nil
	s.failed = err
	s.mu.Unlock()
	if first && s.opts.OnCommitError != nil {
		s.opts.OnCommitError(err)
	}
	return err
}

// writeBatch writes the requests of one transaction: their changes (the
// entry count change per origin added to countDelta), the last digest and
// proof per origin, the self ID, the entry count and the last writer
// metadata. It returns the number of changes.
func (w *txWriter) writeBatch(batch []*commitReq, countDelta map[string]int) (int, error) {
	nchanges := 0
	digests := crdt.Digest{}
	proofs := map[string]crdt.Proof{}
	var writer *WriterMeta
	for _, r := range batch {
		for i := range r.Changes {
			d, err := w.apply(&r.Changes[i])
			if err != nil {
				return nchanges, err
			}
			if d != 0 {
				countDelta[r.Changes[i].Key.Origin] += d
			}
		}
		nchanges += len(r.Changes)
		for o, d := range r.Digests {
			digests[o] = d
		}
		for o, p := range r.Proofs {
			proofs[o] = p
		}
		if r.Writer != nil {
			writer = r.Writer
		}
		if r.Self != nil {
			if err := w.meta.Put(metaSelf, []byte(*r.Self)); err != nil {
				return nchanges, err
			}
		}
	}
	if err := w.putDigests(digests, proofs); err != nil {
		return nchanges, err
	}
	if err := w.addEntryCount(countDelta); err != nil {
		return nchanges, err
	}
	return nchanges, w.putWriter(writer)
}

// putDigests persists the digests and proofs of the touched origins.
func (w *txWriter) putDigests(digests crdt.Digest, proofs map[string]crdt.Proof) error {
	for o, d := range digests {
		if err := w.origins.Put(encodeKey(o), encodeDigest(d)); err != nil {
			return fmt.Errorf("store: persist digest of %q: %w", o, err)
		}
	}
	if len(proofs) == 0 {
		return nil
	}
	pb, err := w.tx.CreateBucketIfNotExists(bucketProofs)
	if err != nil {
		return err
	}
	for o, p := range proofs {
		if err := pb.Put(encodeKey(o), encodeProof(p)); err != nil {
			return fmt.Errorf("store: persist proof of %q: %w", o, err)
		}
	}
	return nil
}

// addEntryCount adds the batch's entry count change to meta/entry_count
// (a load size hint, never below 0).
func (w *txWriter) addEntryCount(countDelta map[string]int) error {
	total := int64(0)
	for _, d := range countDelta {
		total += int64(d)
	}
	if total == 0 {
		return nil
	}
	n := int64(0)
	if b := w.meta.Get(metaEntryCount); len(b) == 8 {
		n = int64(beU64(b))
	}
	if n += total; n < 0 {
		n = 0
	}
	return w.meta.Put(metaEntryCount, u64(uint64(n)))
}

// putWriter persists the writer metadata, if any.
func (w *txWriter) putWriter(writer *WriterMeta) error {
	if writer == nil {
		return nil
	}
	if err := w.meta.Put(metaEpoch, u32(writer.Epoch)); err != nil {
		return err
	}
	return w.meta.Put(metaLastVersion, u64(uint64(writer.LastVersion)))
}

const fillPercent = 0.9

type txWriter struct {
	entries, origins, meta *bolt.Bucket
	tx                     *bolt.Tx
}

func newTxWriter(tx *bolt.Tx) *txWriter {
	w := &txWriter{
		tx:      tx,
		entries: tx.Bucket(bucketEntries),
		origins: tx.Bucket(bucketOrigins),
		meta:    tx.Bucket(bucketMeta),
	}
	// Pods are mostly updated in place and namespaces are written in name
	// order, so pack pages densely (bbolt's default 0.5 leaves leaves half
	// empty): this halves the file and the pages a cold start must read.
	w.entries.FillPercent = fillPercent
	return w
}

// apply writes one change and returns the change in the number of stored
// entries (-1, 0, +1).
func (w *txWriter) apply(ch *crdt.Change) (int, error) {
	key := entryKey(ch.Key)
	delta := 0
	if w.entries.Get(key) != nil {
		delta--
	}
	if ch.New == nil {
		if delta == 0 {
			return 0, nil
		}
		return delta, w.entries.Delete(key)
	}
	if ch.New.Key != ch.Key {
		return 0, fmt.Errorf("store: change for %s carries entry %s", ch.Key, ch.New.Key)
	}
	if err := w.entries.Put(key, encodeRecord(key, ch.New)); err != nil {
		return 0, fmt.Errorf("store: put %s: %w", ch.Key, err)
	}
	return delta + 1, nil
}

// update is db.Update guarded like reads: a write transaction that walks
// into damaged pages fails with ErrCorrupt instead of crashing the daemon.
func (s *Store) update(fn func(*bolt.Tx) error) (err error) {
	defer guardRead(&err)()
	return s.db.Update(fn)
}

// noteCorrupt records that a read found damaged content.
func (s *Store) noteCorrupt(err *error) {
	if errors.Is(*err, ErrCorrupt) {
		s.corruptSeen.Store(true)
	}
}

// guardRead turns a panic or memory fault inside a read of damaged pages
// (possible when the full page check was skipped) into an ErrCorrupt error
// instead of crashing the daemon. Use as: defer guardRead(&err)() .
func guardRead(err *error) func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			*err = fmt.Errorf("%w: panic while reading: %v", ErrCorrupt, r)
		}
	}
}
