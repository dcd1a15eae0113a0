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
	pending := 1 // values still to read
	i := 0
	need := func(n int) error {
		if n < 0 || n > len(b)-i {
			return fmt.Errorf("crdt: value declares %d bytes at offset %d, %d left", n, i, len(b)-i)
		}
		return nil
	}
	be := func(n int) (int, error) {
		if err := need(n); err != nil {
			return 0, err
		}
		var v uint64
		switch n {
		case 1:
			v = uint64(b[i])
		case 2:
			v = uint64(binary.BigEndian.Uint16(b[i:]))
		case 4:
			v = uint64(binary.BigEndian.Uint32(b[i:]))
		}
		i += n
		if v > uint64(len(b)) {
			return 0, fmt.Errorf("crdt: value declares length %d in %d bytes", v, len(b))
		}
		return int(v), nil
	}
	for pending > 0 {
		if pending > len(b)-i {
			return fmt.Errorf("crdt: value declares %d more elements than its %d bytes can hold", pending, len(b)-i)
		}
		if err := need(1); err != nil {
			return err
		}
		c := b[i]
		i++
		pending--
		var skip, items int
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			items = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = int(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			skip, err = be(1)
		case c == 0xc5 || c == 0xda:
			skip, err = be(2)
		case c == 0xc6 || c == 0xdb:
			skip, err = be(4)
		case c == 0xc7:
			skip, err = be(1)
			skip++
		case c == 0xc8:
			skip, err = be(2)
			skip++
		case c == 0xc9:
			skip, err = be(4)
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
			items, err = be(2)
		case c == 0xdd:
			items, err = be(4)
		case c == 0xde:
			items, err = be(2)
			items *= 2
		case c == 0xdf:
			items, err = be(4)
			items *= 2
		default:
			return fmt.Errorf("crdt: invalid msgpack code 0x%02x at offset %d", c, i-1)
		}
		if err != nil {
			return err
		}
		if err := need(skip); err != nil {
			return err
		}
		i += skip
		pending += items
	}
	if i != len(b) {
		return fmt.Errorf("crdt: value has %d trailing bytes", len(b)-i)
	}
	return nil
}
