package daemon

import (
	"bytes"
	"crypto/ed25519"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/store"
)

// A daemon restarted with a rotated key moves its own pin only when the
// key file's endorsement proves the rotation from the pinned key, and keeps
// the old key as predecessor.
func TestTrustForOwnRotation(t *testing.T) {
	old := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	nk := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	oldPub, newPub := []byte(old.Public().(ed25519.PublicKey)), []byte(nk.Public().(ed25519.PublicKey))
	rep, err := store.OpenReplica(filepath.Join(t.TempDir(), "s.db"), "c1", store.Options{})
	require.NoError(t, err)
	defer rep.Close()
	require.NoError(t, rep.Store().PutPin("c1", oldPub))

	_, _, err = trustFor(Options{ClusterID: "c1", SigningKey: nk}, rep, nil)
	require.Error(t, err, "an unendorsed own key change is refused")
	_, _, err = trustFor(Options{ClusterID: "c1", SigningKey: nk, SigningKeyEndorsement: gossip.Endorse("c2", old, newPub)}, rep, nil)
	require.Error(t, err, "an endorsement for another cluster proves nothing")

	e := gossip.Endorse("c1", old, newPub)
	sg, tr, err := trustFor(Options{ClusterID: "c1", SigningKey: nk, SigningKeyEndorsement: e}, rep, nil)
	require.NoError(t, err)
	require.Equal(t, newPub, sg.PublicKey())
	require.Equal(t, newPub, tr.Key("c1"))
	require.True(t, tr.Predecessor("c1", oldPub))
	require.Equal(t, e, tr.Endorsement("c1"))
	pins, err := rep.Store().Pins()
	require.NoError(t, err)
	require.Equal(t, newPub, pins["c1"], "persisted")

	// restart: pin already moved; the predecessor is still known
	_, tr, err = trustFor(Options{ClusterID: "c1", SigningKey: nk, SigningKeyEndorsement: e}, rep, nil)
	require.NoError(t, err)
	require.True(t, tr.Predecessor("c1", oldPub))
}
