package store

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Proofs persist their state mark (issue 29, item 1), and a record written
// before state marks existed still loads.
func TestProofRecordStateMark(t *testing.T) {
	sig := func(b byte) []byte { return bytes.Repeat([]byte{b}, crdt.SigSize) }
	p := crdt.Proof{Head: 7, HeadSig: sig(1), GCSig: sig(2), Mark: crdt.StateMark{
		Head: 9, GC: 3, Retired: 1, Hash: bytes.Repeat([]byte{4}, crdt.StateHashSize),
		HeadEntry: bytes.Repeat([]byte{6}, crdt.StateHashSize), Sig: sig(5)}}
	got, err := decodeProof(encodeProof(p))
	require.NoError(t, err)
	require.Equal(t, p, got)

	old := encodeProof(crdt.Proof{Head: 7, HeadSig: sig(1), RetiredSig: sig(3)})
	require.Equal(t, byte(1|4), old[8], "no mark: the pre-mark layout")
	got, err = decodeProof(old)
	require.NoError(t, err)
	require.True(t, got.Mark.IsZero())
	require.Equal(t, sig(3), got.RetiredSig)

	noEntry := p
	noEntry.Mark.HeadEntry = nil
	got, err = decodeProof(encodeProof(noEntry))
	require.NoError(t, err)
	require.Equal(t, noEntry, got)

	_, err = decodeProof(encodeProof(p)[:60])
	require.Error(t, err)
	_, err = decodeProof(encodeProof(p)[:len(encodeProof(p))-1])
	require.Error(t, err)
}
