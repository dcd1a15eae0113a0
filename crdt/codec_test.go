package crdt

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func sampleDelta(t testing.TB) Delta {
	a := writer(t, "cluster-a", 2)
	mustWrite(t, a, KindCluster, "", "c", false)
	mustWrite(t, a, KindPod, "ns/p1", "pod", false)
	mustWrite(t, a, KindPod, "ns/p2", "", true)
	mustWrite(t, a, KindReport, "cluster-b/ns/pol", "r", false)
	ds := a.DeltaSince(Digest{}, 0)
	require.Len(t, ds, 1)
	return ds[0]
}

func TestDeltaRoundTrip(t *testing.T) {
	d := sampleDelta(t)
	d.GC = MakeVersion(1, 9)
	d.Retired = MakeVersion(1, 3)
	d.Reset, d.Final = true, true
	d.Entries[1].Stamp = -5
	b, err := EncodeDelta(d)
	require.NoError(t, err)
	got, err := DecodeDelta(b)
	require.NoError(t, err)
	assert.Equal(t, d, got)

	// every truncation fails cleanly
	for i := 0; i < len(b); i++ {
		_, err := DecodeDelta(b[:i])
		assert.Error(t, err, "prefix %d", i)
	}
	_, err = DecodeDelta(append(bytes.Clone(b), 0xc0))
	assert.ErrorIs(t, err, ErrInvalid, "trailing bytes")
	// wrong format byte
	bad := bytes.Clone(b)
	bad[1] = 2
	_, err = DecodeDelta(bad)
	assert.ErrorContains(t, err, "wire format")
}

// A signed delta carrying a state mark round-trips; a mark of the wrong
// shape is refused.
func TestDeltaStateMarkRoundTrip(t *testing.T) {
	d := signedSampleDelta(t)
	require.Len(t, d.Mark.Hash, StateHashSize)
	b, err := EncodeDelta(d)
	require.NoError(t, err)
	got, err := DecodeDelta(b)
	require.NoError(t, err)
	assert.Equal(t, d, got)
	for i := 0; i < len(b); i++ {
		_, err := DecodeDelta(b[:i])
		assert.Error(t, err, "prefix %d", i)
	}
	bad := d
	bad.Mark.Hash = bad.Mark.Hash[:8]
	_, err = EncodeDelta(bad)
	assert.ErrorIs(t, err, ErrInvalid)
	bad = d
	bad.Mark.GC = bad.Mark.Head + 1
	_, err = EncodeDelta(bad)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestDeltaDecodeRejectsInvalid(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	entry := func(kind uint8, name string, v uint64) []any {
		return []any{kind, name, v, false, []byte("x"), int64(0)}
	}
	cases := map[string][]byte{
		"not array":     enc("x"),
		"short":         enc([]any{1, "a"}),
		"neg version":   enc([]any{1, "a", -1, 5, 0, 0, 0, []any{}}),
		"bad flags":     enc([]any{1, "a", 0, 5, 0, 0, 8, []any{}}),
		"kind 0":        enc([]any{1, "a", 0, 5, 0, 0, 0, []any{entry(0, "n/x", 1)}}),
		"opaque utf8":   enc([]any{1, "a", 0, 5, 0, 0, 0, []any{entry(9, "\xff", 1)}}),
		"unsorted":      enc([]any{1, "a", 0, 5, 0, 0, 0, []any{entry(3, "n/x", 3), entry(3, "n/y", 2)}}),
		"out of range":  enc([]any{1, "a", 0, 5, 0, 0, 0, []any{entry(3, "n/x", 6)}}),
		"empty origin":  enc([]any{1, "", 0, 5, 0, 0, 0, []any{}}),
		"name as int":   enc([]any{1, "a", 0, 5, 0, 0, 0, []any{[]any{3, 7, 1, false, []byte{}, 0}}}),
		"value as str":  enc([]any{1, "a", 0, 5, 0, 0, 0, []any{[]any{3, "n/x", 1, false, "s", 0}}}),
		"long origin":   enc([]any{1, string(make([]byte, MaxOriginBytes+1)), 0, 5, 0, 0, 0, []any{}}),
		"huge count":    {0x98, 0x01, 0xa1, 'a', 0, 5, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge str len":  {0x98, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},
		"final noreset": enc([]any{1, "a", 0, 5, 0, 0, 2, []any{}}),
	}
	for name, b := range cases {
		_, err := DecodeDelta(b)
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
}

func TestDigestRoundTrip(t *testing.T) {
	d := Digest{
		"b": {Max: 7, Hash: 1<<63 + 5, GC: 3, Retired: 2, Top: 9, Reset: 4, GapHash: 11},
		"a": {Max: MakeVersion(MaxEpoch, 1<<40-1)},
	}
	b, err := EncodeDigest(d)
	require.NoError(t, err)
	got, err := DecodeDigest(b)
	require.NoError(t, err)
	assert.Equal(t, d, got)
	b2, _ := EncodeDigest(got)
	assert.Equal(t, b, b2, "deterministic")
	for i := 0; i < len(b); i++ {
		_, err := DecodeDigest(b[:i])
		assert.Error(t, err)
	}
	dup, _ := msgpack.Marshal([]any{1, []any{[]any{"a", 1, 1, 0, 0, 0, 0, 0}, []any{"a", 1, 1, 0, 0, 0, 0, 0}}})
	_, err = DecodeDigest(dup)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = EncodeDigest(Digest{"": {}})
	assert.ErrorIs(t, err, ErrInvalid)
}
