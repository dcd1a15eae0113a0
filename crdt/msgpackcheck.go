package crdt

import (
	"encoding/binary"
	"fmt"
)

// checkMsgpackLengths walks one msgpack value in b without allocating and
// rejects it if any declared length (string, binary, extension, array or
// map) exceeds the bytes left, or the value is truncated or followed by
// trailing bytes. Run before msgpack.Unmarshal, it keeps an 11-byte value
// that declares a 10-million-element array from making the decoder
// allocate for 10 million elements (issue 15, attack 8): every element
// takes at least one byte, so nothing can claim more than len(b).
func checkMsgpackLengths(b []byte) error {
	sc := lengthScanner{b: b}
	pending := 1 // values still to read
	for pending > 0 {
		if pending > len(b)-sc.i {
			return fmt.Errorf("crdt: value declares %d more elements than its %d bytes can hold", pending, len(b)-sc.i)
		}
		if err := sc.need(1); err != nil {
			return err
		}
		c := b[sc.i]
		sc.i++
		pending--
		skip, items, err := sc.head(c)
		if err != nil {
			return err
		}
		if err := sc.need(skip); err != nil {
			return err
		}
		sc.i += skip
		pending += items
	}
	if sc.i != len(b) {
		return fmt.Errorf("crdt: value has %d trailing bytes", len(b)-sc.i)
	}
	return nil
}

// lengthScanner walks a msgpack value's headers (checkMsgpackLengths).
type lengthScanner struct {
	b []byte
	i int // offset of the next byte
}

// need fails unless n more bytes are left.
func (sc *lengthScanner) need(n int) error {
	if n < 0 || n > len(sc.b)-sc.i {
		return fmt.Errorf("crdt: value declares %d bytes at offset %d, %d left", n, sc.i, len(sc.b)-sc.i)
	}
	return nil
}

// be reads an n-byte big-endian length, at most the value's size.
func (sc *lengthScanner) be(n int) (int, error) {
	if err := sc.need(n); err != nil {
		return 0, err
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(sc.b[sc.i])
	case 2:
		v = uint64(binary.BigEndian.Uint16(sc.b[sc.i:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(sc.b[sc.i:]))
	}
	sc.i += n
	if v > uint64(len(sc.b)) {
		return 0, fmt.Errorf("crdt: value declares length %d in %d bytes", v, len(sc.b))
	}
	return int(v), nil
}

// head decodes the header of code c (read at sc.i-1): the bytes of
// payload to skip and the number of nested values that follow.
func (sc *lengthScanner) head(c byte) (skip, items int, err error) {
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
	case c >= 0x80 && c <= 0x8f:
		items = 2 * int(c&0x0f)
	case c >= 0x90 && c <= 0x9f:
		items = int(c & 0x0f)
	case c >= 0xa0 && c <= 0xbf:
		skip = int(c & 0x1f)
	case c == 0xc4 || c == 0xd9:
		skip, err = sc.be(1)
	case c == 0xc5 || c == 0xda:
		skip, err = sc.be(2)
	case c == 0xc6 || c == 0xdb:
		skip, err = sc.be(4)
	case c >= 0xc7 && c <= 0xc9: // ext 8/16/32: length, then a type byte
		skip, err = sc.be(1 << (c - 0xc7))
		skip++
	case c == 0xca || c == 0xce || c == 0xd2:
		skip = 4
	case c == 0xcb || c == 0xcf || c == 0xd3:
		skip = 8
	case c == 0xcc || c == 0xd0:
		skip = 1
	case c == 0xcd || c == 0xd1:
		skip = 2
	case c >= 0xd4 && c <= 0xd8:
		skip = 1 + 1<<(c-0xd4)
	case c == 0xdc:
		items, err = sc.be(2)
	case c == 0xdd:
		items, err = sc.be(4)
	case c == 0xde:
		items, err = sc.be(2)
		items *= 2
	case c == 0xdf:
		items, err = sc.be(4)
		items *= 2
	default:
		return 0, 0, fmt.Errorf("crdt: invalid msgpack code 0x%02x at offset %d", c, sc.i-1)
	}
	return skip, items, err
}
