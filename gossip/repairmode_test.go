package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// TestBulkRepairStartsRepairMode: a bulk anti-entropy sync that brings news
// (the fast path missed it: a healed partition) puts the node in repair
// mode for repairWindow and wakes its anti-entropy loop at once; fresh
// deltas (push, forward, pull) do not. Without repair mode a heal after a
// 30 s partition took 2-3 s: the last writes of each side were found by
// one random 1 s round at a time, and busy peers skipped the full digest.
func TestBulkRepairStartsRepairMode(t *testing.T) {
	keys := [][]byte{testKey(1)}
	src := newMemReplica(t, "c-src")
	var ds []crdt.Delta
	for i := 0; i < 3; i++ {
		d, err := src.Write(crdt.KindNamespace, "ns"+string(rune('a'+i)), nil, false)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	now := time.Unix(7000, 0)
	n := startNode(t, "a", "c1", keys, func(c *Config) {
		c.Now = func() time.Time { return now }
		c.AntiEntropyInterval = time.Hour // only the wake-up can run a round
	})
	pace := func() pacing {
		n.syncs.mu.Lock()
		defer n.syncs.mu.Unlock()
		return n.syncs.pace
	}
	own := n.write(t, crdt.KindNamespace, "own", nil, false) // a round would re-announce it
	n.applyDeltas(ds[:1], "pull")
	require.False(t, pace().repairing(now), "a fresh delta is not a repair")
	require.Equal(t, time.Hour, n.syncs.tickEvery(time.Hour, now))

	n.applyDeltas(ds[1:2], "sync")
	require.True(t, pace().repairing(now))
	require.True(t, pace().repairing(now.Add(repairWindow-time.Millisecond)))
	require.False(t, pace().repairing(now.Add(repairWindow)), "repair mode is bounded")
	require.Equal(t, time.Hour/repairTickDivisor, n.syncs.tickEvery(time.Hour, now))
	require.True(t, waitFor(waitMembership, func() bool {
		n.syncs.mu.Lock()
		defer n.syncs.mu.Unlock()
		return n.syncs.ownHead == own.To
	}), "repair mode runs an anti-entropy round at once")

	n.applyDeltas(ds[1:2], "sync")
	require.True(t, pace().repairing(now), "a sync that brings nothing leaves the mode as it was")
}

// TestTrailingHead: the anti-entropy round re-announces our own head once
// after it changed, so that the last write of a burst is announced again
// even when the head Publish queued went only to peers that could not
// receive it.
func TestTrailingHead(t *testing.T) {
	s := newSyncer(1)
	require.False(t, s.ownHeadChanged(0), "nothing written")
	require.True(t, s.ownHeadChanged(5))
	require.False(t, s.ownHeadChanged(5), "announced once")
	require.True(t, s.ownHeadChanged(7))

	keys := [][]byte{testKey(1)}
	n := startNode(t, "a", "c1", keys, func(c *Config) { c.AntiEntropyInterval = time.Hour })
	d, err := n.rep.Write(crdt.KindNamespace, "ns1", nil, false)
	require.NoError(t, err)
	require.Zero(t, n.queue.NumQueued())
	n.trailingHead()
	require.Equal(t, 1, n.queue.NumQueued(), "the own head is queued")
	require.Equal(t, d.To, n.syncs.ownHead)
}
