package store

import "github.com/coastguard-mcnp/coastguard/crdt"

// Copies of the seams other packages program against (docs/CONTRACTS.md):
// gossip.Replica and kube.Writer's shape. Kept local so this package's
// tests do not depend on those packages building.
type gossipReplica interface {
	Digest() crdt.Digest
	DeltaSince(remote crdt.Digest, maxEntries int) []crdt.Delta
	Apply(deltas ...crdt.Delta) ([]crdt.Change, error)
	ApplyRetire(r crdt.Retire) ([]crdt.Change, error)
}

type contractReplica interface {
	gossipReplica
	Write(kind crdt.Kind, name string, value []byte, deleted bool) (crdt.Delta, error)
	View(fn func(*crdt.State))
	Subscribe(fn func([]crdt.Change))
	Close() error
}

var _ contractReplica = (*Replica)(nil)
