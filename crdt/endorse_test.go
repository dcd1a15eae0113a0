package crdt

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The key endorsement of a rotation survives the wire format, is only
// accepted at its exact size, and a delta without one encodes as before.
func TestDeltaEndorsementRoundTrip(t *testing.T) {
	s := newEdSigner(1)
	d := Delta{Origin: "c1", From: 0, To: MakeVersion(1, 1), Key: s.PublicKey(),
		Entries: []Entry{{Key: Key{Origin: "c1", Kind: KindPod, Name: "ns/a"}, Version: MakeVersion(1, 1), Value: []byte{0x80}}}}
	d.Entries[0].Sig = s.Sign(EntrySigMessage(&d.Entries[0]))
	plain, err := EncodeDelta(d)
	require.NoError(t, err)

	d.Endorse = bytes.Repeat([]byte{7}, EndorseSize)
	b, err := EncodeDelta(d)
	require.NoError(t, err)
	require.Len(t, b, len(plain)+2+EndorseSize, "one bin field more")
	got, err := DecodeDelta(b)
	require.NoError(t, err)
	require.Equal(t, d.Endorse, got.Endorse)
	require.Equal(t, d.Key, got.Key)
	got, err = DecodeDelta(plain)
	require.NoError(t, err)
	require.Nil(t, got.Endorse)

	d.Endorse = d.Endorse[:EndorseSize-1]
	b, err = EncodeDelta(d)
	if err == nil {
		_, err = DecodeDelta(b)
	}
	require.Error(t, err, "a short endorsement is invalid")
	d.Endorse, d.Key = bytes.Repeat([]byte{7}, EndorseSize), nil
	require.Error(t, ValidateDelta(&d), "an endorsement without the key it endorses")
}
