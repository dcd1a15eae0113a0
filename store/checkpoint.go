package store

import "github.com/coastguard-mcnp/coastguard/crdt"

// Checkpoints (crdt/checkpoint.go): a joining replica accepts its origins'
// signed segment checkpoints and skips per-entry signature verification
// for deltas that are exactly one of their segments. Checkpoints are kept
// in memory only: they matter during a join, and a restarted joiner asks
// for them again.

// MakeCheckpoint signs a checkpoint of this replica's own origin
// (crdt.State.MakeCheckpoint).
func (r *Replica) MakeCheckpoint() (crdt.Checkpoint, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.MakeCheckpoint()
}

// AcceptCheckpoint verifies and keeps an origin's checkpoint
// (crdt.State.AcceptCheckpoint).
func (r *Replica) AcceptCheckpoint(cp crdt.Checkpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.AcceptCheckpoint(cp)
}

// CheckpointMax returns the Max of the checkpoint held for origin (0: none).
func (r *Replica) CheckpointMax(origin string) crdt.Version {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.CheckpointMax(origin)
}

// SplitAtCheckpoints re-cuts a sync stream at the held checkpoints'
// segment bounds (crdt.State.SplitAtCheckpoints); Apply does it for each
// call, this is for a caller that carries a stream's tail across calls.
func (r *Replica) SplitAtCheckpoints(ds []crdt.Delta, final bool) (ready, held []crdt.Delta) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.SplitAtCheckpoints(ds, final)
}

// CheckpointStats returns how deltas met checkpoints (hits, misses,
// signature verifications skipped).
func (r *Replica) CheckpointStats() crdt.CheckpointStats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.state.CheckpointStats()
}
