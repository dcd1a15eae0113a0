package gossip

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	peer := startNode(t, "b", "c2", keys, func(c *Config) { c.AntiEntropyInterval = time.Hour })
	joinAll(t, n, peer)
	digestsSent := func() float64 { return testutil.ToFloat64(n.m.syncs.WithLabelValues("digest", "sent")) }
	pace := func() pacing {
		n.syncs.mu.Lock()
		defer n.syncs.mu.Unlock()
		return n.syncs.pace
	}
	n.applyDeltas(ds[:1], "pull")
	require.False(t, pace().repairing(now), "a fresh delta is not a repair")
	require.Zero(t, digestsSent())
	require.Equal(t, time.Hour, n.syncs.tickEvery(time.Hour, now, false))

	n.applyDeltas(ds[1:2], "sync")
	require.True(t, pace().repairing(now))
	require.True(t, pace().repairing(now.Add(repairWindow-time.Millisecond)))
	require.False(t, pace().repairing(now.Add(repairWindow)), "repair mode is bounded")
	require.Equal(t, time.Hour/repairTickDivisor, n.syncs.tickEvery(time.Hour, now, false))
	require.True(t, waitFor(waitMembership, func() bool { return digestsSent() >= 1 }),
		"repair mode runs an anti-entropy round at once, with the full digest")

	n.applyDeltas(ds[1:2], "sync")
	require.True(t, pace().repairing(now), "a sync that brings nothing leaves the mode as it was")
}
