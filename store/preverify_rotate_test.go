package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

type fakeRotator struct {
	testVerifier
	endorsed []string
}

func (f *fakeRotator) Endorse(origin string, newKey, e []byte) error {
	f.endorsed = append(f.endorsed, origin)
	return nil
}
func (f *fakeRotator) Endorsement(origin string) []byte { return []byte("e-" + origin) }
func (f *fakeRotator) Predecessor(origin string, key []byte) bool {
	return origin == "c1" && string(key) == "old"
}

// Wrapping the verifier for parallel pre-verification must not hide key
// rotations from the crdt (the e2e rotation scenario caught this).
func TestPreVerifierPassesRotationsThrough(t *testing.T) {
	inner := &fakeRotator{testVerifier: testVerifier{}}
	var v crdt.Verifier = newPreVerifier(inner, 2)
	r, ok := v.(crdt.Rotator)
	require.True(t, ok)
	require.NoError(t, r.Endorse("c1", []byte("new"), nil))
	require.Equal(t, []string{"c1"}, inner.endorsed)
	require.Equal(t, []byte("e-c1"), r.Endorsement("c1"))
	require.True(t, r.Predecessor("c1", []byte("old")))
	require.False(t, r.Predecessor("c1", []byte("new")))

	plain := newPreVerifier(testVerifier{}, 2)
	require.Error(t, plain.Endorse("c1", []byte("new"), nil), "no rotations without a rotating verifier")
	require.Nil(t, plain.Endorsement("c1"))
	require.False(t, plain.Predecessor("c1", []byte("old")))
}
