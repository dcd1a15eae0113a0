package store

import "github.com/coastguard-mcnp/coastguard/crdt"

func reconcileDigests(d crdt.Digest, entries []crdt.Entry) []string { return nil } // TODO crdt hash
