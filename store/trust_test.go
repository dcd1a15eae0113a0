package store

import (
	"bytes"
	"crypto/ed25519"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

type testSigner struct{ priv ed25519.PrivateKey }

func (s testSigner) PublicKey() []byte      { return s.priv.Public().(ed25519.PublicKey) }
func (s testSigner) Sign(msg []byte) []byte { return ed25519.Sign(s.priv, msg) }

type testVerifier map[string][]byte

func (v testVerifier) Verify(origin string, key, msg, sig []byte) error {
	if !ed25519.Verify(v[origin], msg, sig) {
		return &crdt.TrustError{Reason: crdt.ReasonBadSignature, Origin: origin}
	}
	return nil
}
func (v testVerifier) Key(origin string) []byte { return v[origin] }

// Signatures and proofs survive the store: a reopened replica serves
// deltas a verifying peer accepts, without re-verifying anything itself.
func TestSignaturesAndPinsPersist(t *testing.T) {
	sg := testSigner{ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))}
	ver := testVerifier{"c1": sg.PublicKey()}
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	r.SetSigner(sg)
	r.SetVerifier(ver, nil)
	for _, n := range []string{"ns/a", "ns/b", "ns/c"} {
		_, err := r.Write(crdt.KindPod, n, podValue(t, nil, "10.0.0.1"), false)
		require.NoError(t, err)
	}
	_, err = r.Write(crdt.KindPod, "ns/a", nil, true)
	require.NoError(t, err)
	_, _, err = r.CollectGarbage(r.Digest()["c1"].Max)
	require.NoError(t, err)
	require.NoError(t, r.Store().PutPin("c2", []byte("0123456789abcdef0123456789abcdef")))
	require.Error(t, r.Store().PutPin("c2", []byte("another-key-another-key-another-")))
	want := r.Digest()["c1"]
	require.NoError(t, r.Close())

	r2 := openReplica(t, path, "c1", Options{})
	pins, err := r2.Store().Pins()
	require.NoError(t, err)
	require.Equal(t, []byte("0123456789abcdef0123456789abcdef"), pins["c2"])
	peer := crdt.NewState("c3")
	peer.SetVerifier(ver, nil)
	for _, d := range r2.DeltaSince(peer.Digest(), 0) {
		_, err := peer.Apply(d)
		require.NoError(t, err)
	}
	got := peer.Digest()["c1"]
	require.Equal(t, want.Max, got.Max)
	require.Equal(t, want.GC, got.GC)
	require.Equal(t, want.Hash, got.Hash)
}
