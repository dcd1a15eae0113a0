package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// Signing-key management (docs/SECURITY.md). The logic is plain functions
// (generateKey, showKey) so any CLI framework can mount them; runKeys is
// the tiny registration for the current subcommand table.
//
//	coastguardd keys generate            print a new base64 Ed25519 seed
//	coastguardd keys show --signing-key-file F
//	                                     print "<cluster-id> <public key>"
//	                                     for a trust bundle

func init() { subcommands["keys"] = runKeys }

// generateKey writes a fresh signing key (base64 32-byte seed) to w.
func generateKey(w io.Writer, rnd io.Reader) error {
	_, priv, err := ed25519.GenerateKey(rnd)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, base64.StdEncoding.EncodeToString(priv.Seed()))
	return err
}

// showKey writes the trust-bundle line of the key in path.
func showKey(w io.Writer, path, clusterID string) error {
	priv, err := gossip.LoadSigningKeyFile(path)
	if err != nil {
		return err
	}
	if clusterID == "" {
		clusterID = "<cluster-id>"
	}
	_, err = fmt.Fprintf(w, "%s %s\n", clusterID, base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)))
	return err
}

func runKeys(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: coastguardd keys generate | show --signing-key-file FILE [--cluster-id ID]")
		return 2
	}
	switch args[0] {
	case "generate":
		if err := generateKey(os.Stdout, rand.Reader); err != nil {
			fmt.Fprintln(os.Stderr, "coastguardd keys generate:", err)
			return 1
		}
		return 0
	case "show":
		fs := flag.NewFlagSet("keys show", flag.ContinueOnError)
		file := fs.String("signing-key-file", os.Getenv("COASTGUARD_SIGNING_KEY_FILE"), "signing key file")
		id := fs.String("cluster-id", os.Getenv("COASTGUARD_CLUSTER_ID"), "cluster ID to print in front of the key")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *file == "" {
			fmt.Fprintln(os.Stderr, "coastguardd keys show: --signing-key-file is required")
			return 2
		}
		if err := showKey(os.Stdout, *file, *id); err != nil {
			fmt.Fprintln(os.Stderr, "coastguardd keys show:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "coastguardd keys: unknown command %q (generate, show)\n", args[0])
	return 2
}

// loadTrust reads this cluster's signing key and --trust-bundle-file.
//
// The key comes from --signing-key-file when that file exists (the
// DaemonSet mounts Secret coastguard-signing-key there, optional: true).
// Otherwise (no flag, or the Secret not mounted yet) it is read through the
// API from the same Secret, which is created with a fresh key when absent
// (kube.EnsureSigningKey: creation is atomic, so concurrently starting pods
// agree on one key). A daemon therefore never runs unsigned because the
// Secret was missing. Only --insecure-gossip without --signing-key-file
// runs unsigned (tests).
func loadTrust(ctx context.Context, cfg Config, client kubernetes.Interface, log *slog.Logger) (ed25519.PrivateKey, map[string][]byte, error) {
	if log == nil {
		log = slog.Default()
	}
	var key ed25519.PrivateKey
	switch _, statErr := os.Stat(cfg.SigningKeyFile); {
	case cfg.SigningKeyFile == "" && cfg.InsecureGossip:
		if cfg.TrustBundleFile != "" {
			return nil, nil, errors.New("trust-bundle-file needs a signing key (--insecure-gossip without --signing-key-file runs unsigned)")
		}
		return nil, nil, nil
	case cfg.SigningKeyFile != "" && statErr == nil:
		k, err := gossip.LoadSigningKeyFile(cfg.SigningKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("signing-key-file: %w", err)
		}
		key = k
	default:
		if client == nil {
			return nil, nil, errors.New("signing-key-file is absent and no Kubernetes client to read Secret " + kube.SigningKeySecret)
		}
		log.Info("signing key file absent; reading this cluster's signing key through the API (creating it if absent)",
			"signing_key_file", cfg.SigningKeyFile, "namespace", cfg.Namespace, "secret", kube.SigningKeySecret)
		gen := func() ([]byte, error) {
			var b bytes.Buffer
			err := generateKey(&b, rand.Reader)
			return b.Bytes(), err
		}
		data, created, err := kube.EnsureSigningKey(ctx, client, cfg.Namespace, gen, log)
		if err != nil {
			return nil, nil, fmt.Errorf("signing key: %w (give --signing-key-file, or grant get/create on Secret %s)", err, kube.SigningKeySecret)
		}
		k, err := gossip.ParseSigningKey(data)
		if err != nil {
			return nil, nil, fmt.Errorf("Secret %s/%s: %w", cfg.Namespace, kube.SigningKeySecret, err)
		}
		key = k
		log.Info("using the signing key of Secret "+kube.SigningKeySecret, "created", created,
			"fingerprint", gossip.KeyFingerprint(k.Public().(ed25519.PublicKey)))
	}
	if cfg.TrustBundleFile == "" {
		return key, nil, nil
	}
	b, err := os.ReadFile(cfg.TrustBundleFile)
	if err != nil {
		return nil, nil, fmt.Errorf("trust-bundle-file: %w", err)
	}
	bundle, err := gossip.ParseTrustBundle(b)
	if err != nil {
		return nil, nil, fmt.Errorf("trust-bundle-file %s: %w", cfg.TrustBundleFile, err)
	}
	return key, bundle, nil
}
