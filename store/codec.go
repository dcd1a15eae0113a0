package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Bucket names. Every bucket is top level; see docs/ARCHITECTURE.md, "Store".
var (
	bucketMeta    = []byte("meta")    // schema version, self, writer epoch/version
	bucketEntries = []byte("entries") // (origin, kind, name) -> record
	bucketOrigins = []byte("origins") // (origin) -> digest record

	allBuckets = [][]byte{bucketMeta, bucketEntries, bucketOrigins}

	// legacyBuckets are the prefix-index buckets of earlier builds (always
	// empty in production, where the indexes were never turned on). They are
	// still created empty so that the previous release, which refuses a file
	// without them as corrupt, can open a file this build created (rollback);
	// drop them with the next schema version.
	legacyBuckets = [][]byte{[]byte("ix_pod_ns"), []byte("ix_pod_lv"), []byte("ix_pod_lk"), []byte("ix_ns"), []byte("ix_policy")}

	metaSchema      = []byte("schema")
	metaSelf        = []byte("self")
	metaEpoch       = []byte("writer_epoch")
	metaLastVersion = []byte("writer_last_version")
	metaEntryCount  = []byte("entry_count") // size hint for load only
	metaClean       = []byte("clean")       // [1] after a clean Close
)

// entry record layout (value of bucketEntries):
//
//	[0]     flags (bit 0 = tombstone)
//	[1:9]   version, big endian
//	[9:17]  stamp, big endian two's complement
//	[17:21] CRC-32C over key, bytes [0:17] and the value
//	[21:]   value bytes (msgpack, opaque to the store)
//
// bbolt has no page checksums; the CRC lets a load detect a damaged record
// (bit rot, a torn page) that would otherwise decode into wrong content.
//
// With flag bit 1 (signed) set, the origin's signature (crdt.SigSize bytes)
// sits between the header and the value, covered by the CRC.
const (
	recHeader   = 21
	flagDeleted = 1
	flagSigned  = 2
)

// Buckets added for origin signatures (docs/SECURITY.md). They are created
// on first use, so files written before them open unchanged.
var (
	bucketProofs = []byte("proofs") // (origin) -> proof record
	bucketPins   = []byte("pins")   // (origin) -> pinned Ed25519 public key
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func recordCRC(key, rec []byte) uint32 {
	c := crc32.Update(0, castagnoli, key)
	c = crc32.Update(c, castagnoli, rec[:17])
	return crc32.Update(c, castagnoli, rec[recHeader:])
}

// digest record layout (value of bucketOrigins): Max, Hash, GC, Retired as
// four big-endian uint64.
const digestRecSize = 32

func entryKey(k crdt.Key) []byte {
	dst := make([]byte, 0, len(k.Origin)+len(k.Name)+1+3*termSize)
	dst = appendComponent(dst, k.Origin)
	dst = appendComponent(dst, string([]byte{byte(k.Kind)}))
	return appendComponent(dst, k.Name)
}

func decodeEntryKey(b []byte) (crdt.Key, error) {
	c, err := decodeKey(b, 3)
	if err != nil {
		return crdt.Key{}, err
	}
	if len(c[1]) != 1 {
		return crdt.Key{}, fmt.Errorf("%w: kind component of %d bytes", errBadKey, len(c[1]))
	}
	return crdt.Key{Origin: c[0], Kind: crdt.Kind(c[1][0]), Name: c[2]}, nil
}

func encodeRecord(key []byte, e *crdt.Entry) []byte {
	sig := 0
	if len(e.Sig) == crdt.SigSize {
		sig = crdt.SigSize
	}
	b := make([]byte, recHeader+sig+len(e.Value))
	if e.Deleted {
		b[0] = flagDeleted
	}
	if sig > 0 {
		b[0] |= flagSigned
		copy(b[recHeader:], e.Sig)
	}
	binary.BigEndian.PutUint64(b[1:9], uint64(e.Version))
	binary.BigEndian.PutUint64(b[9:17], uint64(e.Stamp))
	copy(b[recHeader+sig:], e.Value)
	binary.BigEndian.PutUint32(b[17:21], recordCRC(key, b))
	return b
}

// decodeRecord fills the non-key fields of e. e.Value aliases b. With key
// non-nil the record's CRC is verified.
func decodeRecord(key, b []byte, e *crdt.Entry) error {
	if len(b) < recHeader || b[0]&^(flagDeleted|flagSigned) != 0 ||
		(b[0]&flagSigned != 0 && len(b) < recHeader+crdt.SigSize) {
		return fmt.Errorf("store: malformed entry record (%d bytes)", len(b))
	}
	if key != nil && binary.BigEndian.Uint32(b[17:21]) != recordCRC(key, b) {
		return errors.New("store: entry record checksum mismatch")
	}
	e.Deleted = b[0]&flagDeleted != 0
	e.Version = crdt.Version(binary.BigEndian.Uint64(b[1:9]))
	e.Stamp = int64(binary.BigEndian.Uint64(b[9:17]))
	e.Value = b[recHeader:]
	e.Sig = nil
	if b[0]&flagSigned != 0 {
		e.Sig = b[recHeader : recHeader+crdt.SigSize]
		e.Value = b[recHeader+crdt.SigSize:]
	}
	return nil
}

// proof record layout (value of bucketProofs): head (8, big endian), then
// a flags byte (bit 0 head sig, bit 1 GC sig, bit 2 retired sig, bit 3
// state mark, bit 4 its head entry hash) and the present signatures in
// that order, then the state mark when present: head, GC, retired (8
// each), hash (32), signature, head entry hash (32, bit 4).
// Records written before state marks (bit 3 never set) load unchanged.
func encodeProof(p crdt.Proof) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(p.Head))
	var flags byte
	sigs := [][]byte{p.HeadSig, p.GCSig, p.RetiredSig}
	for i, s := range sigs {
		if len(s) == crdt.SigSize {
			flags |= 1 << i
		}
	}
	m := p.Mark
	hasMark := len(m.Sig) == crdt.SigSize && len(m.Hash) == crdt.StateHashSize
	if hasMark {
		flags |= 1 << 3
		if len(m.HeadEntry) == crdt.StateHashSize {
			flags |= 1 << 4
		}
	}
	b = append(b, flags)
	for _, s := range sigs {
		if len(s) == crdt.SigSize {
			b = append(b, s...)
		}
	}
	if hasMark {
		b = binary.BigEndian.AppendUint64(b, uint64(m.Head))
		b = binary.BigEndian.AppendUint64(b, uint64(m.GC))
		b = binary.BigEndian.AppendUint64(b, uint64(m.Retired))
		b = append(b, m.Hash...)
		b = append(b, m.Sig...)
		if flags&(1<<4) != 0 {
			b = append(b, m.HeadEntry...)
		}
	}
	return b
}

const markRecSize = 24 + crdt.StateHashSize + crdt.SigSize

func decodeProof(b []byte) (crdt.Proof, error) {
	if len(b) < 9 || b[8]&^31 != 0 || b[8]&(1<<4) != 0 && b[8]&(1<<3) == 0 {
		return crdt.Proof{}, fmt.Errorf("store: malformed proof record (%d bytes)", len(b))
	}
	p := crdt.Proof{Head: crdt.Version(binary.BigEndian.Uint64(b[:8]))}
	flags, rest := b[8], b[9:]
	dst := []*[]byte{&p.HeadSig, &p.GCSig, &p.RetiredSig}
	for i, d := range dst {
		if flags&(1<<i) == 0 {
			continue
		}
		if len(rest) < crdt.SigSize {
			return crdt.Proof{}, fmt.Errorf("store: truncated proof record (%d bytes)", len(b))
		}
		*d = slices.Clone(rest[:crdt.SigSize])
		rest = rest[crdt.SigSize:]
	}
	if flags&(1<<3) != 0 {
		if len(rest) < markRecSize {
			return crdt.Proof{}, fmt.Errorf("store: truncated proof record (%d bytes)", len(b))
		}
		p.Mark = crdt.StateMark{
			Head:    crdt.Version(binary.BigEndian.Uint64(rest[0:8])),
			GC:      crdt.Version(binary.BigEndian.Uint64(rest[8:16])),
			Retired: crdt.Version(binary.BigEndian.Uint64(rest[16:24])),
			Hash:    slices.Clone(rest[24 : 24+crdt.StateHashSize]),
			Sig:     slices.Clone(rest[24+crdt.StateHashSize : markRecSize]),
		}
		rest = rest[markRecSize:]
		if flags&(1<<4) != 0 {
			if len(rest) < crdt.StateHashSize {
				return crdt.Proof{}, fmt.Errorf("store: truncated proof record (%d bytes)", len(b))
			}
			p.Mark.HeadEntry = slices.Clone(rest[:crdt.StateHashSize])
			rest = rest[crdt.StateHashSize:]
		}
	}
	if len(rest) != 0 {
		return crdt.Proof{}, fmt.Errorf("store: proof record has %d trailing bytes", len(rest))
	}
	return p, nil
}

func encodeDigest(d crdt.OriginDigest) []byte {
	b := make([]byte, digestRecSize)
	binary.BigEndian.PutUint64(b[0:8], uint64(d.Max))
	binary.BigEndian.PutUint64(b[8:16], d.Hash)
	binary.BigEndian.PutUint64(b[16:24], uint64(d.GC))
	binary.BigEndian.PutUint64(b[24:32], uint64(d.Retired))
	return b
}

func decodeDigest(b []byte) (crdt.OriginDigest, error) {
	if len(b) != digestRecSize {
		return crdt.OriginDigest{}, fmt.Errorf("store: malformed digest record (%d bytes)", len(b))
	}
	return crdt.OriginDigest{
		Max:     crdt.Version(binary.BigEndian.Uint64(b[0:8])),
		Hash:    binary.BigEndian.Uint64(b[8:16]),
		GC:      crdt.Version(binary.BigEndian.Uint64(b[16:24])),
		Retired: crdt.Version(binary.BigEndian.Uint64(b[24:32])),
	}, nil
}

func u32(v uint32) []byte { b := make([]byte, 4); binary.BigEndian.PutUint32(b, v); return b }
func u64(v uint64) []byte { b := make([]byte, 8); binary.BigEndian.PutUint64(b, v); return b }

func beU32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func beU64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func sortStrings(s []string) { slices.Sort(s) }
