package crdt

import (
	"crypto/sha256"
	"crypto/sha3"
	"encoding/binary"
)

// Completeness digests (issue 29, item 1; docs/SECURITY.md).
//
// OriginDigest.Hash is a 64-bit wrapping sum: good enough to notice that
// two honest replicas differ, useless against someone choosing what a
// replica holds. An origin's writer therefore also signs, with its head, a
// collision-resistant digest of its whole state (StateMark), and a
// receiver only moves its watermark to a version whose signed digest its
// own state reproduces.
//
// The digest is an incremental set hash in the style of LtHash: every
// stored record (kind, name, version, tombstone flag) is expanded by
// SHAKE128 into setLanes 64-bit lanes, and a state's hash is the lane-wise
// sum, mod 2^64, over its records. Adding or removing a record is one
// expansion and setLanes additions, whatever the state's size, and the
// result does not depend on the order of updates. Finding two different
// sets with the same sum is a generalized birthday problem over 1344 bits
// (Wagner's k-tree algorithm costs at least 2^(2*sqrt(1344)) ~ 2^73 work
// and as many elements, for elements chosen freely), and here the elements
// cannot even be chosen: a replica only stores records its origin signed,
// so an attacker can only pick subsets of the origin's real history.
// 1344 bits is what one Keccak permutation yields (SHAKE128's rate, 168
// bytes): one permutation per update.
//
// Only a State that signs or verifies keeps the set hash (State.complete).

// setLanes is the number of 64-bit lanes of a set hash (1344 bits, one
// SHAKE128 block).
const setLanes = 21

// setHash is the lane-wise sum of the expansions of a set's elements.
type setHash [setLanes]uint64

const (
	domainSetElem  = "coastguard/set-elem/v1\x00"
	domainSetState = "coastguard/state/v1\x00"
)

// StateHashSize is the size of a state digest (SHA-256 of the set hash).
const StateHashSize = sha256.Size

// elemHasher expands set elements; it keeps its SHAKE state between calls
// (one per originState, which is never used concurrently).
type elemHasher struct {
	x   sha3.SHAKE
	buf []byte
	out [setLanes * 8]byte
	ok  bool
}

// lanes returns the expansion of one record.
func (eh *elemHasher) lanes(kind Kind, name string, v Version, deleted bool) *[setLanes * 8]byte {
	if !eh.ok {
		eh.x = *sha3.NewSHAKE128()
		eh.ok = true
	} else {
		eh.x.Reset()
	}
	b := eh.buf[:0]
	b = append(b, domainSetElem...)
	b = append(b, byte(kind))
	b = appendLenString(b, name)
	b = binary.BigEndian.AppendUint64(b, uint64(v))
	if deleted {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	eh.buf = b
	_, _ = eh.x.Write(b)
	_, _ = eh.x.Read(eh.out[:])
	return &eh.out
}

// add adds (sign = +1) or removes (sign = -1) one element.
func (h *setHash) add(eh *elemHasher, kind Kind, name string, v Version, deleted bool, remove bool) {
	out := eh.lanes(kind, name, v, deleted)
	for i := range h {
		x := binary.LittleEndian.Uint64(out[i*8:])
		if remove {
			h[i] -= x
		} else {
			h[i] += x
		}
	}
}

// digest is the 32-byte state digest an origin signs: SHA-256 over a
// domain, the set hash's lanes and the number of elements.
func (h *setHash) digest(count int) [StateHashSize]byte {
	b := make([]byte, 0, len(domainSetState)+setLanes*8+8)
	b = append(b, domainSetState...)
	for _, x := range h {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(count))
	return sha256.Sum256(b)
}

// stateAt returns the set hash and count of o's records with version <= v:
// the whole-state sum minus the few records above v (usually none).
func (o *originState) stateAt(v Version) (setHash, int) {
	h, n := o.strong, o.count
	o.byVer.AscendGreaterOrEqual(&record{version: v + 1}, func(r *record) bool {
		h.add(&o.eh, r.kind, r.name, r.version, r.deleted, true)
		n--
		return true
	})
	return h, n
}

// stateDigest is the completeness digest of o's records at or below v.
func (o *originState) stateDigest(v Version) [StateHashSize]byte {
	h, n := o.stateAt(v)
	return h.digest(n)
}
