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
//	coastguardd keys rotate --signing-key-file OLD --cluster-id ID
//	                                     print a new key file: a fresh key
//	                                     and its endorsement by OLD

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

// rotateKey writes a new key file for clusterID: a fresh seed and the
// endorsement of its public key by the key in oldPath, so that every peer
// trusting the old key re-pins the new one (docs/SECURITY.md).
func rotateKey(w io.Writer, rnd io.Reader, oldPath, clusterID string) error {
	if clusterID == "" {
		return errors.New("--cluster-id is required: the endorsement names the cluster")
	}
	b, err := os.ReadFile(oldPath)
	if err != nil {
		return err
	}
	old, _, err := gossip.ParseSigningKeyFile(b)
	if err != nil {
		return fmt.Errorf("%s: %w", oldPath, err)
	}
	pub, priv, err := ed25519.GenerateKey(rnd)
	if err != nil {
		return err
	}
	e := gossip.Endorse(clusterID, old, pub)
	_, err = fmt.Fprintf(w, "# coastguard signing key of cluster %s, rotated from %s to %s\n%s\nendorsement %s\n",
		clusterID, gossip.KeyFingerprint(old.Public().(ed25519.PublicKey)), gossip.KeyFingerprint(pub),
		base64.StdEncoding.EncodeToString(priv.Seed()), base64.StdEncoding.EncodeToString(e))
	return err
}

func runKeys(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: coastguardd keys generate | show --signing-key-file FILE [--cluster-id ID] | rotate --signing-key-file FILE --cluster-id ID")
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
	case "rotate":
		fs := flag.NewFlagSet("keys rotate", flag.ContinueOnError)
		file := fs.String("signing-key-file", os.Getenv("COASTGUARD_SIGNING_KEY_FILE"), "the current signing key file")
		id := fs.String("cluster-id", os.Getenv("COASTGUARD_CLUSTER_ID"), "this cluster's ID")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *file == "" {
			fmt.Fprintln(os.Stderr, "coastguardd keys rotate: --signing-key-file is required")
			return 2
		}
		if err := rotateKey(os.Stdout, rand.Reader, *file, *id); err != nil {
			fmt.Fprintln(os.Stderr, "coastguardd keys rotate:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "coastguardd keys: unknown command %q (generate, show, rotate)\n", args[0])
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
//
// The endorsement is non-nil for a rotated key (keys rotate).
func loadTrust(ctx context.Context, cfg Config, client kubernetes.Interface, log *slog.Logger) (ed25519.PrivateKey, []byte, map[string][]byte, error) {
	if log == nil {
		log = slog.Default()
	}
	var key ed25519.PrivateKey
	var endorsement []byte
	switch _, statErr := os.Stat(cfg.SigningKeyFile); {
	case cfg.SigningKeyFile == "" && cfg.InsecureGossip:
		if cfg.TrustBundleFile != "" {
			return nil, nil, nil, errors.New("trust-bundle-file needs a signing key (--insecure-gossip without --signing-key-file runs unsigned)")
		}
		return nil, nil, nil, nil
	case cfg.SigningKeyFile != "" && statErr == nil:
		b, err := os.ReadFile(cfg.SigningKeyFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("signing-key-file: %w", err)
		}
		k, e, err := gossip.ParseSigningKeyFile(b)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("signing-key-file %s: %w", cfg.SigningKeyFile, err)
		}
		key, endorsement = k, e
	default:
		if client == nil {
			return nil, nil, nil, errors.New("signing-key-file is absent and no Kubernetes client to read Secret " + kube.SigningKeySecret)
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
			return nil, nil, nil, fmt.Errorf("signing key: %w (give --signing-key-file, or grant get/create on Secret %s)", err, kube.SigningKeySecret)
		}
		k, e, err := gossip.ParseSigningKeyFile(data)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("signing key Secret %s/%s: %w", cfg.Namespace, kube.SigningKeySecret, err)
		}
		key, endorsement = k, e
		log.Info("using the signing key of Secret "+kube.SigningKeySecret, "created", created,
			"fingerprint", gossip.KeyFingerprint(k.Public().(ed25519.PublicKey)))
	}
	if cfg.TrustBundleFile == "" {
		return key, endorsement, nil, nil
	}
	b, err := os.ReadFile(cfg.TrustBundleFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("trust-bundle-file: %w", err)
	}
	bundle, err := gossip.ParseTrustBundle(b)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("trust-bundle-file %s: %w", cfg.TrustBundleFile, err)
	}
	return key, endorsement, bundle, nil
}
