package daemon

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type fakeRing struct{ keys [][]byte } // keys[0] is primary

func (f *fakeRing) Keys() [][]byte { return append([][]byte(nil), f.keys...) }
func (f *fakeRing) InstallKey(k []byte) error {
	f.keys = append(f.keys, k)
	return nil
}
func (f *fakeRing) UseKey(k []byte) error {
	for i, x := range f.keys {
		if string(x) == string(k) {
			f.keys[0], f.keys[i] = f.keys[i], f.keys[0]
			return nil
		}
	}
	return errors.New("not installed")
}
func (f *fakeRing) RemoveKey(k []byte) error {
	if string(f.keys[0]) == string(k) {
		return errors.New("cannot remove primary")
	}
	for i, x := range f.keys {
		if string(x) == string(k) {
			f.keys = append(f.keys[:i], f.keys[i+1:]...)
		}
	}
	return nil
}

func TestSyncKeyringFollowsRotation(t *testing.T) {
	a, b := []byte("aaaaaaaaaaaaaaaa"), []byte("bbbbbbbbbbbbbbbb")
	n := &fakeRing{keys: [][]byte{a}}
	// step 1: operator appends b (install)
	require.NoError(t, syncKeyring(n, [][]byte{a, b}))
	require.Equal(t, [][]byte{a, b}, n.keys)
	// step 2: b first (use)
	require.NoError(t, syncKeyring(n, [][]byte{b, a}))
	require.Equal(t, b, n.keys[0])
	require.Len(t, n.keys, 2)
	// step 3: a removed (remove)
	require.NoError(t, syncKeyring(n, [][]byte{b}))
	require.Equal(t, [][]byte{b}, n.keys)
	// idempotent
	require.NoError(t, syncKeyring(n, [][]byte{b}))
	require.Equal(t, [][]byte{b}, n.keys)
	// one-shot swap a->b also works (install, use, remove in one pass)
	n = &fakeRing{keys: [][]byte{a}}
	require.NoError(t, syncKeyring(n, [][]byte{b}))
	require.Equal(t, [][]byte{b}, n.keys)
	require.Error(t, syncKeyring(n, nil))
}

func TestLeaseIdentityPersists(t *testing.T) {
	dir := t.TempDir()
	a, err := leaseIdentity(dir, "node-1")
	require.NoError(t, err)
	require.Contains(t, a, "node-1_")
	b, err := leaseIdentity(dir, "node-1")
	require.NoError(t, err)
	require.Equal(t, a, b, "a restarted daemon keeps its Lease identity")
	c, err := leaseIdentity(dir, "node-2")
	require.NoError(t, err)
	require.NotEqual(t, a, c, "a renamed node gets a fresh identity")
}

// The keyring component reloads the mounted file: each rotation step the
// operator writes is applied on the next reload, and a broken file (a
// half-written Secret, a bad line) keeps the current keyring.
func TestKeyringReloadFollowsFile(t *testing.T) {
	a, b := []byte("aaaaaaaaaaaaaaaa"), []byte("bbbbbbbbbbbbbbbb")
	enc := base64.StdEncoding.EncodeToString
	file := filepath.Join(t.TempDir(), "keys")
	put := func(lines ...string) {
		require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	}
	n := &fakeRing{keys: [][]byte{a}}
	k := newKeyring(file, 0, n, discard)
	require.Equal(t, 10*time.Second, k.interval, "default reload interval")

	put(enc(a), enc(b))
	require.NoError(t, k.reload())
	require.Equal(t, [][]byte{a, b}, n.keys)

	put("# rotated", enc(b), enc(a))
	require.NoError(t, k.reload())
	require.Equal(t, b, n.keys[0])

	put("not base64 !!")
	require.Error(t, k.reload())
	require.Equal(t, b, n.keys[0], "an invalid file keeps the current keyring")
	require.Len(t, n.keys, 2)

	require.NoError(t, os.Remove(file))
	require.Error(t, k.reload())
	require.Len(t, n.keys, 2, "a missing file keeps the current keyring")

	put(enc(b))
	require.NoError(t, k.reload())
	require.Equal(t, [][]byte{b}, n.keys)
}
