package gossip

import (
	"errors"
	"testing"

	"github.com/coastguard-mcnp/coastguard/crdt"
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

// noCheckpoints is the checkpoint half of a Replica that keeps none (it
// builds none and accepts none), for test replicas without fast joins.
type noCheckpoints struct{}

var errNoCheckpoints = errors.New("this replica keeps no checkpoints")

func (noCheckpoints) MakeCheckpoint() (crdt.Checkpoint, error) {
	return crdt.Checkpoint{}, errNoCheckpoints
}
func (noCheckpoints) AcceptCheckpoint(crdt.Checkpoint) error { return errNoCheckpoints }
func (noCheckpoints) CheckpointMax(string) crdt.Version      { return 0 }
func (noCheckpoints) CheckpointStats() crdt.CheckpointStats  { return crdt.CheckpointStats{} }
func (noCheckpoints) SplitAtCheckpoints(ds []crdt.Delta, _ bool) (ready, held []crdt.Delta) {
	return ds, nil
}
