package gossip

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// A key mismatch is reported once a minute per cluster on Mismatches(),
// naming the trusted and the presented key; other refusals are not.
func TestTrustReportsKeyMismatch(t *testing.T) {
	own, _, _ := ed25519.GenerateKey(rand.Reader)
	good, goodPriv, _ := ed25519.GenerateKey(rand.Reader)
	rogue, roguePriv, _ := ed25519.GenerateKey(rand.Reader)
	tr, err := NewTrust(map[string][]byte{"b": good}, false, "a", own, nil, testLogger())
	require.NoError(t, err)

	msg := []byte("m")
	require.NoError(t, tr.Verify("b", good, msg, ed25519.Sign(goodPriv, msg)))
	// bad signature with the right key: no mismatch
	require.Equal(t, crdt.ReasonBadSignature, crdt.TrustReason(tr.Verify("b", good, msg, make([]byte, 64))))
	select {
	case m := <-tr.Mismatches():
		t.Fatalf("unexpected mismatch %+v", m)
	default:
	}
	for range 3 {
		err = tr.Verify("b", rogue, msg, ed25519.Sign(roguePriv, msg))
		require.Equal(t, crdt.ReasonKeyMismatch, crdt.TrustReason(err))
	}
	m := <-tr.Mismatches()
	require.Equal(t, "b", m.Cluster)
	require.Equal(t, []byte(good), m.Trusted)
	require.Equal(t, []byte(rogue), m.Presented)
	select {
	case m := <-tr.Mismatches():
		t.Fatalf("rate limit: second report within a minute %+v", m)
	default:
	}
	require.Equal(t, KeyFingerprint(good), tr.Fingerprint("b"))
	require.Equal(t, KeyFingerprint(own), tr.Fingerprint("a"))
	require.Empty(t, tr.Fingerprint("c"))
	require.Empty(t, (*Trust)(nil).Fingerprint("b"))
	require.Regexp(t, `^SHA256:[A-Za-z0-9+/]{43}$`, KeyFingerprint(good))
	require.NotEqual(t, KeyFingerprint(good), KeyFingerprint(rogue))
}
