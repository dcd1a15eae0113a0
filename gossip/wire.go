package gossip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Wire format of coastguard's own gossip messages (carried as memberlist user
// messages). Every message starts with:
//
//	type    u8
//	version u8   (wireVersion; decoders accept >= 1 and ignore trailing bytes,
//	              so a newer peer may append fields)
//	sender  uvarint length + bytes (memberlist node name, self-declared)
//
// followed by a type-specific body. Integers are uvarints, strings are
// length-prefixed. Every length is bounded before anything is allocated.
type msgType uint8

const (
	msgHeads     msgType = 1 // origin heads announcement (broadcast queue)
	msgPush      msgType = 2 // fresh deltas pushed by their writer (UDP)
	msgSyncReq   msgType = 3 // pull request: requester's digest for some origins
	msgSyncData  msgType = 4 // answer to msgSyncReq: deltas, chunked
	msgDigest    msgType = 5 // anti-entropy digest (also memberlist LocalState)
	msgRetire    msgType = 6 // retirements (broadcast queue)
	msgDigestSum msgType = 7 // anti-entropy: 64-bit hash of the sender's whole digest
	msgForward   msgType = 8 // fresh deltas relayed once by a receiver (push tree, forward.go)
)

const wireVersion = 1

func (t msgType) String() string {
	switch t {
	case msgHeads:
		return "heads"
	case msgPush:
		return "push"
	case msgSyncReq:
		return "sync_req"
	case msgSyncData:
		return "sync_data"
	case msgDigest:
		return "digest"
	case msgRetire:
		return "retire"
	case msgDigestSum:
		return "digest_sum"
	case msgForward:
		return "forward"
	case msgCheckpointReq:
		return "checkpoint_req"
	case msgCheckpoint:
		return "checkpoint"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Head announces that Sender holds Origin up to Max (contiguously).
type Head struct {
	Origin string
	Max    crdt.Version
}

// message is the decoded form of any coastguard gossip message.
type message struct {
	Type   msgType
	Sender string

	Heads  []Head       // msgHeads
	Beat   *beat        // msgHeads: an origin-signed heartbeat (beat.go)
	Deltas []crdt.Delta // msgPush, msgSyncData
	ID     uint64       // msgSyncReq, msgSyncData
	Final  bool         // msgSyncData: last chunk of this answer
	More   bool         // msgSyncData (final): answer was capped, ask again
	// Seq (msgSyncData): 1 + the chunk's index in its answer, so the
	// receiver applies chunks in order; 0 from a sender that predates it.
	Seq     uint64
	Reply   bool          // msgDigest: this is an answer, do not answer it
	Digest  crdt.Digest   // msgSyncReq, msgDigest
	Retires []crdt.Retire // msgRetire
	Sum     uint64        // msgDigestSum
	Ask     bool          // msgDigestSum: answer with your own digest sum

	Origin     string           // msgCheckpointReq
	Checkpoint *crdt.Checkpoint // msgCheckpoint
}

const (
	maxOriginLen   = 253
	maxDigestItems = 1 << 16
	maxRetireItems = 4096
)

var (
	errShort     = errors.New("truncated message")
	errTooLarge  = errors.New("message too large")
	errBadType   = errors.New("unknown message type")
	errBadLength = errors.New("length out of bounds")
)

// ---- encoding ----

type wbuf []byte

func (b *wbuf) uvarint(v uint64) { *b = binary.AppendUvarint(*b, v) }
func (b *wbuf) str(s string)     { b.uvarint(uint64(len(s))); *b = append(*b, s...) }
func (b *wbuf) bytes(p []byte)   { b.uvarint(uint64(len(p))); *b = append(*b, p...) }

func header(t msgType, sender string, sizeHint int) wbuf {
	b := make(wbuf, 0, 2+len(sender)+2+sizeHint)
	b = append(b, byte(t), wireVersion)
	b.str(sender)
	return b
}

func encodeHeads(sender string, heads []Head) []byte {
	b := header(msgHeads, sender, len(heads)*24)
	b.uvarint(uint64(len(heads)))
	for _, h := range heads {
		b.str(h.Origin)
		b.uvarint(uint64(h.Max))
	}
	return b
}

// encodeDeltaMsg encodes msgPush or msgSyncData from pre-encoded deltas.
func encodeDeltaMsg(t msgType, sender string, id uint64, final bool, encoded [][]byte) []byte {
	return encodeDeltaMsgFlags(t, sender, id, final, false, encoded)
}

// encodeSyncData encodes one chunk of a sync answer: seq is its index in
// the answer (sent as seq+1, after the deltas, where older decoders ignore
// it).
func encodeSyncData(sender string, id, seq uint64, final, more bool, encoded [][]byte) []byte {
	b := wbuf(encodeDeltaMsgFlags(msgSyncData, sender, id, final, more, encoded))
	b.uvarint(seq + 1)
	return b
}

func encodeDeltaMsgFlags(t msgType, sender string, id uint64, final, more bool, encoded [][]byte) []byte {
	n := 0
	for _, e := range encoded {
		n += len(e) + 4
	}
	b := header(t, sender, n+22) // room for encodeSyncData's seq
	if t == msgSyncData {
		b.uvarint(id)
		var f byte
		if final {
			f |= 1
		}
		if more {
			f |= 2
		}
		b = append(b, f)
	}
	b.uvarint(uint64(len(encoded)))
	for _, e := range encoded {
		b.bytes(e)
	}
	return b
}

func encodeDigestBody(b *wbuf, d crdt.Digest) {
	raw, err := crdt.EncodeDigest(d)
	if err != nil {
		// A digest we produced ourselves always encodes; keep the message
		// well-formed (empty digest) if the codec ever refuses.
		raw = nil
	}
	b.bytes(raw)
}

func encodeSyncReq(sender string, id uint64, want crdt.Digest) []byte {
	b := header(msgSyncReq, sender, len(want)*40+8)
	b.uvarint(id)
	encodeDigestBody(&b, want)
	return b
}

func encodeDigestMsg(sender string, reply bool, d crdt.Digest) []byte {
	b := header(msgDigest, sender, len(d)*40+4)
	if reply {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	encodeDigestBody(&b, d)
	return b
}

func encodeDigestSum(sender string, sum uint64, ask bool) []byte {
	b := header(msgDigestSum, sender, 11)
	b.uvarint(sum)
	if ask {
		b = append(b, 1)
	}
	return b
}

// digestSum hashes a digest deterministically (crdt's encoding sorts origins).
func digestSum(d crdt.Digest) uint64 {
	raw, err := crdt.EncodeDigest(d)
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	return h.Sum64()
}

func encodeRetires(sender string, rs []crdt.Retire) []byte {
	b := header(msgRetire, sender, len(rs)*24)
	b.uvarint(uint64(len(rs)))
	for _, r := range rs {
		b.str(r.Origin)
		b.uvarint(uint64(r.UpTo))
	}
	// Signature section (required; peers before it ignore it as trailing
	// bytes): each retirement's origin signature and presented key.
	b.uvarint(uint64(len(rs)))
	for _, r := range rs {
		b.bytes(r.Sig)
		b.bytes(r.Key)
	}
	return b
}

// ---- decoding ----

type rbuf struct {
	b   []byte
	err error
}

func (r *rbuf) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *rbuf) u8() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail(errShort)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *rbuf) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *rbuf) count(max int) int {
	v := r.uvarint()
	if r.err != nil {
		return 0
	}
	// every item takes at least one byte: a cheap guard against lying counts
	if v > uint64(max) || v > uint64(len(r.b)) {
		r.fail(errBadLength)
		return 0
	}
	return int(v)
}

func (r *rbuf) raw(max int) []byte {
	v := r.uvarint()
	if r.err != nil {
		return nil
	}
	if v > uint64(max) {
		r.fail(errBadLength)
		return nil
	}
	if v > uint64(len(r.b)) {
		r.fail(errShort)
		return nil
	}
	p := r.b[:v:v]
	r.b = r.b[v:]
	return p
}

func (r *rbuf) str(max int) string { return string(r.raw(max)) }

func (r *rbuf) digest() crdt.Digest {
	raw := r.raw(MaxMessageBytes)
	if r.err != nil {
		return nil
	}
	if len(raw) == 0 {
		return crdt.Digest{}
	}
	d, err := crdt.DecodeDigest(raw)
	if err != nil {
		r.fail(fmt.Errorf("digest: %w", err))
		return nil
	}
	if len(d) > maxDigestItems {
		r.fail(errBadLength)
		return nil
	}
	return d
}

// decodeMessage decodes and validates one coastguard gossip message. It never
// panics; every error means the message must be dropped.
func decodeMessage(p []byte) (*message, error) {
	if len(p) > MaxMessageBytes {
		return nil, errTooLarge
	}
	r := &rbuf{b: p}
	m := &message{Type: msgType(r.u8())}
	ver := r.u8()
	m.Sender = r.str(maxSenderName)
	if r.err != nil {
		return nil, r.err
	}
	if ver < 1 {
		return nil, fmt.Errorf("bad wire version %d", ver)
	}
	if m.Sender == "" {
		return nil, errors.New("empty sender")
	}
	switch m.Type {
	case msgHeads:
		m.Heads = r.heads()
		m.Beat = r.beatTrailer()
	case msgPush, msgSyncData, msgForward:
		if m.Type == msgSyncData {
			m.ID = r.uvarint()
			f := r.u8()
			m.Final, m.More = f&1 == 1, f&2 == 2
		}
		m.Deltas = r.deltas()
		if m.Type == msgSyncData && r.err == nil && len(r.b) > 0 {
			m.Seq = r.uvarint()
		}
	case msgSyncReq:
		m.ID = r.uvarint()
		m.Digest = r.digest()
	case msgDigest:
		m.Reply = r.u8()&1 == 1
		m.Digest = r.digest()
	case msgRetire:
		m.Retires = r.retires()
	case msgDigestSum:
		m.Sum = r.uvarint()
		// optional flags byte (absent from older senders; older receivers
		// ignore it)
		if r.err == nil && len(r.b) > 0 {
			m.Ask = r.u8()&1 == 1
		}
	case msgCheckpointReq:
		m.Origin = r.checkpointReq()
	case msgCheckpoint:
		m.Checkpoint = r.checkpoint()
	default:
		return nil, errBadType
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s: %w", m.Type, r.err)
	}
	return m, nil
}

func (r *rbuf) heads() []Head {
	n := r.count(maxHeadsPerMsg)
	hs := make([]Head, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		h := Head{Origin: r.str(maxOriginLen), Max: crdt.Version(r.uvarint())}
		if r.err == nil && h.Origin == "" {
			r.fail(errors.New("empty origin"))
		}
		hs = append(hs, h)
	}
	return hs
}

func (r *rbuf) deltas() []crdt.Delta {
	n := r.count(maxDeltasPerMsg)
	ds := make([]crdt.Delta, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		raw := r.raw(MaxMessageBytes)
		if r.err != nil {
			break
		}
		d, err := crdt.DecodeDelta(raw)
		if err != nil {
			r.fail(fmt.Errorf("delta %d: %w", i, err))
			break
		}
		ds = append(ds, d)
	}
	return ds
}

// retires reads the retirements, then one (possibly empty) signature and
// key per retirement.
func (r *rbuf) retires() []crdt.Retire {
	n := r.count(maxRetireItems)
	rs := make([]crdt.Retire, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		rt := crdt.Retire{Origin: r.str(maxOriginLen), UpTo: crdt.Version(r.uvarint())}
		if r.err == nil && rt.Origin == "" {
			r.fail(errors.New("empty origin"))
		}
		rs = append(rs, rt)
	}
	if r.err != nil {
		return rs
	}
	if k := r.count(maxRetireItems); r.err == nil && k != len(rs) {
		r.fail(fmt.Errorf("%d retire signatures for %d retirements", k, len(rs)))
	}
	for i := range rs {
		if r.err != nil {
			break
		}
		if sig := r.raw(crdt.SigSize); len(sig) > 0 {
			rs[i].Sig = bytes.Clone(sig)
		}
		if key := r.raw(crdt.KeySize); len(key) > 0 {
			rs[i].Key = bytes.Clone(key)
		}
	}
	return rs
}
