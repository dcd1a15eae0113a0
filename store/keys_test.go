package store

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func randComponent(r *rand.Rand) string {
	alphabet := []byte{0x00, 0x01, 0xFF, '_', '/', 'a', 'b', 'f', 'o'}
	n := r.IntN(6)
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func TestKeyRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		n := 1 + r.IntN(5)
		comps := make([]string, n)
		for i := range comps {
			comps[i] = randComponent(r)
		}
		got, err := decodeKey(encodeKey(comps...), n)
		require.NoError(t, err)
		require.Equal(t, comps, got)
	}
}

func TestKeyNoCollisionAndOrder(t *testing.T) {
	// Distinct tuples must encode to distinct keys, and bytes.Compare on
	// keys must agree with lexicographic tuple order.
	r := rand.New(rand.NewPCG(3, 4))
	seen := map[string][]string{}
	for range 5000 {
		a := []string{randComponent(r), randComponent(r)}
		b := []string{randComponent(r), randComponent(r)}
		ka, kb := encodeKey(a...), encodeKey(b...)
		require.Equal(t, slices.Compare(a, b), bytes.Compare(ka, kb), "%q vs %q", a, b)
		if prev, ok := seen[string(ka)]; ok {
			require.Equal(t, prev, a, "collision")
		}
		seen[string(ka)] = a
	}
}

func TestKeyPrefixDoesNotOverMatch(t *testing.T) {
	p := encodeKey("foo")
	for _, other := range []string{"foobar", "foo\x00", "foo\x00\x01", "foo_", "fo"} {
		require.False(t, bytes.HasPrefix(encodeKey(other, "x"), p), "prefix of %q matched %q", "foo", other)
	}
	require.True(t, bytes.HasPrefix(encodeKey("foo", "bar"), p))
	// The proposal's "_" ambiguity: (a_b, c) vs (a, b_c).
	require.NotEqual(t, encodeKey("a_b", "c"), encodeKey("a", "b_c"))
	require.False(t, bytes.HasPrefix(encodeKey("a_b", "c"), encodeKey("a")))
}

func TestDecodeKeyRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{{'a'}, {'a', 0}, {'a', 0, 2}, {0, 0xFF}} {
		_, err := decodeKey(b, 1)
		require.Error(t, err, "%x", b)
	}
	_, err := decodeKey(encodeKey("a", "b"), 3)
	require.Error(t, err)
	_, err = decodeEntryKey(encodeKey("o", "ab", "n"))
	require.ErrorContains(t, err, "kind")
	require.False(t, strings.Contains(string(encodeKey("a")), "_"))
}

// FuzzDecode feeds arbitrary bytes to every decoder that reads file
// content: none may panic, and whatever decodes must re-encode identically.
func FuzzDecode(f *testing.F) {
	f.Add(encodeKey("a", "\x03", "ns/p"), []byte{0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0xFF, 0, 1}, []byte{})
	f.Add([]byte("x\x00"), encodeKey("10.0.0.1", "fd00::1"))
	f.Fuzz(func(t *testing.T, key, val []byte) {
		if k, err := decodeEntryKey(key); err == nil {
			require.Equal(t, key, entryKey(k))
		}
		var e crdt.Entry
		_ = decodeRecord(key, val, &e)
		_, _ = decodeDigest(val)
	})
}
