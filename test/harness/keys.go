package harness

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

var keyMu sync.Mutex

// GossipKeyFile returns the path of the Env's shared gossip keyring (one
// base64 AES-256 key), creating it on first use. Every daemon of the Env
// gets it, as a real install mounts the Secret coastguard-gossip-key.
func (e *Env) GossipKeyFile() (string, error) {
	path := filepath.Join(e.Dir, "keys", "gossip.keyring")
	return path, writeKeyOnce(path, func() ([]byte, error) {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		return []byte(base64.StdEncoding.EncodeToString(k) + "\n"), nil
	})
}

// SigningKeyFile returns the path of cluster id's Ed25519 signing key (a
// base64 32-byte seed, the format of `coastguardd keys generate`), creating
// it on first use. Every daemon of the cluster shares it, as they share the
// Secret coastguard-signing-key.
func (e *Env) SigningKeyFile(clusterID string) (string, error) {
	path := filepath.Join(e.Dir, "keys", "signing-"+clusterID+".key")
	return path, writeKeyOnce(path, func() ([]byte, error) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		return []byte(base64.StdEncoding.EncodeToString(priv.Seed()) + "\n"), nil
	})
}

func writeKeyOnce(path string, gen func() ([]byte, error)) error {
	keyMu.Lock()
	defer keyMu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := gen()
	if err != nil {
		return fmt.Errorf("harness: generate %s: %w", path, err)
	}
	return os.WriteFile(path, b, 0o600)
}

// keyArgs returns the key flags a daemon needs unless args already choose
// its keys (or --insecure-gossip).
func (e *Env) keyArgs(clusterID string, args []string) ([]string, error) {
	has := func(flag string) bool {
		return slices.ContainsFunc(args, func(a string) bool {
			return a == "--"+flag || strings.HasPrefix(a, "--"+flag+"=")
		})
	}
	if has("insecure-gossip") {
		return nil, nil
	}
	var out []string
	if !has("gossip-key-file") {
		p, err := e.GossipKeyFile()
		if err != nil {
			return nil, err
		}
		out = append(out, "--gossip-key-file="+p)
	}
	if !has("signing-key-file") && clusterID != "" {
		p, err := e.SigningKeyFile(clusterID)
		if err != nil {
			return nil, err
		}
		out = append(out, "--signing-key-file="+p)
	}
	return out, nil
}
