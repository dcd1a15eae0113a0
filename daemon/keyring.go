package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coastguard-mcnp/coastguard/gossip"
)

// keyringNode is what the keyring needs of a gossip node.
type keyringNode interface {
	Keys() [][]byte
	InstallKey([]byte) error
	UseKey([]byte) error
	RemoveKey([]byte) error
}

// keyring follows the mounted gossip key file (a Kubernetes Secret volume
// is updated in place) and rotates the node's live keyring to match it:
// new keys are installed, the first line becomes primary, keys no longer
// listed are removed — so a rotation (install, use, remove) needs no
// restart.
type keyring struct {
	file     string
	interval time.Duration
	node     keyringNode
	log      *slog.Logger
}

func newKeyring(file string, interval time.Duration, node keyringNode, log *slog.Logger) *keyring {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	return &keyring{file: file, interval: interval, node: node, log: log}
}

// Run reloads the file every interval until ctx ends.
func (k *keyring) Run(ctx context.Context) {
	every(ctx, k.interval, func(time.Time) { _ = k.reload() })
}

// reload reads the file once and rotates the keyring to it. An unreadable
// or invalid file keeps the current keyring.
func (k *keyring) reload() error {
	keys, err := gossip.LoadKeyringFile(k.file)
	if err != nil {
		k.log.Warn("gossip key file unreadable; keeping the current keyring", "file", k.file, "err", err)
		return err
	}
	if err := syncKeyring(k.node, keys); err != nil {
		k.log.Warn("keyring rotation step failed", "err", err)
		return err
	}
	return nil
}

// syncKeyring makes the node's keyring equal to want (want[0] primary).
func syncKeyring(n keyringNode, want [][]byte) error {
	if len(want) == 0 {
		return errors.New("empty keyring file")
	}
	have := n.Keys()
	has := func(set [][]byte, k []byte) bool {
		for _, x := range set {
			if string(x) == string(k) {
				return true
			}
		}
		return false
	}
	for _, k := range want {
		if !has(have, k) {
			if err := n.InstallKey(k); err != nil {
				return fmt.Errorf("install: %w", err)
			}
		}
	}
	if cur := n.Keys(); len(cur) == 0 || string(cur[0]) != string(want[0]) {
		if err := n.UseKey(want[0]); err != nil {
			return fmt.Errorf("use: %w", err)
		}
	}
	for _, k := range n.Keys() {
		if !has(want, k) {
			if err := n.RemoveKey(k); err != nil {
				return fmt.Errorf("remove: %w", err)
			}
		}
	}
	return nil
}
