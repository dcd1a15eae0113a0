package crdt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sort"
)

// Origin-signed segment checkpoints (docs/SECURITY.md, "Checkpoints").
//
// Verifying one Ed25519 signature per entry bounds a joining replica to
// ~15 k entries/s per core. A checkpoint lets an origin's writer vouch for
// its whole state with ONE signature: it cuts the records it holds at Max,
// in version order, into segments of at most SegmentEntries records (the
// version ranges (Bounds[i-1], Bounds[i]], Bounds[-1] = 0, last bound = Max)
// and signs the SHA-256 of each segment's records (their EntrySigMessage
// and their signature). A receiver that accepted the checkpoint (one
// Verify) and gets a delta whose range is exactly segment i and whose
// entries hash to Hashes[i] knows the origin held exactly those records,
// signatures included, so it skips their per-entry verification. Anything
// else (a relay holding newer records, other chunk bounds, a tampered
// entry or signature) does not match and is verified entry by entry, as
// without checkpoints: slower, never weaker.

// SegmentEntries is the number of records per checkpoint segment (more for
// origins of more than MaxCheckpointSegments*SegmentEntries records).
const SegmentEntries = 512

// MaxCheckpointSegments bounds the segments of one checkpoint (wire and
// memory: ~40 bytes each).
const MaxCheckpointSegments = 8192

const domainCheckpoint = "coastguard/checkpoint/v1\x00"

// Checkpoint is an origin's signed summary of its own state at Max.
type Checkpoint struct {
	Origin string
	Max    Version
	GC     Version
	// Bounds are the segments' upper version bounds, strictly increasing,
	// the last one Max.
	Bounds []Version
	// Hashes[i] is SegmentHash of the records of segment i.
	Hashes [][32]byte
	// Key is the public key the origin signed with; Endorse its rotation
	// endorsement (as in Delta); Sig the signature over
	// CheckpointSigMessage.
	Key     []byte
	Endorse []byte
	Sig     []byte
}

// CheckpointStats counts how deltas met accepted checkpoints.
type CheckpointStats struct {
	// Hits are deltas that matched a checkpoint segment; their entries'
	// per-entry verification was skipped (SkippedVerifies in total).
	Hits, SkippedVerifies uint64
	// Misses are deltas of an origin with a checkpoint that did not match
	// one (verified entry by entry).
	Misses uint64
	// MarkVouched are entries whose verification was skipped because the
	// delta's state mark (verified once) signed them (StateMark.HeadEntry).
	MarkVouched uint64
}

// CheckpointSigMessage is the message an origin signs for a checkpoint:
// domain, origin, Max, GC, the number of segments and each segment's bound
// and hash.
func CheckpointSigMessage(cp *Checkpoint) []byte {
	b := make([]byte, 0, len(domainCheckpoint)+len(cp.Origin)+24+len(cp.Bounds)*40)
	b = append(b, domainCheckpoint...)
	b = appendLenString(b, cp.Origin)
	b = binary.BigEndian.AppendUint64(b, uint64(cp.Max))
	b = binary.BigEndian.AppendUint64(b, uint64(cp.GC))
	b = binary.BigEndian.AppendUint32(b, uint32(len(cp.Bounds)))
	for i, v := range cp.Bounds {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
		if i < len(cp.Hashes) {
			b = append(b, cp.Hashes[i][:]...)
		}
	}
	return b
}

// segmentHasher hashes a segment's records: for each, in version order, its
// EntrySigMessage, then its signature with a length prefix.
type segmentHasher struct {
	buf []byte
	h   [32]byte
}

// SegmentHash is the hash a checkpoint holds for a segment of entries.
func SegmentHash(entries []Entry) [32]byte {
	var sh segmentHasher
	return sh.sum(entries)
}

func (sh *segmentHasher) sum(entries []Entry) [32]byte {
	h := sha256.New()
	for i := range entries {
		e := &entries[i]
		sh.buf = appendEntrySigMessage(sh.buf[:0], e)
		sh.buf = binary.AppendUvarint(sh.buf, uint64(len(e.Sig)))
		sh.buf = append(sh.buf, e.Sig...)
		_, _ = h.Write(sh.buf)
	}
	h.Sum(sh.h[:0])
	return sh.h
}

// ValidateCheckpoint checks a checkpoint's shape (not its signature).
func ValidateCheckpoint(cp *Checkpoint) error {
	if err := validOrigin(cp.Origin); err != nil {
		return err
	}
	n := len(cp.Bounds)
	switch {
	case cp.Max == 0:
		return invalidf("checkpoint %s: max 0", cp.Origin)
	case n == 0 || n > MaxCheckpointSegments:
		return invalidf("checkpoint %s: %d segments (want 1..%d)", cp.Origin, n, MaxCheckpointSegments)
	case len(cp.Hashes) != n:
		return invalidf("checkpoint %s: %d hashes for %d segments", cp.Origin, len(cp.Hashes), n)
	case cp.Bounds[n-1] != cp.Max:
		return invalidf("checkpoint %s: last bound %s is not max %s", cp.Origin, cp.Bounds[n-1], cp.Max)
	case cp.GC > cp.Max:
		return invalidf("checkpoint %s: gc %s above max %s", cp.Origin, cp.GC, cp.Max)
	case len(cp.Key) != 0 && len(cp.Key) != KeySize:
		return invalidf("checkpoint %s: key of %d bytes", cp.Origin, len(cp.Key))
	case len(cp.Endorse) != 0 && (len(cp.Endorse) != EndorseSize || len(cp.Key) != KeySize):
		return invalidf("checkpoint %s: endorsement of %d bytes (want %d, with a key)", cp.Origin, len(cp.Endorse), EndorseSize)
	}
	prev := Version(0)
	for _, v := range cp.Bounds {
		if v <= prev {
			return invalidf("checkpoint %s: bounds not strictly increasing at %s", cp.Origin, v)
		}
		prev = v
	}
	return nil
}

// ErrNoCheckpoint is returned by MakeCheckpoint when the state cannot be
// vouched for now: no signer, an observer, nothing written, or entries
// held above the contiguous watermark.
var ErrNoCheckpoint = errors.New("crdt: no checkpoint possible")

// MakeCheckpoint signs a checkpoint of our own origin's current state.
func (s *State) MakeCheckpoint() (Checkpoint, error) {
	if s.self == "" || s.signer == nil {
		return Checkpoint{}, ErrNoCheckpoint
	}
	o := s.origins[s.self]
	if o == nil || o.max == 0 || o.top() > o.max || o.rsID != 0 {
		return Checkpoint{}, ErrNoCheckpoint
	}
	per := max(SegmentEntries, (o.count+MaxCheckpointSegments-1)/MaxCheckpointSegments)
	if per > MaxDeltaEntries {
		return Checkpoint{}, ErrNoCheckpoint
	}
	cp := Checkpoint{Origin: s.self, Max: o.max, GC: o.gc, Key: s.signer.PublicKey()}
	if es, ok := s.signer.(EndorsingSigner); ok {
		cp.Endorse = es.Endorsement()
	}
	var sh segmentHasher
	seg := make([]Entry, 0, per)
	cut := func(bound Version) {
		cp.Bounds = append(cp.Bounds, bound)
		cp.Hashes = append(cp.Hashes, sh.sum(seg))
		seg = seg[:0]
	}
	o.byVer.Ascend(func(r *record) bool {
		if len(seg) == per {
			cut(seg[len(seg)-1].Version)
		}
		seg = append(seg, o.entry(r))
		return true
	})
	cut(o.max)
	cp.Sig = s.signer.Sign(CheckpointSigMessage(&cp))
	return cp, nil
}

// checkKey applies the key policy of verifyDelta to a key an origin's data
// presents: a key other than the trusted one is accepted only through an
// endorsed rotation or as the rotated-out predecessor.
func (s *State) checkKey(origin string, key, endorse []byte) error {
	v := s.verifier
	if len(key) == 0 {
		return nil
	}
	k := v.Key(origin)
	if k == nil || bytes.Equal(k, key) {
		return nil
	}
	rot, _ := v.(Rotator)
	switch {
	case rot != nil && len(endorse) > 0 && rot.Endorse(origin, key, endorse) == nil:
		// an endorsed rotation: key is trusted from now on
		return nil
	case rot != nil && rot.Predecessor(origin, key):
		// a relay that has not seen the rotation yet
		return nil
	}
	// A sender presenting another key for a pinned cluster is refused (and
	// reported) even when its data would be ignored anyway: that is how a
	// rogue claiming an ID is noticed.
	if err := v.Verify(origin, key, nil, nil); err != nil {
		return err
	}
	return trustErr(ReasonKeyMismatch, origin, "presented key differs from the trusted key")
}

// AcceptCheckpoint verifies cp's signature (one Verify, under the same key
// policy as deltas) and keeps it for cp.Origin if it is newer than the one
// held. Without a verifier, or for our own origin, it does nothing.
func (s *State) AcceptCheckpoint(cp Checkpoint) error {
	if err := ValidateCheckpoint(&cp); err != nil {
		return err
	}
	if s.verifier == nil || cp.Origin == s.self {
		return nil
	}
	if old := s.checkpoints[cp.Origin]; old != nil && old.Max >= cp.Max {
		return nil
	}
	if _, ok := s.origins[cp.Origin]; !ok && s.checkpoints[cp.Origin] == nil {
		if err := s.refuseNewOrigin(cp.Origin); err != nil {
			return err
		}
	}
	if len(cp.Sig) == 0 {
		return trustErr(ReasonUnsigned, cp.Origin, "checkpoint at %s is not signed", cp.Max)
	}
	if err := s.checkKey(cp.Origin, cp.Key, cp.Endorse); err != nil {
		return err
	}
	if s.predecessor(cp.Origin, cp.Key) {
		return trustErr(ReasonKeyMismatch, cp.Origin, "checkpoint signed by a rotated-out key: it may only endorse its successor")
	}
	if err := s.verifier.Verify(cp.Origin, cp.Key, CheckpointSigMessage(&cp), cp.Sig); err != nil {
		return err
	}
	c := cp
	if len(c.Key) == 0 {
		c.Key = s.verifier.Key(cp.Origin)
	}
	if s.checkpoints == nil {
		s.checkpoints = map[string]*Checkpoint{}
	}
	s.checkpoints[cp.Origin] = &c
	return nil
}

// dropPassedCheckpoint forgets o's checkpoint once o's watermark reached
// its Max: it has nothing left to vouch for.
func (s *State) dropPassedCheckpoint(o *originState) {
	if cp := s.checkpoints[o.name]; cp != nil && o.max >= cp.Max {
		delete(s.checkpoints, o.name)
	}
}

// CheckpointMax returns the Max of the checkpoint held for origin (0: none).
func (s *State) CheckpointMax(origin string) Version {
	if cp := s.checkpoints[origin]; cp != nil {
		return cp.Max
	}
	return 0
}

// CheckpointStats returns the counters of checkpoint use.
func (s *State) CheckpointStats() CheckpointStats { return s.cpStats }

// trustedCheckpoint returns origin's checkpoint if its key is still the
// trusted key (or the rotated-out predecessor), else nil.
func (s *State) trustedCheckpoint(origin string) *Checkpoint {
	cp := s.checkpoints[origin]
	if cp == nil || s.verifier == nil {
		return nil
	}
	if k := s.verifier.Key(origin); k != nil && !bytes.Equal(k, cp.Key) {
		if rot, ok := s.verifier.(Rotator); !ok || !rot.Predecessor(origin, cp.Key) {
			return nil
		}
	}
	return cp
}

// segmentOf returns the index of the segment (From, To] of cp, or -1.
func (cp *Checkpoint) segmentOf(from, to Version) int {
	i := sort.Search(len(cp.Bounds), func(i int) bool { return cp.Bounds[i] >= to })
	if i == len(cp.Bounds) || cp.Bounds[i] != to {
		return -1
	}
	lo := Version(0)
	if i > 0 {
		lo = cp.Bounds[i-1]
	}
	if lo != from {
		return -1
	}
	return i
}

// checkpointMatch reports whether d is exactly a segment of origin's
// trusted checkpoint (range and hash), so its entries are the origin's own
// records. It counts hits and misses for origins with a checkpoint.
func (s *State) checkpointMatch(cp *Checkpoint, d *Delta) bool {
	if cp == nil || len(d.Entries) == 0 {
		return false
	}
	i := -1
	if !d.Gap && len(d.Entries) <= MaxDeltaEntries {
		i = cp.segmentOf(d.From, d.To)
	}
	if i < 0 || SegmentHash(d.Entries) != cp.Hashes[i] {
		s.cpStats.Misses++
		return false
	}
	s.cpStats.Hits++
	return true
}

// Vouched reports whether a checkpoint this state holds vouches for d's
// entries (for callers that verify signatures ahead of Apply; counts
// nothing).
func (s *State) Vouched(d *Delta) bool {
	cp := s.trustedCheckpoint(d.Origin)
	if cp == nil || len(d.Entries) == 0 || d.Gap {
		return false
	}
	i := cp.segmentOf(d.From, d.To)
	return i >= 0 && SegmentHash(d.Entries) == cp.Hashes[i]
}
