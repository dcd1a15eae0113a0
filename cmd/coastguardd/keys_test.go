package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
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
	k, _, b, err := loadTrust(context.Background(), Config{SigningKeyFile: path, TrustBundleFile: bundlePath}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, priv, k)
	require.Len(t, b, 1)

	require.NoError(t, os.WriteFile(path, []byte("not base64!\n"), 0o600))
	_, _, _, err = loadTrust(context.Background(), Config{SigningKeyFile: path}, nil, nil)
	require.ErrorContains(t, err, "signing-key-file")
	_, err = gossip.ParseTrustBundle([]byte("eu-1 " + strings.Repeat("A", 10) + "\n"))
	require.Error(t, err)
}

// Without a key file, the key comes from Secret coastguard-signing-key
// through the API, created once; --insecure-gossip without a file stays
// unsigned.
func TestLoadTrustFromSecret(t *testing.T) {
	c := fake.NewSimpleClientset()
	cfg := Config{Namespace: "coastguard-system", SigningKeyFile: filepath.Join(t.TempDir(), "absent")}
	k1, _, _, err := loadTrust(context.Background(), cfg, c, nil)
	require.NoError(t, err)
	require.NotNil(t, k1, "never unsigned for want of a Secret")
	s, err := c.CoreV1().Secrets("coastguard-system").Get(context.Background(), kube.SigningKeySecret, metav1.GetOptions{})
	require.NoError(t, err)
	fromSecret, err := gossip.ParseSigningKey(s.Data[kube.SigningKeyField])
	require.NoError(t, err)
	require.Equal(t, k1, fromSecret)

	k2, _, _, err := loadTrust(context.Background(), Config{Namespace: "coastguard-system"}, c, nil)
	require.NoError(t, err)
	require.Equal(t, k1, k2, "a second pod uses the same key")

	k3, _, _, err := loadTrust(context.Background(), Config{InsecureGossip: true}, c, nil)
	require.NoError(t, err)
	require.Nil(t, k3)
	_, _, _, err = loadTrust(context.Background(), Config{Namespace: "x"}, nil, nil)
	require.Error(t, err)
}
