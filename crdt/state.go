package crdt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/google/btree"
)

// Limits enforced on every entry, whether written locally, applied from a
// delta, restored from disk or decoded from the wire.
const (
	// MaxOriginBytes bounds an origin (cluster ID). Cluster IDs are DNS
	// labels (<= 63 bytes); the slack is for observers and tests.
	MaxOriginBytes = 128
	// MaxNameBytes bounds an entry name. The longest legitimate name is a
	// report: "<origin>/<namespace>/<name>" = 63+1+63+1+253.
	MaxNameBytes = 1024
)

// Chunking of DeltaSince output. A chunk never exceeds DeltaChunkEntries
// entries, and stops growing once it passes DeltaChunkBytes of payload
// (a chunk always carries at least one entry so a single large value fits).
const (
	DeltaChunkEntries = 512
	DeltaChunkBytes   = 512 << 10
)

var (
	// ErrObserver is returned by writer-side calls on a State with no self.
	ErrObserver = errors.New("crdt: state has no self origin (observer)")
	// ErrNeedsEpochBump is returned by Write when the current epoch is not
	// usable: never set, retired, exhausted, or overtaken by a version of our
	// own origin seen from elsewhere. Call SetEpoch(MinEpoch()) (or higher)
	// and re-publish every live object.
	ErrNeedsEpochBump = errors.New("crdt: writer epoch must be bumped (see MinEpoch)")
	// ErrInvalid wraps every validation failure.
	ErrInvalid = errors.New("crdt: invalid input")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// record is the in-memory form of one entry. Its Origin is implied by the
// originState holding it, and its value and signature share one
// allocation (packValue), which keeps it to 64 bytes plus name and data.
type record struct {
	name string
	// data is the value followed by the signature (sigLen bytes; see
	// packValue for signatures of 64 KiB and more).
	data    []byte
	version Version
	stamp   int64
	kind    Kind
	deleted bool
	sigLen  uint16
	// mark is the reset session (originState.rsID) that last confirmed this
	// record; see applyReset.
	mark uint32
}

// bigSig in record.sigLen: the signature is 64 KiB or longer, and its
// length is the last 4 bytes of data (big endian), after the signature.
const bigSig = 1<<16 - 1

// packValue copies a value (nil for a tombstone) and a signature into one
// allocation.
func packValue(value, sig []byte, deleted bool) ([]byte, uint16) {
	if deleted {
		value = nil
	}
	if len(value) == 0 && len(sig) == 0 {
		return nil, 0
	}
	if len(sig) < bigSig {
		data := make([]byte, 0, len(value)+len(sig))
		return append(append(data, value...), sig...), uint16(len(sig))
	}
	data := make([]byte, 0, len(value)+len(sig)+4)
	data = append(append(data, value...), sig...)
	return binary.BigEndian.AppendUint32(data, uint32(len(sig))), bigSig
}

// sigBounds returns where the signature starts and ends in data.
func (r *record) sigBounds() (int, int) {
	end := len(r.data)
	n := int(r.sigLen)
	if r.sigLen == bigSig {
		end -= 4
		n = int(binary.BigEndian.Uint32(r.data[end:]))
	}
	return end - n, end
}

// value is the stored value (nil for a tombstone), capped so that an
// append by a caller cannot write into the signature.
func (r *record) value() []byte {
	start, _ := r.sigBounds()
	if start == 0 {
		return nil
	}
	return r.data[:start:start]
}

// sig is the stored signature (nil when unsigned).
func (r *record) sig() []byte {
	start, end := r.sigBounds()
	if start == end {
		return nil
	}
	return r.data[start:end:end]
}

func recLess(a, b *record) bool {
	if a.version != b.version {
		return a.version < b.version
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.name < b.name
}

// originState is everything a replica holds of one origin.
type originState struct {
	name string
	max  Version // contiguous watermark
	// pend is how far a replica with a verifier has received a contiguous
	// stream beyond max (0: not beyond). It is not a watermark: max moves
	// only to the head of a state mark the replica reproduces (advance).
	pend    Version
	gc      Version // tombstone GC watermark
	retired Version // retirement watermark
	seen    Version // highest version of this origin ever observed (writer safety)
	hash    uint64  // sum of entryHash over stored records
	gapHash uint64  // sum of entryHash over stored records above max
	// strong is the collision-resistant set hash of the stored records
	// (sethash.go), behind the completeness digests origins sign.
	strong   setHash
	eh       elemHasher
	strongOn bool // strong is maintained (the State signs or verifies)

	byName [numKinds]map[string]*record
	// opaque indexes the records of kinds this build does not know (a
	// newer peer's), by kind then name; nil until one arrives. They are
	// stored, hashed, signed and forwarded like any other record, but never
	// interpreted (see Kind.Opaque).
	opaque map[Kind]map[string]*record
	byVer  *btree.BTreeG[*record] // every stored record, by version
	tombs  *btree.BTreeG[*record] // tombstones only, by version
	count  int
	bytes  int // approximate memory of the stored records (recBytes)

	// In-flight reset session (receiver side); rsID == 0 means none.
	rsID       uint32
	rsProgress Version
	rsGC       Version

	rsStale bool // the receiver was stale when the session started

	proof Proof // the origin's signed watermarks (sign.go)
	// next is the newest verified state mark that does not prove max (zero
	// when none): above max, not reproduced yet, or at max after a
	// retirement moved max without a mark (it still proves its head to
	// others); lastMark the last mark verified, so the chunks of one
	// stream verify it once.
	next     StateMark
	lastMark StateMark
}

func newOriginState(name string) *originState {
	o := &originState{
		name:  name,
		byVer: btree.NewG[*record](32, recLess),
		tombs: btree.NewG[*record](16, recLess),
	}
	for i := range o.byName {
		o.byName[i] = make(map[string]*record)
	}
	return o
}

// top is the highest stored version (0 when empty).
func (o *originState) top() Version {
	if r, ok := o.byVer.Max(); ok {
		return r.version
	}
	return 0
}

// stale reports whether this replica is behind the origin's GC watermark and
// so may hold entries whose tombstones it never saw: it must be reset.
func (o *originState) stale() bool { return o.max < o.gc }

func (o *originState) entry(r *record) Entry {
	return Entry{
		Key:     Key{Origin: o.name, Kind: r.kind, Name: r.name},
		Version: r.version,
		Deleted: r.deleted,
		Value:   r.value(),
		Stamp:   r.stamp,
		Sig:     r.sig(),
	}
}

func (o *originState) entryPtr(r *record) *Entry {
	e := o.entry(r)
	return &e
}

// State is one replica's view of every origin. It is NOT safe for concurrent
// use. Values handed out (Get, Range, Change) share memory with the State and
// must be treated as read-only.
type State struct {
	self    string
	epoch   uint32
	origins map[string]*originState
	rsNext  uint32

	signer    Signer
	verifier  Verifier
	authority RetireAuthority
	// resetRefused carries applyReset's verdict out to Apply.
	resetRefused error
	limits       Limits

	// checkpoints are the accepted origin checkpoints (checkpoint.go).
	checkpoints map[string]*Checkpoint
	cpStats     CheckpointStats

	// complete: origins keep their set hash (sethash.go), because this
	// State signs or verifies state marks.
	complete bool
}

// NewState returns an empty state. self is the local cluster ID, the only
// origin Write may write; "" makes a read-only observer.
func NewState(self string) *State {
	return &State{self: self, origins: make(map[string]*originState)}
}

// newOrigin returns an empty originState that keeps a set hash when this
// State signs or verifies.
func (s *State) newOrigin(name string) *originState {
	o := newOriginState(name)
	o.strongOn = s.complete
	return o
}

// enableCompleteness makes every origin keep its set hash from now on
// (computed once over what is stored): signing and verifying state marks
// need it, an unsigned replica does not pay for it.
func (s *State) enableCompleteness() {
	s.complete = true
	for _, o := range s.origins {
		if o.strongOn {
			continue
		}
		o.strongOn, o.strong = true, setHash{}
		o.byVer.Ascend(func(r *record) bool {
			o.strong.add(&o.eh, r.kind, r.name, r.version, r.deleted, false)
			return true
		})
	}
}

func (o *originState) strongAdd(r *record, remove bool) {
	if o.strongOn {
		o.strong.add(&o.eh, r.kind, r.name, r.version, r.deleted, remove)
	}
}

// Self returns the local origin ("" for an observer).
func (s *State) Self() string { return s.self }

func (s *State) origin(name string) *originState {
	o := s.origins[name]
	if o == nil {
		o = s.newOrigin(name)
		s.origins[name] = o
	}
	return o
}

// ---------------------------------------------------------------- hashing

// entryHash is a 64-bit hash of (kind, name, version, deleted): FNV-1a over
// the fields followed by a splitmix64 finaliser. Origin hashes are the
// wrapping sum of entryHash over stored entries, so they update in O(1).
func entryHash(kind Kind, name string, v Version, deleted bool) uint64 {
	return EntryHash(kind, name, v, deleted)
}

// EntryHash is the per-entry hash behind OriginDigest.Hash: an origin's Hash
// is the wrapping sum of EntryHash over its stored entries (tombstones
// included). Exported so the store can verify its files independently.
func EntryHash(kind Kind, name string, v Version, deleted bool) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	h = (h ^ uint64(kind)) * prime
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime
	}
	h = (h ^ 0xff) * prime // terminator: name is variable length
	for i := 0; i < 8; i++ {
		h = (h ^ (uint64(v) >> (8 * i) & 0xff)) * prime
	}
	if deleted {
		h = (h ^ 1) * prime
	} else {
		h = (h ^ 2) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func recHash(r *record) uint64 { return entryHash(r.kind, r.name, r.version, r.deleted) }

// ------------------------------------------------------- storage primitives

// names is the name index of kind k (nil for an opaque kind with no record;
// reading a nil map is safe).
func (o *originState) names(k Kind) map[string]*record {
	if k.Valid() {
		return o.byName[k-1]
	}
	return o.opaque[k]
}

// lookup returns the stored record of (k, name), nil when there is none.
func (o *originState) lookup(k Kind, name string) *record { return o.names(k)[name] }

func (o *originState) insert(r *record) {
	m := o.names(r.kind)
	if m == nil {
		if o.opaque == nil {
			o.opaque = make(map[Kind]map[string]*record)
		}
		m = make(map[string]*record)
		o.opaque[r.kind] = m
	}
	m[r.name] = r
	o.byVer.ReplaceOrInsert(r)
	if r.deleted {
		o.tombs.ReplaceOrInsert(r)
	}
	o.hash += recHash(r)
	if r.version > o.max {
		o.gapHash += recHash(r)
	}
	o.strongAdd(r, false)
	o.count++
	o.bytes += recBytes(r)
}

func (o *originState) remove(r *record) {
	if m := o.names(r.kind); m != nil {
		delete(m, r.name)
		if len(m) == 0 && !r.kind.Valid() {
			delete(o.opaque, r.kind)
		}
	}
	o.byVer.Delete(r)
	if r.deleted {
		o.tombs.Delete(r)
	}
	o.hash -= recHash(r)
	if r.version > o.max {
		o.gapHash -= recHash(r)
	}
	o.strongAdd(r, true)
	o.count--
	o.bytes -= recBytes(r)
}

// replace overwrites r's contents with e's (same key).
func (o *originState) replace(r *record, e *Entry) {
	o.byVer.Delete(r)
	if r.deleted {
		o.tombs.Delete(r)
	}
	o.hash -= recHash(r)
	if r.version > o.max {
		o.gapHash -= recHash(r)
	}
	o.strongAdd(r, true)
	r.version = e.Version
	r.deleted = e.Deleted
	o.bytes -= recBytes(r)
	r.data, r.sigLen = packValue(e.Value, e.Sig, e.Deleted)
	o.bytes += recBytes(r)
	r.stamp = e.Stamp
	o.byVer.ReplaceOrInsert(r)
	if r.deleted {
		o.tombs.ReplaceOrInsert(r)
	}
	o.hash += recHash(r)
	if r.version > o.max {
		o.gapHash += recHash(r)
	}
	o.strongAdd(r, false)
}

// setMax raises the contiguous watermark, moving the records it passes out
// of the gap hash.
func (o *originState) setMax(v Version) {
	if v <= o.max {
		return
	}
	o.byVer.AscendGreaterOrEqual(&record{version: o.max + 1}, func(r *record) bool {
		if r.version > v {
			return false
		}
		o.gapHash -= recHash(r)
		return true
	})
	o.max = v
}

func newRecord(e *Entry) *record {
	data, sigLen := packValue(e.Value, e.Sig, e.Deleted)
	return &record{
		data:    data,
		sigLen:  sigLen,
		name:    e.Name,
		version: e.Version,
		stamp:   e.Stamp,
		kind:    e.Kind,
		deleted: e.Deleted,
	}
}

// wins reports whether incoming e should replace stored r under the merge
// order: higher Version wins; at equal Version (only possible when a writer
// misbehaved) a deterministic content order decides so merge stays a join.
func wins(e *Entry, r *record) bool {
	if e.Version != r.version {
		return e.Version > r.version
	}
	if e.Deleted != r.deleted {
		return e.Deleted // tombstone beats a value with the same version
	}
	if e.Stamp != r.stamp {
		return e.Stamp > r.stamp
	}
	return bytes.Compare(e.Value, r.value()) > 0
}

func sameContent(e *Entry, r *record) bool {
	return e.Version == r.version && e.Deleted == r.deleted && e.Stamp == r.stamp && bytes.Equal(e.Value, r.value())
}

// mergeEntry applies e by per-key max; it returns the change, if any. A
// tombstone at or below our GC watermark (the sender knew an older one) is
// applied and collected at once: it removes an older entry of its key and is
// never stored (unless we are stale: see gcTo).
func (o *originState) mergeEntry(e *Entry, changes []Change) []Change {
	r := o.lookup(e.Kind, e.Name)
	if e.Deleted && e.Version <= o.gc && !o.stale() {
		if r != nil && wins(e, r) {
			old := o.entryPtr(r)
			o.remove(r)
			changes = append(changes, Change{Key: old.Key, Old: old})
		}
		return changes
	}
	if r == nil {
		r = newRecord(e)
		o.insert(r)
		return append(changes, Change{Key: e.Key, New: o.entryPtr(r)})
	}
	if !wins(e, r) {
		return changes
	}
	old := o.entryPtr(r)
	o.replace(r, e)
	return append(changes, Change{Key: old.Key, Old: old, New: o.entryPtr(r)})
}

// dropUpTo removes records (from tree t) with version <= upTo. t is byVer
// (retirement) or tombs (GC).
func (o *originState) dropUpTo(t *btree.BTreeG[*record], upTo Version, changes []Change) []Change {
	var victims []*record
	t.Ascend(func(r *record) bool {
		if r.version > upTo {
			return false
		}
		victims = append(victims, r)
		return true
	})
	for _, r := range victims {
		old := o.entryPtr(r)
		o.remove(r)
		changes = append(changes, Change{Key: old.Key, Old: old})
	}
	return changes
}

func (o *originState) retireTo(upTo Version, changes []Change) []Change {
	if upTo <= o.retired {
		return changes
	}
	o.retired = upTo
	changes = o.dropUpTo(o.byVer, upTo, changes)
	// Everything <= upTo is now known to be absent: the watermark may jump.
	if upTo > o.max {
		o.setMax(upTo)
	}
	if upTo > o.seen {
		o.seen = upTo
	}
	return o.collect(changes)
}

func (o *originState) gcTo(gc Version, changes []Change) []Change {
	if gc <= o.gc {
		return changes
	}
	o.gc = gc
	if gc > o.seen {
		o.seen = gc
	}
	// A reset session can only survive a GC advance that stays inside the
	// range it already confirmed (tombstones above it may now be gone).
	if o.rsID != 0 && gc > o.rsGC && gc > o.rsProgress {
		o.rsID, o.rsProgress, o.rsGC = 0, 0, 0
	}
	return o.collect(changes)
}

// collect drops tombstones at or below GC, unless we are stale: a stale
// replica keeps its tombstones until its reset completes, because the reset
// stream may come from a sender that has not yet seen a key's latest
// versions (latest-only streams) and would otherwise revive an older one.
func (o *originState) collect(changes []Change) []Change {
	if o.stale() || o.gc == 0 {
		return changes
	}
	return o.dropUpTo(o.tombs, o.gc, changes)
}

// --------------------------------------------------------------- validation

func validOrigin(origin string) error {
	if origin == "" {
		return invalidf("empty origin")
	}
	if len(origin) > MaxOriginBytes {
		return invalidf("origin longer than %d bytes", MaxOriginBytes)
	}
	if !utf8.ValidString(origin) {
		return invalidf("origin is not valid UTF-8")
	}
	return nil
}

func validName(kind Kind, name string) error {
	spec, ok := kind.Spec()
	if !ok {
		return invalidf("unknown kind %d", uint8(kind))
	}
	if spec.Shape == NameEmpty {
		if name != "" {
			return invalidf("%s entry must have an empty name", kind)
		}
		return nil
	}
	if name == "" {
		return invalidf("empty %s name", kind)
	}
	if len(name) > MaxNameBytes {
		return invalidf("%s name longer than %d bytes", kind, MaxNameBytes)
	}
	if !utf8.ValidString(name) {
		return invalidf("%s name is not valid UTF-8", kind)
	}
	switch spec.Shape {
	case NameNamespaced:
		if strings.Count(name, "/") != 1 {
			return invalidf("%s name %q must be namespace/name", kind, name)
		}
	case NameOriginNamespaced:
		if strings.Count(name, "/") != 2 {
			return invalidf("%s name %q must be origin/namespace/name", kind, name)
		}
	}
	return nil
}

// validOpaqueName checks the name of an entry of a kind this build does not
// know: only what holds for every kind (its shape is the newer peer's
// business).
func validOpaqueName(kind Kind, name string) error {
	if kind == 0 {
		return invalidf("kind 0")
	}
	if len(name) > MaxNameBytes {
		return invalidf("%s name longer than %d bytes", kind, MaxNameBytes)
	}
	if !utf8.ValidString(name) {
		return invalidf("%s name is not valid UTF-8", kind)
	}
	return nil
}

// ValidateEntry checks one entry's shape (not its version ordering). An
// entry of a known kind must have its kind's name shape; one of an opaque
// kind (Kind.Opaque) only the limits every entry has, so a delta that
// carries a newer peer's kind is stored and forwarded, not refused.
func ValidateEntry(e *Entry) error {
	if err := validOrigin(e.Origin); err != nil {
		return err
	}
	check := validName
	if !e.Kind.Valid() {
		check = validOpaqueName
	}
	if err := check(e.Kind, e.Name); err != nil {
		return err
	}
	if e.Version == 0 {
		return invalidf("entry %s has version 0", e.Key)
	}
	if len(e.Value) > MaxValueBytes {
		return fmt.Errorf("%w: entry %s: %w", ErrInvalid, e.Key, ErrValueTooLarge)
	}
	if e.Deleted && len(e.Value) != 0 {
		return invalidf("tombstone %s carries a value", e.Key)
	}
	return nil
}

// ValidateDelta checks everything about d that does not depend on the
// receiver's state. Apply calls it before touching anything.
func ValidateDelta(d *Delta) error {
	if err := validOrigin(d.Origin); err != nil {
		return err
	}
	if d.From > d.To {
		return invalidf("delta %s: from %s > to %s", d.Origin, d.From, d.To)
	}
	if d.Final && !d.Reset {
		return invalidf("delta %s: final without reset", d.Origin)
	}
	if d.Gap && d.Reset {
		return invalidf("delta %s: gap and reset together", d.Origin)
	}
	if len(d.Endorse) != 0 && (len(d.Endorse) != EndorseSize || len(d.Key) != KeySize) {
		return invalidf("delta %s: endorsement of %d bytes (want %d, with a key)", d.Origin, len(d.Endorse), EndorseSize)
	}
	if err := d.Mark.validate(d.Origin); err != nil {
		return err
	}
	if len(d.Entries) > MaxDeltaEntries {
		return invalidf("delta %s: %d entries (max %d)", d.Origin, len(d.Entries), MaxDeltaEntries)
	}
	prev := d.From
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Origin != d.Origin {
			return invalidf("delta %s: entry of origin %q", d.Origin, e.Origin)
		}
		if err := ValidateEntry(e); err != nil {
			return err
		}
		if e.Version <= prev || e.Version > d.To {
			return invalidf("delta %s: entry %s version %s out of order or outside (%s, %s]",
				d.Origin, e.Key, e.Version, d.From, d.To)
		}
		if e.Version <= d.Retired {
			return invalidf("delta %s: entry %s version %s is retired (<= %s)", d.Origin, e.Key, e.Version, d.Retired)
		}
		if e.Deleted && e.Version <= d.GC {
			return invalidf("delta %s: tombstone %s version %s is below GC %s", d.Origin, e.Key, e.Version, d.GC)
		}
		prev = e.Version
	}
	return nil
}

// ------------------------------------------------------------- writer side

// base is the highest version of origin o this replica knows to exist.
func (o *originState) base() Version {
	b := o.max
	if t := o.top(); t > b {
		b = t
	}
	if o.seen > b {
		b = o.seen
	}
	if o.retired > b {
		b = o.retired
	}
	return b
}

// MinEpoch is the smallest epoch the writer may use: greater than the epoch
// of every version of its own origin it has seen (its Max, stored entries,
// watermarks) and of its own retirement.
func (s *State) MinEpoch() uint32 {
	if s.self == "" {
		return 1
	}
	o := s.origins[s.self]
	if o == nil {
		return 1
	}
	e := o.base().Epoch()
	if r := o.retired.Epoch(); r > e {
		e = r
	}
	if e >= MaxEpoch {
		return MaxEpoch
	}
	return e + 1
}

// SetEpoch sets the writer epoch. It fails if epoch < MinEpoch() or is not
// representable. The daemon persists the epoch before writing with it.
func (s *State) SetEpoch(epoch uint32) error {
	if s.self == "" {
		return ErrObserver
	}
	if epoch == 0 || epoch > MaxEpoch {
		return invalidf("epoch %d out of range [1, %d]", epoch, MaxEpoch)
	}
	if min := s.MinEpoch(); epoch < min {
		// MinEpoch saturates at MaxEpoch; a writer there is out of epochs.
		return fmt.Errorf("crdt: epoch %d is below the minimum safe epoch %d", epoch, min)
	}
	s.epoch = epoch
	return nil
}

// Epoch returns the current writer epoch (0 = not set).
func (s *State) Epoch() uint32 { return s.epoch }

// NeedsEpochBump reports whether Write would fail with ErrNeedsEpochBump:
// the epoch was never set, our own origin was retired at or above the
// current epoch (a Retire for self arrived: the daemon must SetEpoch and
// re-publish every live object), the epoch's sequence space is exhausted,
// or a version of our own origin from a later epoch was seen.
func (s *State) NeedsEpochBump() bool {
	if s.self == "" {
		return false
	}
	if s.epoch == 0 {
		return true
	}
	o := s.origins[s.self]
	if o == nil {
		return false
	}
	if o.retired != 0 && o.retired.Epoch() >= s.epoch {
		return true
	}
	b := o.base()
	return b.Epoch() > s.epoch || (b.Epoch() == s.epoch && b.Seq() == seqMask)
}

// Write records a local write of (kind, name) and returns the delta to
// broadcast plus the change. Every call writes a new version, even when the
// content is unchanged; callers that want idempotence compare with Get first.
func (s *State) Write(kind Kind, name string, value []byte, deleted bool, stamp int64) (Delta, []Change, error) {
	if s.self == "" {
		return Delta{}, nil, ErrObserver
	}
	if err := validName(kind, name); err != nil {
		return Delta{}, nil, err
	}
	return s.write(kind, name, value, deleted, stamp)
}

// write is Write after the kind and name checks (a test writes opaque kinds
// through it, as a later build would).
func (s *State) write(kind Kind, name string, value []byte, deleted bool, stamp int64) (Delta, []Change, error) {
	if len(value) > MaxValueBytes {
		return Delta{}, nil, ErrValueTooLarge
	}
	if deleted {
		value = nil
	}
	if s.NeedsEpochBump() {
		return Delta{}, nil, ErrNeedsEpochBump
	}
	o := s.origin(s.self)
	base := o.base()
	var v Version
	if base.Epoch() < s.epoch {
		v = MakeVersion(s.epoch, 1)
	} else {
		v = base + 1
	}
	e := Entry{Key: Key{Origin: s.self, Kind: kind, Name: name}, Version: v, Deleted: deleted, Value: value, Stamp: stamp}
	if s.signer != nil {
		e.Sig = s.signer.Sign(EntrySigMessage(&e))
	}
	changes := o.mergeEntry(&e, nil)
	if o.max == base {
		// Nothing exists between our watermark and v: v is contiguous.
		o.setMax(v)
	}
	o.seen = v
	// The state mark at v proves v (as a head signature did) and lets
	// receivers check that they hold exactly our state there.
	s.signState(o)
	d := Delta{
		Origin:  s.self,
		From:    base,
		To:      v,
		Entries: []Entry{o.entry(o.lookup(kind, name))},
		GC:      o.gc,
		Retired: o.retired,
	}
	s.attachProof(o, &d)
	return d, changes, nil
}

// CollectGarbage advances the writer's own GC watermark to upTo (clamped to
// its own Max) and drops its tombstones <= upTo. The returned watermark-only
// delta tells receivers to drop theirs. Choosing upTo (the horizon) is the
// daemon's policy; see ARCHITECTURE.md.
func (s *State) CollectGarbage(upTo Version) (Delta, []Change) {
	if s.self == "" {
		return Delta{}, nil
	}
	o := s.origin(s.self)
	if upTo > o.max {
		upTo = o.max
	}
	changes := o.gcTo(upTo, nil)
	if s.signer != nil && o.gc > 0 {
		o.proof.GCSig = s.signMark(o, MarkGC, o.gc)
		s.signState(o)
	}
	d := Delta{Origin: s.self, From: o.max, To: o.max, GC: o.gc, Retired: o.retired}
	s.attachProof(o, &d)
	return d, changes
}

// --------------------------------------------------------------- merge side

// Apply merges a delta. It validates d completely before changing anything,
// is idempotent, and returns the changes it made.
func (s *State) Apply(d Delta) ([]Change, error) {
	if err := ValidateDelta(&d); err != nil {
		return nil, err
	}
	o, existed := s.origins[d.Origin]
	if !existed {
		if err := s.refuseNewOrigin(d.Origin); err != nil {
			return nil, err
		}
		// Not stored until the delta passes verification: refused input
		// leaves nothing behind.
		o = s.newOrigin(d.Origin)
	}
	if err := s.checkEntryLimit(o, &d); err != nil {
		return nil, err
	}
	if err := s.checkByteLimit(o, &d); err != nil {
		return nil, err
	}
	proof, cand, err := s.verifyDelta(o, &d)
	if err != nil {
		return nil, err
	}
	if !existed {
		s.origins[d.Origin] = o
	}
	o.proof = proof
	if cand != nil {
		o.lastMark = *cand
	}
	gcBefore, retBefore := o.gc, o.retired
	defer s.resignOwn(o, gcBefore, retBefore)
	var changes []Change
	changes = o.retireTo(d.Retired, changes)
	changes = o.gcTo(d.GC, changes)
	if d.To > o.seen {
		o.seen = d.To
	}
	proven := s.verifier != nil
	if d.Reset {
		s.resetRefused = nil
		changes = s.applyReset(o, &d, gcBefore, cand, changes)
		err := s.resetRefused
		s.resetRefused = nil
		changes, aerr := s.advance(o, cand, changes)
		if err == nil {
			err = aerr
		}
		s.afterApply(o, changes)
		return changes, err
	}
	changes = o.applyNormal(&d, changes, proven)
	changes, err = s.advance(o, cand, changes)
	o.endSessionIfCurrent()
	s.afterApply(o, changes)
	return changes, err
}

// resignOwn re-signs our own origin's state mark when a signed GC or
// retirement watermark from elsewhere changed it (a writer restored from a
// lagging snapshot learns the GC its predecessor signed). Only a replica
// whose watermark is proven by its mark and that holds nothing above it
// signs: its state is then exactly the origin's at that head, less what
// the new watermarks remove, so a standby holding the key never vouches
// for a partial state.
func (s *State) resignOwn(o *originState, gcBefore, retBefore Version) {
	if o.name != s.self || s.signer == nil || (o.gc == gcBefore && o.retired == retBefore) {
		return
	}
	if m := &o.proof.Mark; len(m.Sig) == 0 || m.Head != o.max || o.top() > o.max || o.stale() {
		return
	}
	s.signState(o)
}

// afterApply is what every Apply ends with. A replica of our own cluster
// that merges our origin's records never signs a state mark here: only the
// writer's own actions (Write, CollectGarbage, a seal) sign its state, so a
// lagging replica holding the key cannot vouch for a partial state.
func (s *State) afterApply(o *originState, _ []Change) {
	s.dropPassedCheckpoint(o)
}

// progress is how far o has received contiguously: its watermark, or
// further when a verifier holds the watermark back until a state mark
// proves it (pend).
func (o *originState) progress() Version { return max(o.max, o.pend) }

// advance moves o's watermark to the head of the newest state mark held
// for it when this replica's own records at or below that head, at the
// mark's GC watermark, reproduce the mark's signed digest (issue 29, item
// 1). Only a replica with a verifier needs a mark: without one, deltas
// move the watermark themselves, as their (trusted) senders claim.
//
// A replica that received a contiguous stream up to the head and still
// does not reproduce the digest holds a hole (a relay claimed a range it
// did not send) or a record the origin no longer has: the watermark stays,
// the unproven progress is forgotten so that peers send again from the
// proven watermark (applyNormal admits every record above it, so the hole
// is filled), and the mismatch is reported as ReasonCompletenessMismatch.
// A stale replica (behind GC) is repaired by a reset stream instead.
//
// The marks tried are cand (the one the delta or retirement just brought,
// verified) and next (the newest one held); a proven mark becomes the
// Proof's Mark, which this replica then forwards with the streams it
// serves up to its watermark.
func (s *State) advance(o *originState, cand *StateMark, changes []Change) ([]Change, error) {
	if s.verifier == nil {
		return changes, nil
	}
	var err error
	for _, m := range []*StateMark{cand, &o.next} {
		if m == nil || !o.usable(m) {
			continue
		}
		ok, mismatch := o.reproduces(m)
		if ok {
			mk := *m
			o.proof.Mark = mk
			o.setMax(mk.Head)
			if !o.next.newer(&mk) {
				o.next = StateMark{}
			}
			changes = o.collect(changes)
			return changes, nil
		}
		if mismatch && err == nil {
			o.pend = 0
			err = trustErr(ReasonCompletenessMismatch, o.name,
				"holding every version up to %s, the state does not reproduce the origin's signed digest; watermark stays at %s", m.Head, o.max)
		}
	}
	if cand != nil && cand.newer(&o.next) && cand.newer(&o.proof.Mark) {
		o.next = *cand
	}
	return changes, err
}

// usable reports whether m could prove (or refresh the proof of) o's
// watermark: a mark newer than the one proving it, at or above it, at the
// same GC and retirement watermarks.
func (o *originState) usable(m *StateMark) bool {
	return len(m.Sig) > 0 && m.newer(&o.proof.Mark) && m.Head >= o.max && m.GC == o.gc && m.Retired == o.retired
}

// reproduces reports whether o's records at or below m.Head have m's
// digest; mismatch is true when they do not although o received a
// contiguous stream up to m.Head (a hole, or a record the origin no
// longer has), false when o may just not have everything yet. A replica
// holding records above m.Head cannot tell: one of them may have replaced
// a key's version at or below the head (streams carry only each key's
// latest version), so only a newer mark decides.
func (o *originState) reproduces(m *StateMark) (ok, mismatch bool) {
	h, n := o.stateAt(m.Head)
	stale := o.stale()
	if stale {
		// A stale replica keeps its tombstones at or below GC until it is
		// current again (collect); the origin has collected them.
		o.tombs.Ascend(func(r *record) bool {
			if r.version > o.gc || r.version > m.Head {
				return false
			}
			h.add(&o.eh, r.kind, r.name, r.version, r.deleted, true)
			n--
			return true
		})
	}
	if dg := h.digest(n); bytes.Equal(dg[:], m.Hash) {
		return true, false
	}
	return false, !stale && m.Head > o.max && o.progress() >= m.Head && o.top() <= m.Head
}

// markAt returns the verified mark o holds (cand first) whose head is v,
// at o's GC and retirement watermarks, or nil.
func (o *originState) markAt(v Version, cand *StateMark) *StateMark {
	for _, m := range []*StateMark{cand, &o.next, &o.proof.Mark} {
		if m != nil && len(m.Sig) > 0 && m.Head == v && m.GC == o.gc && m.Retired == o.retired {
			return m
		}
	}
	return nil
}

// endSessionIfCurrent abandons a reset session once we are no longer stale
// and ordinary traffic flows: the session then only mattered for a hash
// mismatch, which a sender restarts if it persists.
func (o *originState) endSessionIfCurrent() {
	if o.rsID != 0 && !o.stale() {
		o.rsID, o.rsProgress, o.rsGC = 0, 0, 0
	}
}

func (o *originState) applyNormal(d *Delta, changes []Change, proven bool) []Change {
	for i := range d.Entries {
		e := &d.Entries[i]
		// At or below our watermark we already hold the latest of every
		// key; anything else there is obsolete (its successor may have been
		// garbage-collected), so it must never be re-admitted.
		if e.Version <= o.max || e.Version <= o.retired {
			continue
		}
		if e.Version <= o.gc && !e.Deleted && d.GC < o.gc {
			// The sender knows an older GC than ours, so it may itself be
			// stale: this entry's successor may be a tombstone we already
			// collected. Only a sender at our GC or later is trusted here.
			continue
		}
		if e.Version <= o.gc && e.Deleted && o.lookup(e.Kind, e.Name) == nil {
			// A tombstone at or below GC of a key we do not hold deletes
			// nothing (every tombstone there is collected), and the key
			// may have had a newer version we held and a reset dropped:
			// admitting it would take the key back in time (a stale
			// replica keeps it until its reset ends; the signed
			// simulator's seed 5159698387800949734).
			continue
		}
		changes = o.mergeEntry(e, changes)
	}
	if !d.Gap && !o.stale() && o.progress() >= d.From && d.To > o.max {
		o.extend(d.To, proven)
	}
	return changes
}

// extend records that a contiguous stream reached to: the watermark
// itself without a verifier, else only the progress a state mark must
// then prove (advance).
func (o *originState) extend(to Version, proven bool) {
	if !proven {
		o.setMax(to)
	} else if to > o.pend {
		o.pend = to
	}
}

// applyReset applies one chunk of a reset stream. Chunks are ordinary
// version-ordered slices (From, To] of the sender's state; the receiver merges
// them by per-key max (so no version ever regresses), marks every key the
// stream confirms and, on the Final chunk of a stream it saw contiguously from
// version 0, drops every entry <= To that the stream did not confirm. So no
// live key is dropped before the stream ends, and nothing stale survives it.
func (s *State) applyReset(o *originState, d *Delta, gcBefore Version, cand *StateMark, changes []Change) []Change {
	if !s.joinReset(o, d, gcBefore) {
		// Not contiguous with a session we hold: the chunk is still a
		// truthful slice, so merge it the ordinary way.
		return o.applyNormal(d, changes, s.verifier != nil)
	}
	changes = o.mergeResetEntries(d, changes)
	o.rsProgress = d.To
	proven := s.verifier != nil
	if !o.stale() && o.progress() >= d.From && d.To > o.max {
		o.extend(d.To, proven)
	}
	if !d.Final {
		return changes
	}
	return s.finishReset(o, d, cand, changes)
}

// joinReset starts a reset session with a chunk from 0 or continues the
// one the chunk follows; false: the chunk belongs to no session.
func (s *State) joinReset(o *originState, d *Delta, gcBefore Version) bool {
	switch {
	case d.From == 0 && d.GC >= gcBefore:
		// A sender serves only origins it is not stale for, so its Max is
		// >= its GC >= ours: its snapshot is authoritative. (A sender that
		// knows an older GC than ours might be stale and is merged normally.)
		s.rsNext++
		if s.rsNext == 0 {
			s.rsNext = 1
		}
		o.rsID, o.rsProgress, o.rsGC = s.rsNext, 0, o.gc
		o.rsStale = o.max < gcBefore || o.stale()
		return true
	case o.rsID != 0 && d.From == o.rsProgress:
		return true // continues the session
	}
	return false
}

// mergeResetEntries merges a reset chunk's entries and marks every key the
// sender holds as confirmed by the session.
func (o *originState) mergeResetEntries(d *Delta, changes []Change) []Change {
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Version <= o.retired {
			continue
		}
		r := o.lookup(e.Kind, e.Name)
		if e.Deleted && e.Version <= o.gc && !o.stale() {
			changes = o.mergeEntry(e, changes) // collected tombstone
			continue
		}
		switch {
		case r == nil:
			if e.Version <= o.max {
				// Below our watermark we have seen the latest of every key,
				// so a key we lack there is obsolete (its successor may be
				// a tombstone we collected). Never re-admit it; a
				// hash-mismatch reset only ever shrinks both sides to what
				// they agree on (see ARCHITECTURE.md).
				continue
			}
			r = newRecord(e)
			o.insert(r)
			changes = append(changes, Change{Key: e.Key, New: o.entryPtr(r)})
		case wins(e, r):
			old := o.entryPtr(r)
			o.replace(r, e)
			changes = append(changes, Change{Key: old.Key, Old: old, New: o.entryPtr(r)})
		}
		// Confirmed: the sender holds this key (ours is the same or newer).
		r.mark = o.rsID
	}
	return changes
}

// finishReset ends a reset session at its final chunk: the records at or
// below To that the session did not confirm are removed, unless (with
// signatures on) the origin's signed state does not explain their removal.
func (s *State) finishReset(o *originState, d *Delta, cand *StateMark, changes []Change) []Change {
	proven := s.verifier != nil
	staleAtStart := o.rsStale
	// With signatures on, the origin's signed state at To decides: when
	// the records this stream confirmed reproduce its digest, they are
	// the origin's whole state there and everything else at or below To
	// is obsolete (a deleted and collected key included).
	m := o.markAt(d.To, cand)
	// (records above To may have replaced a confirmed key's version at or
	// below it: the confirmed set is then not the state at To)
	checkable := proven && m != nil && o.top() <= d.To
	vouched := false
	if checkable {
		dg := o.confirmedDigest(d.To)
		vouched = bytes.Equal(dg[:], m.Hash)
	}
	victims, kept := o.unconfirmed(d.To, !proven || vouched, staleAtStart)
	switch {
	case kept > 0:
		s.resetRefused = trustErr(ReasonUnprovenReset, o.name,
			"reset stream omits %d entries that the origin's signed watermarks do not explain; kept them", kept)
	case checkable && !vouched:
		s.resetRefused = trustErr(ReasonCompletenessMismatch, o.name,
			"reset stream up to %s does not reproduce the origin's signed state digest; watermark stays at %s", d.To, o.max)
	}
	for _, r := range victims {
		old := o.entryPtr(r)
		o.remove(r)
		changes = append(changes, Change{Key: old.Key, Old: old})
	}
	if d.To > o.max && (!proven || vouched) {
		o.setMax(d.To)
	}
	if vouched {
		o.proof.Mark = *m
		if !o.next.newer(m) {
			o.next = StateMark{}
		}
	}
	o.rsID, o.rsProgress, o.rsGC = 0, 0, 0
	return o.collect(changes)
}

// confirmedDigest is the completeness digest of the records at or below to
// that the current reset session confirmed.
func (o *originState) confirmedDigest(to Version) [StateHashSize]byte {
	var h setHash
	n := 0
	o.byVer.Ascend(func(r *record) bool {
		if r.version > to {
			return false
		}
		if r.mark == o.rsID {
			h.add(&o.eh, r.kind, r.name, r.version, r.deleted, false)
			n++
		}
		return true
	})
	return h.digest(n)
}

// unconfirmed returns the records at or below to that the reset session
// did not confirm: victims to remove (all of them when drop, else those
// the stale start's GC explains) and the number kept.
func (o *originState) unconfirmed(to Version, drop, staleAtStart bool) (victims []*record, kept int) {
	o.byVer.Ascend(func(r *record) bool {
		if r.version > to {
			return false
		}
		if r.mark == o.rsID {
			return true
		}
		if drop || (staleAtStart && r.version <= o.gc) {
			victims = append(victims, r)
		} else {
			// With signatures on, a relay could omit entries from a reset
			// stream to wipe them (attack 2): only what the origin's
			// signed GC watermark explains (a successor was collected)
			// is dropped; the rest is kept and the stream refused.
			kept++
		}
		return true
	})
	return victims, kept
}

// ApplyRetire merges a retirement: every entry of r.Origin with version <=
// r.UpTo is dropped and such versions are rejected for ever. The origin's
// watermarks are kept (O(1) per departed cluster) even when nothing remains.
// If r retires our own writes, NeedsEpochBump reports true afterwards.
func (s *State) ApplyRetire(r Retire) ([]Change, error) {
	if err := validOrigin(r.Origin); err != nil {
		return nil, err
	}
	if r.UpTo == 0 {
		return nil, invalidf("retire %s up to version 0", r.Origin)
	}
	o, existed := s.origins[r.Origin]
	if !existed {
		if err := s.refuseNewOrigin(r.Origin); err != nil {
			return nil, err
		}
		o = s.newOrigin(r.Origin)
	}
	// The mark a seal carries is verified first: its head is a version
	// the origin signed, which bounds the retirement.
	cand, err := s.verifyRetireMark(o, &r)
	if err != nil {
		return nil, err
	}
	if err := s.verifyRetire(o, &r); err != nil {
		return nil, err
	}
	if !existed {
		s.origins[r.Origin] = o
	}
	retBefore := o.retired
	changes := o.retireTo(r.UpTo, nil)
	defer s.resignOwn(o, o.gc, retBefore)
	// What the retirement dropped may be what kept a held state mark
	// from matching (a takeover's seal).
	changes, _ = s.advance(o, cand, changes)
	o.endSessionIfCurrent()
	return changes, nil
}

// SealPriorEpochs retires every version of our own origin from epochs before
// the current one. A writer that took over from a replica which may have
// missed the previous leader's last writes calls it once it has re-published
// every live object at the current epoch: whatever the old leader wrote that
// the new one never saw (zombies, tombstones) is then removed everywhere,
// while live objects already carry current-epoch versions and survive.
func (s *State) SealPriorEpochs() (Retire, []Change, error) {
	return s.SealEpochsBelow(s.epoch)
}

// SealEpochsBelow retires every version of our own origin from epochs before
// epoch, which must be at most the current one. A takeover seals below the
// epoch it re-published at: had the writer epoch moved on in between, a seal
// below the new epoch would also retire the live entries it had just
// re-published, until they were written again.
func (s *State) SealEpochsBelow(epoch uint32) (Retire, []Change, error) {
	if s.self == "" {
		return Retire{}, nil, ErrObserver
	}
	if epoch < 2 {
		return Retire{}, nil, fmt.Errorf("crdt: no prior epoch to seal (epoch %d)", epoch)
	}
	if epoch > s.epoch {
		return Retire{}, nil, fmt.Errorf("crdt: cannot seal below epoch %d, beyond the writer's epoch %d", epoch, s.epoch)
	}
	r := s.SignRetire(Retire{Origin: s.self, UpTo: MakeVersion(epoch, 0) - 1})
	ch, err := s.ApplyRetire(r)
	if err == nil {
		o := s.origin(s.self)
		if epoch == s.epoch {
			o.proveOwnEpoch(epoch)
		}
		// The seal dropped records: sign the state that remains, and send
		// that mark with the seal (receivers holding the previous mark at
		// the same head could otherwise not prove their watermark).
		s.signState(o)
		r.Mark = o.proof.Mark
	}
	return r, ch, err
}

// proveOwnEpoch moves the writer's own watermark over its writes of epoch,
// once everything below epoch is sealed. A writer that took over while it
// held its own cluster's records above its watermark (received out of
// order as a standby) wrote its epoch without moving the watermark (Write
// moves it only from the base), and the seal raises it only to the
// epoch's start: its own entries then stayed above its own watermark for
// as long as it led, and its own GC, clamped to the watermark, collected
// nothing (nemesis seed 29206). Everything above the seal is this writer's
// own epoch (the fence gives each epoch one writer, which writes it in
// order), so all of it up to the highest record is proven.
func (o *originState) proveOwnEpoch(epoch uint32) {
	if t := o.top(); t.Epoch() == epoch {
		o.setMax(t)
	}
}

// RetireRecord returns the retirement covering everything this replica
// knows of origin (its Max, any entry above it, its GC watermark and any
// earlier retirement).
func (s *State) RetireRecord(origin string) Retire {
	o := s.origins[origin]
	if o == nil {
		return Retire{Origin: origin}
	}
	up := max(o.max, o.top(), o.retired, o.gc)
	return Retire{Origin: origin, UpTo: up}
}

// ------------------------------------------------------------------ queries

// Get returns the stored entry for k (tombstones included), of a known or
// an opaque kind.
func (s *State) Get(k Key) (Entry, bool) {
	o := s.origins[k.Origin]
	if o == nil {
		return Entry{}, false
	}
	r := o.lookup(k.Kind, k.Name)
	if r == nil {
		return Entry{}, false
	}
	return o.entry(r), true
}

// Range calls fn for every stored entry (tombstones included) of origin and
// kind in Name order, until fn returns false. An opaque kind (Kind.Opaque)
// ranges over what this replica carries for newer peers.
func (s *State) Range(origin string, kind Kind, fn func(Entry) bool) {
	o := s.origins[origin]
	if o == nil {
		return
	}
	m := o.names(kind)
	recs := make([]*record, 0, len(m))
	for _, r := range m {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].name < recs[j].name })
	for _, r := range recs {
		if !fn(o.entry(r)) {
			return
		}
	}
}

// Len returns the number of stored entries of origin (tombstones included).
func (s *State) Len(origin string) int {
	if o := s.origins[origin]; o != nil {
		return o.count
	}
	return 0
}

// empty reports whether o carries no information at all.
func (o *originState) empty() bool {
	return o.max == 0 && o.gc == 0 && o.retired == 0 && o.count == 0 && o.rsID == 0
}

// Origins returns every origin the state has metadata for, sorted.
func (s *State) Origins() []string {
	out := make([]string, 0, len(s.origins))
	for n, o := range s.origins {
		if !o.empty() {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func (o *originState) digest() OriginDigest {
	d := OriginDigest{Max: o.max, Hash: o.hash, GC: o.gc, Retired: o.retired, Top: o.top(), GapHash: o.gapHash}
	switch {
	case o.rsID != 0 && o.stale():
		d.Reset = o.rsProgress
	case !o.stale() && o.pend > o.max:
		// received contiguously up to pend, not yet proven: a sender
		// resumes there (and only a complete stream proves anything)
		d.Reset = o.pend
	}
	return d
}

// Digest summarises the state in O(origins).
func (s *State) Digest() Digest {
	d := make(Digest, len(s.origins))
	for n, o := range s.origins {
		if !o.empty() {
			d[n] = o.digest()
		}
	}
	return d
}

// syncMode is what DeltaSince must send for one origin.
type syncMode uint8

const (
	syncNone syncMode = iota
	syncNormal
	syncReset
	syncWatermarks
	syncGap
	syncMismatch // a reset stream at equal watermarks (hash mismatch)
)

// plan decides, for our origin o and the remote's digest r of it, what the
// remote lacks, and from which version the stream starts.
func (o *originState) plan(r OriginDigest, present bool) (syncMode, Version) {
	if o.stale() {
		// We may hold stale data: never push entries. Watermarks are safe.
		if present && (r.GC < o.gc || r.Retired < o.retired) {
			return syncWatermarks, 0
		}
		return syncNone, 0
	}
	if r.Max < o.gc {
		from := Version(0)
		if r.Reset > 0 && r.Reset <= o.max {
			from = r.Reset
		}
		return syncReset, from
	}
	if present && r.Max == o.max && r.GC == o.gc && r.Retired == o.retired &&
		r.Top <= r.Max && o.top() <= o.max && r.Hash != o.hash {
		// Equal watermarks but different contents: possible only after a
		// takeover from a lagging replica (before its seal) or a writer
		// that misbehaved. Both sides reset each other; a non-stale
		// receiver only drops what the stream lacks and upgrades common
		// keys, so the pair converges monotonically on what both hold, and
		// the writer re-publishes any live object that fell out. A
		// non-stale receiver does not advertise progress, so this stream
		// is sent whole (see DeltaSince).
		return syncMismatch, 0
	}
	if r.Max < o.max {
		return o.planAhead(r)
	}
	if top, floor := o.top(), max(o.max, r.Max); top > floor &&
		(r.Top < top || r.Max != o.max || r.GapHash != o.gapHash) {
		// We hold entries above both watermarks (received out of order)
		// that the remote may lack (only equal watermarks and gap hashes
		// prove it does not); their writer may be gone for good, so spread
		// them too, without claiming the range. They are few, resending
		// stops once the two replicas agree, and Behind (which triggers
		// pulls) is stricter, so this never causes a digest ping-pong.
		return syncGap, floor
	}
	if !present || r.GC < o.gc || r.Retired < o.retired {
		if o.gc == 0 && o.retired == 0 && o.max == 0 {
			return syncNone, 0
		}
		return syncWatermarks, 0
	}
	return syncNone, 0
}

// planAhead is plan for a remote whose watermark is below ours.
func (o *originState) planAhead(r OriginDigest) (syncMode, Version) {
	from := r.Max
	if r.Max >= r.GC && r.Reset > r.Max && r.Reset <= o.max {
		// the remote received up to r.Reset already (unproven progress,
		// see advance): resume there
		from = r.Reset
	}
	// When the remote received everything up to our watermark and waits
	// for a mark that proves it, a normal stream is empty (it carries our
	// mark): the entries we hold above the watermark, which Behind makes
	// the remote pull, go as a gap delta instead (it carries the mark
	// too), or the pair pulls forever.
	if from < o.max || o.top() <= o.max || r.Top >= o.top() {
		return syncNormal, from
	}
	return syncGap, o.max
}

type cursor struct {
	o    *originState
	mode syncMode
	from Version
	done bool
}

// next cuts the next chunk of at most limit entries (limit >= 0).
func (c *cursor) next(limit int) (Delta, bool) {
	o := c.o
	d := Delta{Origin: o.name, From: c.from, GC: o.gc, Retired: o.retired,
		Reset: c.mode == syncReset || c.mode == syncMismatch, Gap: c.mode == syncGap}
	if c.mode == syncWatermarks {
		d.From, d.To = o.max, o.max
		c.done = true
		return d, true
	}
	end := o.max
	if c.mode == syncGap {
		end = o.top()
	}
	size := 0
	more := false
	pivot := &record{version: c.from + 1}
	o.byVer.AscendGreaterOrEqual(pivot, func(r *record) bool {
		if r.version > end {
			return false
		}
		if len(d.Entries) >= limit || (len(d.Entries) > 0 && size >= DeltaChunkBytes) {
			more = true
			return false
		}
		d.Entries = append(d.Entries, o.entry(r))
		size += len(r.name) + len(r.value()) + 32
		return true
	})
	switch {
	case more && len(d.Entries) == 0:
		return Delta{}, false // out of budget
	case more:
		d.To = d.Entries[len(d.Entries)-1].Version
	default:
		d.To = end
		d.Final = d.Reset
		c.done = true
	}
	c.from = d.To
	return d, true
}

// DeltaSince returns what a replica with digest remote lacks, as chunks of at
// most DeltaChunkEntries entries, taking one chunk per origin in turn (origins
// in sorted order) so a large origin cannot starve the others. maxEntries
// bounds the total number of entries (<= 0: unbounded); watermark-only
// chunks are always included, and so is the whole of a hash-mismatch reset
// stream (rare; it must complete in one go). Every prefix of the result is
// valid to apply.
func (s *State) DeltaSince(remote Digest, maxEntries int) []Delta {
	budget := maxEntries
	if budget <= 0 {
		budget = int(^uint(0) >> 1)
	}
	var curs []*cursor
	for _, name := range s.Origins() {
		o := s.origins[name]
		r, ok := remote[name]
		ok = ok && r != (OriginDigest{})
		mode, from := o.plan(r, ok)
		if mode == syncNone {
			continue
		}
		curs = append(curs, &cursor{o: o, mode: mode, from: from})
	}
	var out []Delta
	for active := len(curs); active > 0; {
		// Fair share of the remaining budget per active origin this round.
		share := min(DeltaChunkEntries, max(1, budget/active))
		active = 0
		for _, c := range curs {
			if c.done {
				continue
			}
			// Every stream, hash-mismatch resets included, respects the
			// budget (issue 15, attack 8: a full reset must not build 200k
			// entries where 16k are allowed). A cut-short stream is a
			// valid prefix: its entries merge, and only a complete stream
			// drops anything (a stale receiver advertises its progress in
			// OriginDigest.Reset and the next round resumes there).
			limit := min(budget, share)
			d, ok := c.next(limit)
			if !ok {
				c.done = true
				continue
			}
			budget = max(0, budget-len(d.Entries))
			s.attachProof(c.o, &d)
			out = append(out, d)
			if !c.done {
				active++
			}
		}
	}
	return out
}

// Behind returns, sorted, the origins for which remote holds something we
// lack, so the caller should ask remote for DeltaSince(our digest).
func (s *State) Behind(remote Digest) []string {
	var out []string
	for name, r := range remote {
		if validOrigin(name) != nil {
			continue
		}
		var l OriginDigest
		o := s.origins[name]
		if o != nil {
			l = o.digest()
		}
		if OriginBehind(l, o != nil, r) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// OriginBehind is Behind for one origin: whether a replica whose digest of
// the origin is local (present=false: it knows nothing of it) should pull
// from a peer whose digest is remote.
func OriginBehind(local OriginDigest, present bool, remote OriginDigest) bool {
	if remote.Max < remote.GC {
		return false // remote is stale for this origin and will not serve it
	}
	if !present {
		return remote.Max > 0 || remote.Retired > 0 || remote.GC > 0 || remote.Top > 0
	}
	// A verifying replica that received a stream up to the remote's
	// watermark (local.Reset) holds what the remote would send: it waits
	// for a state mark, not for data (no pull ping-pong).
	received := local.Max >= local.GC && local.Reset >= remote.Max
	switch {
	case remote.Max > local.Max && !received, remote.GC > local.GC, remote.Retired > local.Retired:
		return true
	case local.Max < local.GC && remote.Max >= local.GC:
		return true // we are stale; remote can reset us
	case remote.Max == local.Max && remote.GC == local.GC && remote.Retired == local.Retired &&
		remote.Top <= remote.Max && local.Top <= local.Max && remote.Hash != local.Hash:
		return true // equal watermarks, different content: mutual reset
	case local.Max >= local.GC && remote.Top > max(remote.Max, local.Max) &&
		(local.Top < remote.Top || (local.Max == remote.Max && local.GapHash != remote.GapHash)):
		return true // remote holds out-of-order entries we may lack (gap delta)
	}
	return false
}

// ------------------------------------------------------------- persistence

// Restore replaces the whole state with a persisted snapshot: d holds the
// watermarks of every origin and entries every stored entry. Each origin's
// hash is recomputed and must equal d's; on any error the state is left
// unchanged. The writer epoch is not restored: call SetEpoch afterwards.
func (s *State) Restore(d Digest, entries []Entry) error {
	origins, err := s.restoreOrigins(d)
	if err != nil {
		return err
	}
	presize(origins, entries)
	for i := range entries {
		if err := restoreEntry(origins, &entries[i]); err != nil {
			return err
		}
	}
	for name, o := range origins {
		if want := d[name].Hash; o.hash != want {
			return fmt.Errorf("crdt: restore: origin %s hash %016x does not match its digest %016x", name, o.hash, want)
		}
	}
	s.origins = origins
	return nil
}

// restoreOrigins makes an empty origin per digest entry, at its watermarks.
func (s *State) restoreOrigins(d Digest) (map[string]*originState, error) {
	origins := make(map[string]*originState, len(d))
	for name, od := range d {
		if err := validOrigin(name); err != nil {
			return nil, err
		}
		o := s.newOrigin(name)
		o.max, o.gc, o.retired = od.Max, od.GC, od.Retired
		o.seen = od.Max
		if od.GC > o.seen {
			o.seen = od.GC
		}
		if od.Retired > o.seen {
			o.seen = od.Retired
		}
		origins[name] = o
	}
	return origins, nil
}

// presize sizes each origin's name maps from the snapshot: a million
// entries inserted into growing maps would rehash each map about twenty
// times.
func presize(origins map[string]*originState, entries []Entry) {
	var o *originState
	var counts [numKinds]int
	flush := func() {
		for k, n := range counts {
			if o != nil && n > len(o.byName[k]) {
				o.byName[k] = make(map[string]*record, n)
			}
		}
		counts = [numKinds]int{}
	}
	for i := range entries {
		e := &entries[i]
		if o == nil || e.Origin != o.name {
			flush()
			o = origins[e.Origin]
		}
		if e.Kind.Valid() {
			counts[e.Kind-1]++
		}
	}
	flush()
}

// restoreEntry validates one restored entry against its origin and
// inserts it.
func restoreEntry(origins map[string]*originState, e *Entry) error {
	if err := ValidateEntry(e); err != nil {
		return fmt.Errorf("crdt: restore: %w", err)
	}
	o := origins[e.Origin]
	if o == nil {
		return invalidf("restore: entry %s of an origin missing from the digest", e.Key)
	}
	if e.Version <= o.retired {
		return invalidf("restore: entry %s version %s is retired (<= %s)", e.Key, e.Version, o.retired)
	}
	if e.Deleted && e.Version <= o.gc && !o.stale() {
		return invalidf("restore: tombstone %s version %s is below GC %s", e.Key, e.Version, o.gc)
	}
	if o.lookup(e.Kind, e.Name) != nil {
		return invalidf("restore: duplicate entry %s", e.Key)
	}
	o.insert(newRecord(e))
	if e.Version > o.seen {
		o.seen = e.Version
	}
	return nil
}
