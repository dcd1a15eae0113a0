package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// Signing-key management (docs/SECURITY.md). The logic is plain functions
// (generateKey, showKey, rotateKey); newKeysCmd mounts them as cobra
// commands.
//
//	coastguardd keys generate            print a new base64 Ed25519 seed
//	coastguardd keys show --signing-key-file F
//	                                     print "<cluster-id> <public key>"
//	                                     for a trust bundle
//	coastguardd keys rotate --signing-key-file OLD --cluster-id ID
//	                                     print a new key file: a fresh key
//	                                     and its endorsement by OLD

func init() { commands = append(commands, newKeysCmd) }

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

// newKeysCmd mounts the key tools. `keys` alone and every --help only print
// help (exit 0); in particular `keys generate --help` prints no key.
func newKeysCmd() *cobra.Command {
	keys := &cobra.Command{
		Use:   "keys",
		Short: "generate, show or rotate this cluster's Ed25519 signing key",
		Long: "Signing-key management (docs/SECURITY.md): generate a key for Secret coastguard-signing-key, " +
			"show its trust-bundle line, or rotate it with an endorsement by the old key.",
		// Runnable, so that an unknown subcommand is a usage error (exit
		// 2) rather than help; `keys` alone prints help.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	keys.AddCommand(&cobra.Command{
		Use:   "generate",
		Short: "print a new base64 Ed25519 seed (for signing.key)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return failed(cmd, 1, generateKey(cmd.OutOrStdout(), rand.Reader))
		},
	})
	keys.AddCommand(newKeysShowCmd(), newKeysRotateCmd(), newKeysPinsCmd())
	return keys
}

func newKeysShowCmd() *cobra.Command {
	var file, id string
	cmd := &cobra.Command{
		Use:   "show --signing-key-file FILE [--cluster-id ID]",
		Short: `print "<cluster-id> <public key>", a trust-bundle line`,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError(cmd, "--signing-key-file is required")
			}
			return failed(cmd, 1, showKey(cmd.OutOrStdout(), file, id))
		},
	}
	cmd.Flags().StringVar(&file, "signing-key-file", os.Getenv("COASTGUARD_SIGNING_KEY_FILE"), "signing key file (env COASTGUARD_SIGNING_KEY_FILE)")
	cmd.Flags().StringVar(&id, "cluster-id", os.Getenv("COASTGUARD_CLUSTER_ID"), "cluster ID to print in front of the key (env COASTGUARD_CLUSTER_ID)")
	return cmd
}

func newKeysRotateCmd() *cobra.Command {
	var file, id string
	cmd := &cobra.Command{
		Use:   "rotate --signing-key-file FILE --cluster-id ID",
		Short: "print a new key file: a fresh key and its endorsement by the current one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError(cmd, "--signing-key-file is required")
			}
			return failed(cmd, 1, rotateKey(cmd.OutOrStdout(), rand.Reader, file, id))
		},
	}
	cmd.Flags().StringVar(&file, "signing-key-file", os.Getenv("COASTGUARD_SIGNING_KEY_FILE"), "the current signing key file (env COASTGUARD_SIGNING_KEY_FILE)")
	cmd.Flags().StringVar(&id, "cluster-id", os.Getenv("COASTGUARD_CLUSTER_ID"), "this cluster's ID (env COASTGUARD_CLUSTER_ID)")
	return cmd
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
