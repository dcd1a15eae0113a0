package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/gossip"
)

func TestKeysGenerateShowAndBundle(t *testing.T) {
	var key bytes.Buffer
	require.NoError(t, generateKey(&key, rand.Reader))
	path := filepath.Join(t.TempDir(), "signing.key")
	require.NoError(t, os.WriteFile(path, key.Bytes(), 0o600))
	priv, err := gossip.LoadSigningKeyFile(path)
	require.NoError(t, err)

	var line bytes.Buffer
	require.NoError(t, showKey(&line, path, "eu-1"))
	bundle, err := gossip.ParseTrustBundle(line.Bytes())
	require.NoError(t, err)
	require.Equal(t, []byte(priv.Public().(ed25519.PublicKey)), bundle["eu-1"])

	bundlePath := filepath.Join(t.TempDir(), "bundle")
	require.NoError(t, os.WriteFile(bundlePath, []byte("# clusters\n"+line.String()), 0o600))
	k, b, err := loadTrust(Config{SigningKeyFile: path, TrustBundleFile: bundlePath})
	require.NoError(t, err)
	require.Equal(t, priv, k)
	require.Len(t, b, 1)

	require.NoError(t, os.WriteFile(path, []byte("not base64!\n"), 0o600))
	_, _, err = loadTrust(Config{SigningKeyFile: path})
	require.ErrorContains(t, err, "signing-key-file")
	_, err = gossip.ParseTrustBundle([]byte("eu-1 " + strings.Repeat("A", 10) + "\n"))
	require.Error(t, err)
}
