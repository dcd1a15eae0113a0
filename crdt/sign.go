package crdt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Origin signatures (docs/SECURITY.md). Every version of an origin's entries
// and every watermark an origin asserts (its head, GC and retirement) is
// signed by that origin's writer with its Ed25519 key. The signatures are
// detached from the messages that carry them and stored with the state, so
// relays forward them unchanged on every path (push, pull, reset,
// anti-entropy rebuilt from state) and cannot forge or alter them.
//
// The package stays pure: it computes the signed messages and asks an
// injected Signer / Verifier (which own the keys and the pins) to sign or
// check them.

// SigSize is the size of an origin signature (Ed25519).
const SigSize = 64

// KeySize is the size of an origin public key (Ed25519).
const KeySize = 32

// Signer signs records of the local origin.
type Signer interface {
	// PublicKey is the key receivers verify with.
	PublicKey() []byte
	// Sign returns a SigSize signature over msg.
	Sign(msg []byte) []byte
}

// Verifier checks that origin signed msg. key is the public key the message
// presented (nil when none was carried); the Verifier decides whether it is
// the origin's key (pins, trust bundle) and returns a *TrustError if not.
type Verifier interface {
	Verify(origin string, key, msg, sig []byte) error
	// Key returns the key this replica trusts for origin (nil if none), to
	// forward with relayed records.
	Key(origin string) []byte
}

// RetireAuthority reports whether this replica's own membership view allows
// retiring origin without its signature: no live member of it has been seen
// for the reconnect timeout.
type RetireAuthority func(origin string) bool

// Reasons of a TrustError, used as the drop reason label in metrics.
const (
	ReasonBadSignature      = "bad_signature"
	ReasonUnsigned          = "unsigned"
	ReasonUnprovenWatermark = "unproven_watermark"
	ReasonUnprovenReset     = "unproven_reset"
	ReasonOriginLimit       = "origin_limit"
	ReasonEntryLimit        = "entry_limit"
	ReasonByteLimit         = "byte_limit"
	ReasonRetireRefused     = "retire_refused"
	ReasonKeyMismatch       = "key_mismatch"
	ReasonUnknownKey        = "unknown_key"
	// ReasonCompletenessMismatch: a replica that received everything up to
	// the head of its origin's signed state mark does not reproduce the
	// signed state digest (a relay left a hole or resurrected a collected
	// key). The watermark does not move; the replica asks again from its
	// proven watermark (issue 29, item 1).
	ReasonCompletenessMismatch = "completeness_mismatch"
)

// ErrUntrusted wraps every TrustError.
var ErrUntrusted = errors.New("crdt: untrusted input")

// TrustError is returned when input is not backed by its origin's signature.
type TrustError struct {
	Reason string
	Origin string
	Detail string
}

func (e *TrustError) Error() string {
	return fmt.Sprintf("crdt: untrusted input from origin %q (%s): %s", e.Origin, e.Reason, e.Detail)
}

func (e *TrustError) Unwrap() error { return ErrUntrusted }

func trustErr(reason, origin, format string, args ...any) error {
	return &TrustError{Reason: reason, Origin: origin, Detail: fmt.Sprintf(format, args...)}
}

// TrustReason returns the reason of a TrustError in err's chain ("" if none).
func TrustReason(err error) string {
	var te *TrustError
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}

// MarkKind is the kind of a watermark an origin asserts.
type MarkKind uint8

const (
	// MarkHead asserts that the origin has written versions up to this one.
	MarkHead MarkKind = 1
	// MarkGC is the origin's tombstone GC watermark.
	MarkGC MarkKind = 2
	// MarkRetire asserts that the origin retires its versions up to this one.
	MarkRetire MarkKind = 3
)

const (
	domainEntry   = "coastguard/entry/v1\x00"
	domainMark    = "coastguard/mark/v1\x00"
	domainEndorse = "coastguard/endorse/v1\x00"
	domainState   = "coastguard/state-mark/v1\x00"
)

// EndorseSize is the size of a key endorsement: the previous public key and
// its signature of EndorseMessage.
const EndorseSize = KeySize + SigSize

// EndorseMessage is what an origin's previous key signs to hand its
// authority over to newKey (key rotation, docs/SECURITY.md).
func EndorseMessage(origin string, newKey []byte) []byte {
	b := make([]byte, 0, len(domainEndorse)+len(origin)+2+len(newKey))
	b = append(b, domainEndorse...)
	b = appendLenString(b, origin)
	return append(b, newKey...)
}

// EndorsingSigner is a Signer whose key was rotated: it carries the
// endorsement of its key by the previous one, sent with the origin's
// deltas so that receivers trusting the previous key re-pin.
type EndorsingSigner interface {
	Endorsement() []byte
}

// Rotator is a Verifier that accepts endorsed key rotations.
type Rotator interface {
	// Endorse checks that endorsement (EndorseSize bytes) is origin's
	// trusted key signing newKey over, and if so trusts newKey from now on.
	Endorse(origin string, newKey, endorsement []byte) error
	// Endorsement is the endorsement of origin's trusted key, if it was
	// rotated in (nil otherwise), to forward with relayed deltas.
	Endorsement(origin string) []byte
	// Predecessor reports whether key is origin's previous key, replaced
	// by an endorsed rotation: records it signed stay valid, so relays that
	// have not re-pinned yet are not refused.
	Predecessor(origin string, key []byte) bool
}

func appendLenString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// EntrySigMessage is the message an origin signs for one entry version:
// domain, origin, kind, name, version, tombstone flag, stamp and the
// SHA-256 of the value.
func EntrySigMessage(e *Entry) []byte {
	return appendEntrySigMessage(make([]byte, 0, len(domainEntry)+len(e.Origin)+len(e.Name)+64), e)
}

func appendEntrySigMessage(b []byte, e *Entry) []byte {
	b = append(b, domainEntry...)
	b = appendLenString(b, e.Origin)
	b = append(b, byte(e.Kind))
	b = appendLenString(b, e.Name)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Version))
	if e.Deleted {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(e.Stamp))
	h := sha256.Sum256(e.Value)
	return append(b, h[:]...)
}

// MarkSigMessage is the message an origin signs for one of its watermarks.
func MarkSigMessage(origin string, kind MarkKind, v Version) []byte {
	b := make([]byte, 0, len(domainMark)+len(origin)+16)
	b = append(b, domainMark...)
	b = appendLenString(b, origin)
	b = append(b, byte(kind))
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

// StateMark is an origin's signed statement of its whole state: at Head,
// with tombstones up to GC collected and versions up to Retired retired
// (a takeover's seal), its stored records have the completeness digest
// Hash (sethash.go). A replica with a verifier moves its
// watermark to Head only when its own records at or below Head, at the
// same GC and retirement watermarks, have that digest (issue 29, item 1:
// a signature per entry does not sign a delta's range).
type StateMark struct {
	Head    Version
	GC      Version
	Retired Version
	Hash    []byte // StateHashSize bytes
	// HeadEntry is SegmentHash of the record at Head (its EntrySigMessage
	// and signature) when the origin held one, else nil: a delta that
	// carries that record with the mark needs one verification, the
	// mark's, not two.
	HeadEntry []byte
	Sig       []byte // over StateSigMessage
}

// IsZero reports whether m carries no mark.
func (m *StateMark) IsZero() bool {
	return m.Head == 0 && m.Sig == nil && m.Hash == nil && m.HeadEntry == nil
}

// boundsRetirement reports whether m is what lets a receiver accept the
// signed retirement d relays: accepted only up to a version the origin
// signed (verifyWatermarks), which d's mark does not reach. A takeover's
// seal carries a mark at the new epoch; a relay that could not reproduce
// it still holds it (next), and without it a replica below the seal would
// refuse the retirement on every round.
func (m *StateMark) boundsRetirement(d *Delta) bool {
	// Only where the retirement covers the whole stream: the mark of a
	// stream that ends above it (or of a reset) is what proves its end.
	return len(d.RetiredSig) > 0 && !d.Reset && d.To <= d.Retired && d.Mark.Head < d.Retired && m.Head >= d.Retired
}

// newer reports whether m is a later mark of its origin than o: heads, GC
// and retirement watermarks only grow at the origin, so (Head, GC,
// Retired) orders its marks.
func (m *StateMark) newer(o *StateMark) bool {
	if len(m.Sig) == 0 {
		return false
	}
	if len(o.Sig) == 0 {
		return true
	}
	switch {
	case m.Head != o.Head:
		return m.Head > o.Head
	case m.GC != o.GC:
		return m.GC > o.GC
	}
	return m.Retired > o.Retired
}

func (m *StateMark) validate(origin string) error {
	if m.IsZero() && m.GC == 0 && m.Retired == 0 {
		return nil
	}
	switch {
	case m.Head == 0:
		return invalidf("state mark of %s at version 0", origin)
	case m.GC > m.Head:
		return invalidf("state mark of %s: gc %s above head %s", origin, m.GC, m.Head)
	case len(m.Hash) != StateHashSize:
		return invalidf("state mark of %s: hash of %d bytes", origin, len(m.Hash))
	case len(m.Sig) != SigSize:
		return invalidf("state mark of %s: signature of %d bytes", origin, len(m.Sig))
	case len(m.HeadEntry) != 0 && len(m.HeadEntry) != StateHashSize:
		return invalidf("state mark of %s: head entry hash of %d bytes", origin, len(m.HeadEntry))
	}
	return nil
}

// StateSigMessage is the message an origin signs for a state mark.
func StateSigMessage(origin string, m *StateMark) []byte {
	b := make([]byte, 0, len(domainState)+len(origin)+2+16+StateHashSize)
	b = append(b, domainState...)
	b = appendLenString(b, origin)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Head))
	b = binary.BigEndian.AppendUint64(b, uint64(m.GC))
	b = binary.BigEndian.AppendUint64(b, uint64(m.Retired))
	b = append(b, m.Hash...)
	b = append(b, byte(len(m.HeadEntry)))
	return append(b, m.HeadEntry...)
}

// Proof is what a replica holds to justify an origin's watermarks to
// others: the origin's highest signed head and the signatures of its GC
// and retirement watermarks (RetiredSig is nil when the retirement was
// decided by membership, see RetireAuthority), and the state mark that
// proves its watermark (a writer's: its newest; a replica without a
// verifier: the newest it was given, unchecked).
type Proof struct {
	Head       Version
	HeadSig    []byte
	GCSig      []byte
	RetiredSig []byte
	Mark       StateMark
}

// SetSigner makes Write, CollectGarbage, SealPriorEpochs and own
// retirements sign what they produce.
func (s *State) SetSigner(sg Signer) {
	s.signer = sg
	if sg != nil {
		s.enableCompleteness()
	}
}

// SetVerifier makes Apply and ApplyRetire refuse everything its origin did
// not sign (nil: trust every input, for tests and --insecure-gossip).
// authority may be nil (never retire without the origin's signature).
func (s *State) SetVerifier(v Verifier, authority RetireAuthority) {
	s.verifier, s.authority = v, authority
	if v != nil {
		s.enableCompleteness()
	}
}

// Proof returns what this replica holds to justify origin's watermarks.
func (s *State) Proof(origin string) Proof {
	o := s.origins[origin]
	if o == nil {
		return Proof{}
	}
	return o.proof
}

// RestoreProofs installs persisted proofs after Restore (not re-verified:
// they were verified before they were persisted).
func (s *State) RestoreProofs(p map[string]Proof) {
	for name, pr := range p {
		if o := s.origins[name]; o != nil {
			o.proof = pr
			if pr.Head > o.seen {
				o.seen = pr.Head
			}
			if pr.Mark.Head > o.seen {
				o.seen = pr.Mark.Head
			}
		}
	}
}

// signState signs a state mark of our own origin after its state changed
// (a write, a GC, a retirement): at its highest version, over every record
// it holds.
func (s *State) signState(o *originState) {
	if s.signer == nil || o.name != s.self {
		return
	}
	head := max(o.max, o.top())
	if head == 0 {
		return
	}
	h := o.stateDigest(head)
	m := StateMark{Head: head, GC: o.gc, Retired: o.retired, Hash: h[:]}
	if r, ok := o.byVer.Max(); ok && r.version == head {
		eh := SegmentHash([]Entry{o.entry(r)})
		m.HeadEntry = eh[:]
	}
	m.Sig = s.signer.Sign(StateSigMessage(o.name, &m))
	o.proof.Mark = m
}

func (s *State) signMark(o *originState, kind MarkKind, v Version) []byte {
	if s.signer == nil || o.name != s.self {
		return nil
	}
	return s.signer.Sign(MarkSigMessage(o.name, kind, v))
}

// SignRetire signs a retirement of our own origin (nil signer: unchanged).
func (s *State) SignRetire(r Retire) Retire {
	if s.signer != nil && r.Origin == s.self && s.self != "" {
		r.Sig = s.signer.Sign(MarkSigMessage(r.Origin, MarkRetire, r.UpTo))
		r.Key = s.signer.PublicKey()
	}
	return r
}

func (s *State) attachProof(o *originState, d *Delta) {
	d.Head, d.HeadSig = o.proof.Head, o.proof.HeadSig
	if n := len(d.Entries); n > 0 && d.Entries[n-1].Version >= d.To {
		// The last entry's own signature proves To: save 75 bytes.
		d.Head, d.HeadSig = 0, nil
	}
	if d.GC == o.gc {
		d.GCSig = o.proof.GCSig
	}
	if d.Retired == o.retired {
		d.RetiredSig = o.proof.RetiredSig
	}
	// The mark proving our watermark lets a receiver prove a stream that
	// ends there; entries above it (a gap delta) go with the newest mark,
	// and so does a delta when that mark is at or below our watermark (a
	// retirement moved it: the mark still proves its head), or when it is
	// the only signed version at or above the signed retirement the delta
	// relays (a takeover's seal we could not prove: finding 18).
	d.Mark = o.proof.Mark
	if len(o.next.Sig) > 0 && (d.To > o.max || o.next.Head <= o.max || o.next.boundsRetirement(d)) {
		d.Mark = o.next
	}
	switch {
	case s.signer != nil && o.name == s.self:
		d.Key = s.signer.PublicKey()
		if es, ok := s.signer.(EndorsingSigner); ok {
			d.Endorse = es.Endorsement()
		}
	case s.verifier != nil:
		d.Key = s.verifier.Key(o.name)
		if r, ok := s.verifier.(Rotator); ok && d.Key != nil {
			d.Endorse = r.Endorsement(o.name)
		}
	}
}

// verifyDelta checks, before anything changes, that every entry that could
// change our state and every watermark that would move is backed by the
// origin's signature. It returns the proof to keep and the delta's state
// mark when it is verified and could prove something (advance).
func (s *State) verifyDelta(o *originState, d *Delta) (Proof, *StateMark, error) {
	p, cand, err := s.verifyDeltaSigs(o, d)
	if err != nil {
		return o.proof, nil, err
	}
	return p, cand, nil
}

func (s *State) verifyDeltaSigs(o *originState, d *Delta) (Proof, *StateMark, error) {
	p := o.proof
	var cand *StateMark
	if s.verifier == nil {
		// Trusting every input, a replica still keeps and relays the
		// origin's newest state mark, as it stores and relays entry
		// signatures it does not check: verifying replicas need it.
		if d.Mark.newer(&p.Mark) {
			p.Mark = d.Mark
		}
		return p, nil, nil
	}
	v := s.verifier
	if err := s.checkKey(d.Origin, d.Key, d.Endorse); err != nil {
		return p, nil, err
	}
	if err := s.checkPredecessor(o, d); err != nil {
		return p, nil, err
	}
	bound := o.seen
	if d.Head > bound {
		if err := v.Verify(d.Origin, d.Key, MarkSigMessage(d.Origin, MarkHead, d.Head), d.HeadSig); err != nil {
			return p, nil, err
		}
		bound = d.Head
		p.Head, p.HeadSig = d.Head, d.HeadSig
	}
	bound, err := s.verifyEntries(o, d, &p, bound)
	if err != nil {
		return p, nil, err
	}
	if d.Mark.newer(&p.Mark) && !s.predecessor(d.Origin, d.Key) {
		// The origin's signed state at its head: a proof of the head
		// itself, and what a watermark must reproduce to move (advance).
		// A relay presenting the rotated-out key still relays its
		// entries, but its marks prove nothing: the successor's do.
		if !sameMark(&d.Mark, &o.lastMark) && !sameMark(&d.Mark, &o.next) {
			if err := v.Verify(d.Origin, d.Key, StateSigMessage(d.Origin, &d.Mark), d.Mark.Sig); err != nil {
				return p, nil, err
			}
		}
		m := d.Mark
		cand = &m
		bound = max(bound, d.Mark.Head)
	}
	if bound, err = s.verifyWatermarks(o, d, &p, bound); err != nil {
		return p, nil, err
	}
	if d.To > bound && d.To > o.max {
		return p, nil, trustErr(ReasonUnprovenWatermark, d.Origin, "watermark %s above the highest signed version %s", d.To, bound)
	}
	return p, cand, nil
}

// verifyEntries verifies the signatures of the entries of d that would
// change something (a checkpoint segment or the state mark vouches for
// some) and returns bound raised to the highest version proven.
func (s *State) verifyEntries(o *originState, d *Delta, p *Proof, bound Version) (Version, error) {
	v := s.verifier
	// A delta that is exactly a segment of the origin's checkpoint carries
	// the origin's own records (checkpoint.go): their signatures are
	// covered by the checkpoint's. A checkpoint also proves every version
	// up to its Max was written.
	cp := s.trustedCheckpoint(d.Origin)
	if cp != nil && (o.max >= cp.Max || d.From >= cp.Max) {
		cp = nil // nothing left to vouch for
	}
	vouched := s.checkpointMatch(cp, d)
	if cp != nil && d.To <= cp.Max {
		bound = max(bound, d.To)
	}
	headEntry := s.markVouchedEntry(o, p, d)
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Version <= o.retired {
			continue
		}
		if r := o.lookup(e.Kind, e.Name); r != nil && (!wins(e, r) || sameContent(e, r)) {
			continue // changes nothing: no need to verify (replays are cheap)
		}
		if !d.Reset && e.Version <= o.max {
			continue // ignored by applyNormal
		}
		if len(e.Sig) == 0 {
			return bound, trustErr(ReasonUnsigned, d.Origin, "entry %s version %s carries no signature", e.Key, e.Version)
		}
		switch {
		case vouched:
			s.cpStats.SkippedVerifies++
		case headEntry != nil && e.Version == d.Mark.Head && headEntryMatches(e, headEntry):
			// the state mark signed this very record (and its signature)
			s.cpStats.MarkVouched++
		default:
			if err := v.Verify(d.Origin, d.Key, EntrySigMessage(e), e.Sig); err != nil {
				return bound, err
			}
		}
		bound = max(bound, e.Version)
	}
	return bound, nil
}

// verifyWatermarks verifies d's GC and retirement watermarks above ours,
// records their signatures in p and returns bound raised by the GC.
func (s *State) verifyWatermarks(o *originState, d *Delta, p *Proof, bound Version) (Version, error) {
	v := s.verifier
	if d.GC > o.gc {
		if len(d.GCSig) == 0 {
			return bound, trustErr(ReasonUnsigned, d.Origin, "GC watermark %s is not signed", d.GC)
		}
		if err := v.Verify(d.Origin, d.Key, MarkSigMessage(d.Origin, MarkGC, d.GC), d.GCSig); err != nil {
			return bound, err
		}
		p.GCSig = d.GCSig
		bound = max(bound, d.GC)
	}
	if d.Retired > o.retired {
		if len(d.RetiredSig) > 0 {
			if err := v.Verify(d.Origin, d.Key, MarkSigMessage(d.Origin, MarkRetire, d.Retired), d.RetiredSig); err != nil {
				return bound, err
			}
			if d.Retired > bound {
				return bound, trustErr(ReasonUnprovenWatermark, d.Origin, "signed retirement %s above the highest signed version %s", d.Retired, bound)
			}
			p.RetiredSig = d.RetiredSig
		} else {
			if s.authority == nil || !s.authority(d.Origin) {
				return bound, trustErr(ReasonRetireRefused, d.Origin, "unsigned retirement %s of a cluster with live members", d.Retired)
			}
			if d.Retired > bound {
				return bound, trustErr(ReasonUnprovenWatermark, d.Origin, "retirement %s above the highest signed version %s", d.Retired, bound)
			}
			p.RetiredSig = nil
		}
	}
	return bound, nil
}

// verifyRetire checks a retirement before ApplyRetire merges it.
func (s *State) verifyRetire(o *originState, r *Retire) error {
	if s.verifier == nil || r.UpTo <= o.retired {
		return nil
	}
	if len(r.Sig) > 0 {
		if s.predecessor(r.Origin, r.Key) {
			return trustErr(ReasonKeyMismatch, r.Origin, "retirement %s signed by a rotated-out key: it may only endorse its successor", r.UpTo)
		}
		if err := s.verifier.Verify(r.Origin, r.Key, MarkSigMessage(r.Origin, MarkRetire, r.UpTo), r.Sig); err != nil {
			return err
		}
		if r.UpTo > o.seen {
			// Bounded by what the origin has signed (issue 29, item 7): a
			// leaked key cannot freeze the origin at 2^64-1.
			return trustErr(ReasonUnprovenWatermark, r.Origin, "signed retirement %s above the highest signed version %s", r.UpTo, o.seen)
		}
		o.proof.RetiredSig = r.Sig
		return nil
	}
	if s.authority == nil || !s.authority(r.Origin) {
		return trustErr(ReasonRetireRefused, r.Origin, "unsigned retirement %s of a cluster with live members", r.UpTo)
	}
	if r.UpTo > o.seen {
		return trustErr(ReasonUnprovenWatermark, r.Origin, "retirement %s above the highest signed version %s", r.UpTo, o.seen)
	}
	o.proof.RetiredSig = nil
	return nil
}

// verifyRetireMark checks the state mark a retirement carries (a seal's)
// and returns it when it could prove something (advance). A verified mark
// is the origin's own statement: its head counts as signed (o.seen).
func (s *State) verifyRetireMark(o *originState, r *Retire) (*StateMark, error) {
	if err := r.Mark.validate(r.Origin); err != nil {
		return nil, err
	}
	own := r.Origin == s.self
	if !r.Mark.newer(&o.proof.Mark) || (own && s.verifier == nil) {
		return nil, nil
	}
	if s.verifier == nil {
		o.proof.Mark = r.Mark // kept and relayed unchecked (see verifyDeltaSigs)
		return nil, nil
	}
	if s.predecessor(r.Origin, r.Key) {
		return nil, trustErr(ReasonKeyMismatch, r.Origin, "state mark signed by a rotated-out key: it may only endorse its successor")
	}
	if err := s.verifier.Verify(r.Origin, r.Key, StateSigMessage(r.Origin, &r.Mark), r.Mark.Sig); err != nil {
		return nil, err
	}
	if r.Mark.Head > o.seen {
		o.seen = r.Mark.Head
	}
	if own {
		// our own leader's seal, at a standby: its head is a version our
		// cluster signed, which the retirement may reach (it refused the
		// seal until the new epoch's entries arrived). As before, the mark
		// is not kept as our own origin's proof: that comes with the
		// writer's streams.
		return nil, nil
	}
	m := r.Mark
	return &m, nil
}

func sameMark(a, b *StateMark) bool {
	return a.Head == b.Head && a.GC == b.GC && a.Retired == b.Retired &&
		bytes.Equal(a.Hash, b.Hash) && bytes.Equal(a.HeadEntry, b.HeadEntry) && bytes.Equal(a.Sig, b.Sig)
}

// markVouchedEntry returns the head entry hash of d's mark when that mark
// is trusted for d: verified by this replica before (next, lastMark) or
// verified below in verifyDeltaSigs (a failure there refuses the whole
// delta). A persisted proof's mark is not taken as a vouch (it may date
// from a run without a verifier): its entry is verified itself.
func (s *State) markVouchedEntry(o *originState, p *Proof, d *Delta) []byte {
	m := &d.Mark
	if len(m.HeadEntry) != StateHashSize || len(m.Sig) == 0 || s.predecessor(d.Origin, d.Key) {
		return nil
	}
	if m.newer(&p.Mark) || sameMark(m, &o.next) || sameMark(m, &o.lastMark) {
		return m.HeadEntry
	}
	return nil
}

// predecessor reports whether key is origin's rotated-out key.
func (s *State) predecessor(origin string, key []byte) bool {
	rot, ok := s.verifier.(Rotator)
	return ok && len(key) > 0 && rot.Predecessor(origin, key)
}

// checkPredecessor limits a delta presenting origin's rotated-out key
// (issue 29, item 7). That key endorsed its successor; beyond that it signs
// nothing new: no head, GC or retirement watermark, and no entry of the
// successor's epoch or later (o.seen's epoch: the successor wrote it). Its
// entries of earlier epochs still verify, so a relay that has not seen the
// rotation is not refused, until the successor's seal retires them.
func (s *State) checkPredecessor(o *originState, d *Delta) error {
	if !s.predecessor(d.Origin, d.Key) {
		return nil
	}
	if d.Head > o.seen || d.GC > o.gc || (d.Retired > o.retired && len(d.RetiredSig) > 0) {
		return trustErr(ReasonKeyMismatch, d.Origin, "watermark signed by a rotated-out key: it may only endorse its successor")
	}
	cur := o.seen.Epoch()
	for i := range d.Entries {
		if e := &d.Entries[i]; e.Version > o.retired && e.Version.Epoch() >= cur {
			return trustErr(ReasonKeyMismatch, d.Origin, "entry %s version %s (epoch >= %d) signed by a rotated-out key", e.Key, e.Version, cur)
		}
	}
	return nil
}

// Limits bound what peers can make a replica hold (issue 15, attack 8).
// Zero means unlimited.
type Limits struct {
	// MaxOrigins bounds the origins (clusters) a replica tracks; deltas
	// and retirements of further origins are refused.
	MaxOrigins int
	// MaxEntriesPerOrigin bounds the entries (tombstones included) stored
	// per origin; a delta that would add keys beyond it is refused.
	MaxEntriesPerOrigin int
	// MaxBytesPerOrigin bounds the memory of one remote origin's stored
	// records (names, values, signatures and a fixed per-record overhead,
	// see RecordOverhead), and MaxBytes that of all remote origins
	// together; a delta that would grow past either is refused (issue 29:
	// entries counted, not bytes, let one origin hold 330-570 MiB).
	MaxBytesPerOrigin int
	MaxBytes          int
	// Known, when set, names the origins this replica knows independently
	// of gossip (the clusters of its trust bundle, its Submariner Cluster
	// objects, its own pins). A known origin always gets a slot and its
	// bytes never count against MaxBytes: MaxOrigins and MaxBytes bound
	// only the others, so origin IDs a key holder invents can fill those
	// pools but never keep a known cluster out (issue 29, item 6). Known is
	// called only when an origin is new, and must be cheap and pure.
	Known func(origin string) bool
}

// known reports whether origin is a known origin (Limits.Known).
func (l Limits) known(origin string) bool { return l.Known != nil && l.Known(origin) }

// refuseNewOrigin returns the origin_limit refusal for a new origin when
// the pool of unknown origins is full (nil for the own and known origins).
func (s *State) refuseNewOrigin(origin string) error {
	l := s.limits
	if l.MaxOrigins <= 0 || origin == s.self || l.known(origin) {
		return nil
	}
	n := 0
	for name := range s.origins {
		if name != s.self && !l.known(name) {
			n++
		}
	}
	if n >= l.MaxOrigins {
		return trustErr(ReasonOriginLimit, origin, "already holding %d origins not known independently of gossip (limit)", n)
	}
	return nil
}

// DefaultLimits are far above any real cluster set (tens of clusters,
// ~100k pods each, ~500 B a pod: ~50 MiB an origin), far below what breaks
// the digest (MaxDigestOrigins) or the pod's memory.
func DefaultLimits() Limits {
	return Limits{MaxOrigins: 1024, MaxEntriesPerOrigin: 1 << 20, MaxBytesPerOrigin: 128 << 20, MaxBytes: 384 << 20}
}

// RecordOverhead is the memory a stored record costs beyond its name,
// value and signature (struct, name index, version tree), for the byte
// limits.
const RecordOverhead = 160

func recBytes(r *record) int { return RecordOverhead + len(r.name) + len(r.data) }

// RemoteBytes is the memory of the records of every origin but our own
// and the known ones (the quantity Limits.MaxBytes bounds).
func (s *State) RemoteBytes() int {
	n := 0
	for name, o := range s.origins {
		if name != s.self && !s.limits.known(name) {
			n += o.bytes
		}
	}
	return n
}

// checkByteLimit refuses a delta that would take the origin's records past
// MaxBytesPerOrigin or all remote records past MaxBytes. It counts what the
// delta adds (new keys above the watermark, larger replacements) before
// anything is stored.
func (s *State) checkByteLimit(o *originState, d *Delta) error {
	l := s.limits
	if (l.MaxBytesPerOrigin <= 0 && l.MaxBytes <= 0) || d.Origin == s.self {
		return nil
	}
	added := 0
	for i := range d.Entries {
		e := &d.Entries[i]
		n := RecordOverhead + len(e.Name) + len(e.Value) + len(e.Sig)
		if r := o.byName[e.Kind-1][e.Name]; r == nil {
			if e.Version > o.max || d.Reset {
				added += n
			}
		} else if e.Version > r.version {
			added += max(0, n-recBytes(r))
		}
	}
	if added == 0 {
		return nil
	}
	if l.MaxBytesPerOrigin > 0 && o.bytes+added > l.MaxBytesPerOrigin {
		return trustErr(ReasonByteLimit, d.Origin, "origin holds %d bytes; %d more would pass the limit %d", o.bytes, added, l.MaxBytesPerOrigin)
	}
	if l.MaxBytes > 0 && !l.known(d.Origin) {
		if total := s.RemoteBytes(); total+added > l.MaxBytes {
			return trustErr(ReasonByteLimit, d.Origin, "remote origins hold %d bytes; %d more would pass the limit %d", total, added, l.MaxBytes)
		}
	}
	return nil
}

// SetLimits installs limits. The own origin is never limited.
func (s *State) SetLimits(l Limits) { s.limits = l }

func (s *State) checkEntryLimit(o *originState, d *Delta) error {
	max := s.limits.MaxEntriesPerOrigin
	if max <= 0 || d.Origin == s.self || o.count+len(d.Entries) <= max {
		return nil
	}
	added := 0
	for i := range d.Entries {
		if e := &d.Entries[i]; o.lookup(e.Kind, e.Name) == nil && e.Version > o.max {
			added++
		}
	}
	if o.count+added > max {
		return trustErr(ReasonEntryLimit, d.Origin, "origin holds %d entries; %d more would pass the limit %d", o.count, added, max)
	}
	return nil
}

// MarkCovers reports whether d's state mark signs entry e itself (e is
// the record at the mark's head: StateMark.HeadEntry), so that Apply
// verifies the mark instead of e when it trusts the mark. For callers that
// verify signatures ahead of Apply (store's pre-verifier).
func MarkCovers(d *Delta, e *Entry) bool {
	return len(d.Mark.HeadEntry) == StateHashSize && len(d.Mark.Sig) == SigSize &&
		e.Version == d.Mark.Head && headEntryMatches(e, d.Mark.HeadEntry)
}

func headEntryMatches(e *Entry, want []byte) bool {
	h := SegmentHash([]Entry{*e})
	return bytes.Equal(h[:], want)
}
