package crdt

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/vmihailenco/msgpack/v5"
)

// Wire format. Every message is one msgpack array whose first element is a
// format byte; decoders reject formats they do not know (a newer format is a
// new number, so an old peer fails loudly instead of misreading), reject
// trailing bytes, and validate everything before returning.
//
//	Delta:  [1, origin, from, to, gc, retired, flags, [entry...]]
//	        flags: 1 = Reset, 2 = Final, 4 = Gap
//	        entry: [kind, name, version, deleted, value(bin), stamp]
//	        (an entry's origin is the delta's)
//	Digest: [1, [[origin, max, hash, gc, retired, top, reset, gapHash]...]] sorted by origin
//	Retire: [1, origin, upTo] or, signed, [1, origin, upTo, sig, key]
//	A signed delta has 13 elements: [..., [entry...], head, headSig, gcSig,
//	retiredSig, key] and its entries 7: [..., stamp, sig] (sign.go); 14
//	with a key endorsement [..., endorse]; 20 with a state mark
//	[..., endorse (nil when none), markHead, markGC, markRetired,
//	markHash, markHeadEntry (nil when none), markSig]. Builds before
//	state marks refuse 20-element deltas (see
//	docs/ARCHITECTURE.md, "Completeness": upgrade every cluster together).
const (
	WireFormat = 1

	// MaxDeltaEntries bounds the entries of one delta on the wire and in Apply.
	MaxDeltaEntries = 4096
	// MaxDeltaBytes bounds an encoded delta (DeltaSince chunks stay far
	// below: DeltaChunkBytes plus one maximal value).
	MaxDeltaBytes = 8 << 20
	// MaxDigestOrigins bounds the origins of one digest.
	MaxDigestOrigins = 4096
	// MaxDigestBytes bounds an encoded digest.
	MaxDigestBytes = MaxDigestOrigins * (MaxOriginBytes + 64)
)

const (
	flagReset = 1 << 0
	flagFinal = 1 << 1
	flagGap   = 1 << 2
)

func wireErr(what string, err error) error {
	return fmt.Errorf("%w: decode %s: %v", ErrInvalid, what, err)
}

// EncodeDelta validates and encodes d.
func EncodeDelta(d Delta) ([]byte, error) {
	if err := ValidateDelta(&d); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	signed, n := deltaShape(&d)
	err := firstErr(
		enc.EncodeArrayLen(n),
		enc.EncodeUint8(WireFormat),
		enc.EncodeString(d.Origin),
		enc.EncodeUint64(uint64(d.From)),
		enc.EncodeUint64(uint64(d.To)),
		enc.EncodeUint64(uint64(d.GC)),
		enc.EncodeUint64(uint64(d.Retired)),
		enc.EncodeUint8(deltaFlags(&d)),
		enc.EncodeArrayLen(len(d.Entries)),
	)
	if err != nil {
		return nil, err
	}
	for i := range d.Entries {
		if err := encodeEntry(enc, &d.Entries[i], signed); err != nil {
			return nil, err
		}
	}
	if err := encodeDeltaTrailer(enc, &d, signed, n); err != nil {
		return nil, err
	}
	if buf.Len() > MaxDeltaBytes {
		return nil, fmt.Errorf("%w: encoded delta of %d bytes exceeds %d", ErrInvalid, buf.Len(), MaxDeltaBytes)
	}
	return buf.Bytes(), nil
}

// deltaFlags is the flags element of d's wire form.
func deltaFlags(d *Delta) uint8 {
	var flags uint8
	if d.Reset {
		flags |= flagReset
	}
	if d.Final {
		flags |= flagFinal
	}
	if d.Gap {
		flags |= flagGap
	}
	return flags
}

// deltaShape says whether d's wire form is signed and its element count:
// 8 unsigned, 13 signed, 14 with an endorsement, 20 with a state mark.
func deltaShape(d *Delta) (signed bool, n int) {
	signed = d.HeadSig != nil || d.GCSig != nil || d.RetiredSig != nil || d.Key != nil || d.Head != 0 || d.Endorse != nil
	for i := range d.Entries {
		signed = signed || d.Entries[i].Sig != nil
	}
	n = 8
	if signed {
		n = 13
	}
	if d.Endorse != nil {
		n = 14
	}
	if !d.Mark.IsZero() {
		signed, n = true, 20
	}
	return signed, n
}

// encodeEntry writes one entry: 6 elements, 7 with its signature.
func encodeEntry(enc *msgpack.Encoder, e *Entry, signed bool) error {
	en := 6
	if signed {
		en = 7
	}
	if err := firstErr(
		enc.EncodeArrayLen(en),
		enc.EncodeUint8(uint8(e.Kind)),
		enc.EncodeString(e.Name),
		enc.EncodeUint64(uint64(e.Version)),
		enc.EncodeBool(e.Deleted),
		enc.EncodeBytes(e.Value),
		enc.EncodeInt64(e.Stamp),
	); err != nil {
		return err
	}
	if signed {
		return enc.EncodeBytes(e.Sig)
	}
	return nil
}

// encodeDeltaTrailer writes what follows the entries in a signed delta of
// n elements: head and signatures, the endorsement, the state mark.
func encodeDeltaTrailer(enc *msgpack.Encoder, d *Delta, signed bool, n int) error {
	if signed {
		if err := firstErr(
			enc.EncodeUint64(uint64(d.Head)),
			enc.EncodeBytes(d.HeadSig),
			enc.EncodeBytes(d.GCSig),
			enc.EncodeBytes(d.RetiredSig),
			enc.EncodeBytes(d.Key),
		); err != nil {
			return err
		}
	}
	if n >= 14 {
		if err := enc.EncodeBytes(d.Endorse); err != nil {
			return err
		}
	}
	if n == 20 {
		return firstErr(
			enc.EncodeUint64(uint64(d.Mark.Head)),
			enc.EncodeUint64(uint64(d.Mark.GC)),
			enc.EncodeUint64(uint64(d.Mark.Retired)),
			enc.EncodeBytes(d.Mark.Hash),
			enc.EncodeBytes(d.Mark.HeadEntry),
			enc.EncodeBytes(d.Mark.Sig),
		)
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

type wireDecoder struct {
	r   *bytes.Reader
	dec *msgpack.Decoder
	err error
}

func newWireDecoder(b []byte) *wireDecoder {
	r := bytes.NewReader(b)
	return &wireDecoder{r: r, dec: msgpack.NewDecoder(r)}
}

func (w *wireDecoder) arrayLen(min, max int) int {
	if w.err != nil {
		return 0
	}
	n, err := w.dec.DecodeArrayLen()
	if err != nil {
		w.err = err
		return 0
	}
	if n < min || n > max {
		w.err = fmt.Errorf("array of %d elements, want %d..%d", n, min, max)
		return 0
	}
	return n
}

func (w *wireDecoder) u64() uint64 {
	if w.err != nil {
		return 0
	}
	c, err := w.dec.PeekCode()
	if err != nil {
		w.err = err
		return 0
	}
	// Only non-negative integers: reject negative fixints and signed codes
	// holding negative values (DecodeUint64 would wrap them).
	if c >= 0xe0 {
		w.err = fmt.Errorf("negative integer where unsigned expected")
		return 0
	}
	if c == 0xd0 || c == 0xd1 || c == 0xd2 || c == 0xd3 {
		v, err := w.dec.DecodeInt64()
		if err != nil {
			w.err = err
			return 0
		}
		if v < 0 {
			w.err = fmt.Errorf("negative integer where unsigned expected")
			return 0
		}
		return uint64(v)
	}
	v, err := w.dec.DecodeUint64()
	if err != nil {
		w.err = err
	}
	return v
}

func (w *wireDecoder) u8() uint8 {
	v := w.u64()
	if w.err == nil && v > 0xff {
		w.err = fmt.Errorf("value %d does not fit in a byte", v)
	}
	return uint8(v)
}

func (w *wireDecoder) i64() int64 {
	if w.err != nil {
		return 0
	}
	v, err := w.dec.DecodeInt64()
	if err != nil {
		w.err = err
	}
	return v
}

func (w *wireDecoder) boolean() bool {
	if w.err != nil {
		return false
	}
	v, err := w.dec.DecodeBool()
	if err != nil {
		w.err = err
	}
	return v
}

func (w *wireDecoder) str(max int) string {
	if w.err != nil {
		return ""
	}
	c, err := w.dec.PeekCode()
	if err != nil {
		w.err = err
		return ""
	}
	if !isStrCode(c) {
		w.err = fmt.Errorf("expected a string, got code 0x%02x", c)
		return ""
	}
	if n, ok := w.declaredLen(c); !ok || n > max || n > w.r.Len() {
		w.err = fmt.Errorf("string declares %d bytes (limit %d, %d left)", n, max, w.r.Len())
		return ""
	}
	s, err := w.dec.DecodeString()
	if err != nil {
		w.err = err
		return ""
	}
	if len(s) > max {
		w.err = fmt.Errorf("string of %d bytes exceeds %d", len(s), max)
		return ""
	}
	return s
}

func isStrCode(c byte) bool {
	return (c >= 0xa0 && c <= 0xbf) || c == 0xd9 || c == 0xda || c == 0xdb
}

func (w *wireDecoder) bin(max int) []byte {
	if w.err != nil {
		return nil
	}
	c, err := w.dec.PeekCode()
	if err != nil {
		w.err = err
		return nil
	}
	if c == 0xc0 { // nil
		_ = w.dec.Skip()
		return nil
	}
	if c != 0xc4 && c != 0xc5 && c != 0xc6 {
		w.err = fmt.Errorf("expected binary, got code 0x%02x", c)
		return nil
	}
	// Check the declared length against the limit and the bytes actually
	// left before the decoder allocates it.
	if n, ok := w.declaredLen(c); !ok || n > max || n > w.r.Len() {
		w.err = fmt.Errorf("binary declares %d bytes (limit %d, %d left)", n, max, w.r.Len())
		return nil
	}
	b, err := w.dec.DecodeBytes()
	if err != nil {
		w.err = err
		return nil
	}
	if len(b) > max {
		w.err = fmt.Errorf("binary of %d bytes exceeds %d", len(b), max)
		return nil
	}
	if len(b) == 0 {
		return nil
	}
	return b
}

// declaredLen reads the length of the bin/str value whose code c is next in
// the stream, without consuming anything.
func (w *wireDecoder) declaredLen(c byte) (int, bool) {
	pos := w.r.Size() - int64(w.r.Len())
	var size int
	switch c {
	case 0xc4, 0xd9:
		size = 1
	case 0xc5, 0xda:
		size = 2
	case 0xc6, 0xdb:
		size = 4
	default:
		return 0, true
	}
	var b [4]byte
	if n, _ := w.r.ReadAt(b[:size], pos+1); n != size {
		return 0, false
	}
	v := 0
	for _, x := range b[:size] {
		v = v<<8 | int(x)
	}
	return v, true
}

func (w *wireDecoder) format() {
	if f := w.u8(); w.err == nil && f != WireFormat {
		w.err = fmt.Errorf("unknown wire format %d (this build speaks %d)", f, WireFormat)
	}
}

func (w *wireDecoder) finish() error {
	if w.err != nil {
		return w.err
	}
	if w.r.Len() != 0 {
		return fmt.Errorf("%d trailing bytes", w.r.Len())
	}
	return nil
}

// DecodeDelta decodes and validates a delta. It never panics.
func DecodeDelta(b []byte) (Delta, error) {
	if len(b) > MaxDeltaBytes {
		return Delta{}, fmt.Errorf("%w: delta of %d bytes exceeds %d", ErrInvalid, len(b), MaxDeltaBytes)
	}
	w := newWireDecoder(b)
	dn := w.arrayLen(8, 20)
	if w.err == nil && dn != 8 && dn != 13 && dn != 14 && dn != 20 {
		w.err = fmt.Errorf("delta of %d elements, want 8, 13, 14 or 20", dn)
	}
	w.format()
	var d Delta
	d.Origin = w.str(MaxOriginBytes)
	d.From = Version(w.u64())
	d.To = Version(w.u64())
	d.GC = Version(w.u64())
	d.Retired = Version(w.u64())
	flags := w.u8()
	if w.err == nil && flags&^(flagReset|flagFinal|flagGap) != 0 {
		w.err = fmt.Errorf("unknown delta flags 0x%02x", flags)
	}
	d.Reset = flags&flagReset != 0
	d.Final = flags&flagFinal != 0
	d.Gap = flags&flagGap != 0
	n := w.arrayLen(0, MaxDeltaEntries)
	if n > 0 {
		d.Entries = make([]Entry, 0, n)
	}
	for i := 0; i < n && w.err == nil; i++ {
		d.Entries = append(d.Entries, w.entry(d.Origin))
	}
	w.deltaTrailer(&d, dn)
	if err := w.finish(); err != nil {
		return Delta{}, wireErr("delta", err)
	}
	if err := ValidateDelta(&d); err != nil {
		return Delta{}, err
	}
	return d, nil
}

// entry reads one entry of origin (6 elements, 7 with its signature).
func (w *wireDecoder) entry(origin string) Entry {
	en := w.arrayLen(6, 7)
	var e Entry
	e.Origin = origin
	e.Kind = Kind(w.u8())
	e.Name = w.str(MaxNameBytes)
	e.Version = Version(w.u64())
	e.Deleted = w.boolean()
	e.Value = w.bin(MaxValueBytes)
	e.Stamp = w.i64()
	if en == 7 {
		e.Sig = w.bin(SigSize)
	}
	return e
}

// deltaTrailer reads what follows the entries of a delta of dn elements.
func (w *wireDecoder) deltaTrailer(d *Delta, dn int) {
	if dn >= 13 {
		d.Head = Version(w.u64())
		d.HeadSig = w.bin(SigSize)
		d.GCSig = w.bin(SigSize)
		d.RetiredSig = w.bin(SigSize)
		d.Key = w.bin(KeySize)
	}
	if dn >= 14 {
		d.Endorse = w.bin(EndorseSize)
	}
	if dn == 20 {
		d.Mark.Head = Version(w.u64())
		d.Mark.GC = Version(w.u64())
		d.Mark.Retired = Version(w.u64())
		d.Mark.Hash = w.bin(StateHashSize)
		d.Mark.HeadEntry = w.bin(StateHashSize)
		d.Mark.Sig = w.bin(SigSize)
	}
}

// EncodeDigest encodes a digest (origins sorted, so equal digests encode
// equally).
func EncodeDigest(d Digest) ([]byte, error) {
	if len(d) > MaxDigestOrigins {
		return nil, fmt.Errorf("%w: digest of %d origins exceeds %d", ErrInvalid, len(d), MaxDigestOrigins)
	}
	names := make([]string, 0, len(d))
	for n := range d {
		if err := validOrigin(n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := firstErr(enc.EncodeArrayLen(2), enc.EncodeUint8(WireFormat), enc.EncodeArrayLen(len(names))); err != nil {
		return nil, err
	}
	for _, n := range names {
		od := d[n]
		if err := firstErr(
			enc.EncodeArrayLen(8),
			enc.EncodeString(n),
			enc.EncodeUint64(uint64(od.Max)),
			enc.EncodeUint64(od.Hash),
			enc.EncodeUint64(uint64(od.GC)),
			enc.EncodeUint64(uint64(od.Retired)),
			enc.EncodeUint64(uint64(od.Top)),
			enc.EncodeUint64(uint64(od.Reset)),
			enc.EncodeUint64(od.GapHash),
		); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// DecodeDigest decodes a digest, rejecting duplicate or invalid origins.
func DecodeDigest(b []byte) (Digest, error) {
	if len(b) > MaxDigestBytes {
		return nil, fmt.Errorf("%w: digest of %d bytes exceeds %d", ErrInvalid, len(b), MaxDigestBytes)
	}
	w := newWireDecoder(b)
	w.arrayLen(2, 2)
	w.format()
	n := w.arrayLen(0, MaxDigestOrigins)
	d := make(Digest, n)
	for i := 0; i < n && w.err == nil; i++ {
		w.arrayLen(8, 8)
		name := w.str(MaxOriginBytes)
		var od OriginDigest
		od.Max = Version(w.u64())
		od.Hash = w.u64()
		od.GC = Version(w.u64())
		od.Retired = Version(w.u64())
		od.Top = Version(w.u64())
		od.Reset = Version(w.u64())
		od.GapHash = w.u64()
		if w.err != nil {
			break
		}
		if err := validOrigin(name); err != nil {
			return nil, err
		}
		if _, dup := d[name]; dup {
			return nil, fmt.Errorf("%w: digest lists origin %q twice", ErrInvalid, name)
		}
		d[name] = od
	}
	if err := w.finish(); err != nil {
		return nil, wireErr("digest", err)
	}
	return d, nil
}
