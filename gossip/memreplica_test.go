package gossip

import (
	"testing"

	"github.com/coastguard-mcnp/coastguard/store"
)

// memReplica is the store's replica on its in-memory backend (what the
// daemon runs, minus bbolt), with the panicking BumpEpoch the tests use.
type memReplica struct{ *store.Replica }

func newMemReplica(t *testing.T, cluster string) *memReplica {
	r := &memReplica{store.NewMemReplica(cluster)}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// BumpEpoch moves the writer to a fresh epoch (after its cluster was
// retired); it cannot fail in memory.
func (r *memReplica) BumpEpoch() uint32 {
	e, err := r.Replica.BumpEpoch()
	if err != nil {
		panic(err)
	}
	return e
}
