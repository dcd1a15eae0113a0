package store

import (
	"bytes"
	"errors"
	"fmt"
)

// Key encoding
//
// Every bbolt key in coastguard is a concatenation of COMPONENTS. A component
// is a byte string (a cluster ID, namespace, pod name, label key or label
// value; any byte may occur in it, including '_', '/', 0x00 and 0xFF) encoded
// as
//
//	escape(component) 0x00 0x01
//
// where escape replaces every 0x00 byte with the pair 0x00 0xFF and leaves all
// other bytes unchanged. Properties:
//
//   - Unambiguous: inside an encoded component a 0x00 is always followed by
//     0xFF, so the pair 0x00 0x01 can only be a terminator. A key therefore
//     splits into its components in exactly one way, whatever the bytes.
//   - No over-matching: a prefix made of whole components ends in a
//     terminator, so the prefix for cluster "foo" (66 6f 6f 00 01) is not a
//     prefix of cluster "foobar" (66 6f 6f 62 61 72 00 01), nor of "foo\x00x"
//     (66 6f 6f 00 ff 78 00 01).
//   - Order-preserving: bytes.Compare on encoded keys orders tuples
//     lexicographically by component (at the first difference, an ended
//     component 0x00 0x01 sorts before an escaped NUL 0x00 0xFF, which sorts
//     before any non-NUL byte), so a prefix scan returns results sorted by
//     the remaining components. TestKeyNoCollisionAndOrder checks this.
//
// The single-byte Kind in entry keys is written as its own component (one
// byte, escaped like any other), so the whole key space uses one rule.
const (
	escByte  = 0x00
	escEsc   = 0xFF // 0x00 inside a component is written 0x00 0xFF
	escTerm  = 0x01 // a component ends with 0x00 0x01
	termSize = 2
)

var errBadKey = errors.New("store: malformed key")

// appendComponent appends the encoding of c to dst.
func appendComponent(dst []byte, c string) []byte {
	for {
		i := indexZero(c)
		if i < 0 {
			dst = append(dst, c...)
			break
		}
		dst = append(dst, c[:i]...)
		dst = append(dst, escByte, escEsc)
		c = c[i+1:]
	}
	return append(dst, escByte, escTerm)
}

func indexZero(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return i
		}
	}
	return -1
}

// encodeKey encodes the components as one key.
func encodeKey(components ...string) []byte {
	n := 0
	for _, c := range components {
		n += len(c) + termSize
	}
	dst := make([]byte, 0, n)
	for _, c := range components {
		dst = appendComponent(dst, c)
	}
	return dst
}

// nextComponent decodes the first component of b and returns it with the
// rest of b. The returned bytes alias b when no unescaping was needed.
func nextComponent(b []byte) (comp []byte, rest []byte, err error) {
	i := bytes.IndexByte(b, escByte)
	if i < 0 {
		return nil, nil, errBadKey
	}
	if i+1 < len(b) && b[i+1] == escTerm {
		// fast path: no escaped zero in this component
		return b[:i], b[i+2:], nil
	}
	out := make([]byte, 0, len(b))
	for {
		if i < 0 || i+1 >= len(b) {
			return nil, nil, errBadKey
		}
		out = append(out, b[:i]...)
		switch b[i+1] {
		case escTerm:
			return out, b[i+2:], nil
		case escEsc:
			out = append(out, escByte)
			b = b[i+2:]
			i = bytes.IndexByte(b, escByte)
		default:
			return nil, nil, errBadKey
		}
	}
}

// decodeKey splits a key into exactly n components.
func decodeKey(b []byte, n int) ([]string, error) {
	out := make([]string, 0, n)
	for len(b) > 0 {
		c, rest, err := nextComponent(b)
		if err != nil {
			return nil, err
		}
		out = append(out, string(c))
		b = rest
	}
	if len(out) != n {
		return nil, fmt.Errorf("%w: %d components, want %d", errBadKey, len(out), n)
	}
	return out, nil
}
