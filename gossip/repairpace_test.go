package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// TestBulkRepairDoesNotArmQuietSkip: only fresh deltas (push, forward,
// pull) arm decideSync's quiet-period skip. A bulk anti-entropy sync is a
// repair (a healed partition, a restart): a peer that still lacks what it
// brought must get our full digest at once, or the heal waits for the skip
// to lapse (it took 4.4-5.7 s after a 30 s partition with the skip armed by
// repairs).
func TestBulkRepairDoesNotArmQuietSkip(t *testing.T) {
	keys := [][]byte{testKey(1)}
	src := newMemReplica(t, "c-src")
	var ds []crdt.Delta
	for i := 0; i < 3; i++ {
		d, err := src.Write(crdt.KindNamespace, "ns"+string(rune('a'+i)), nil, false)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	n := startNode(t, "a", "c1", keys, nil)
	lastApply := func() time.Time {
		n.syncs.mu.Lock()
		defer n.syncs.mu.Unlock()
		return n.syncs.pace.lastApply
	}
	n.applyDeltas(ds[:1], "sync")
	require.True(t, lastApply().IsZero(), "a bulk sync must not arm the quiet-period skip")
	require.Contains(t, n.rep.Digest(), "c-src", "the repair itself is applied")
	n.applyDeltas(ds[1:2], "pull")
	require.False(t, lastApply().IsZero(), "a fresh delta arms it")
}
