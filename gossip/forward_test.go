package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func TestFreshForForward(t *testing.T) {
	d := crdt.Delta{Origin: "c1", From: 4, To: 5, Entries: []crdt.Entry{{Version: 5}}}
	od := func(max, retired crdt.Version) crdt.OriginDigest {
		return crdt.OriginDigest{Max: max, Retired: retired}
	}
	require.True(t, freshForForward(d, od(5, 0), od(4, 0), 4), "news: advanced our watermark to To")
	require.False(t, freshForForward(d, od(5, 0), od(5, 0), 4), "we had it already")
	require.False(t, freshForForward(d, od(4, 0), od(4, 0), 4), "did not apply")
	require.False(t, freshForForward(d, od(5, 0), od(4, 0), 5), "already forwarded (origin, 5)")
	require.False(t, freshForForward(d, od(5, 5), od(4, 0), 0), "retired")
	reset := d
	reset.Reset = true
	require.False(t, freshForForward(reset, od(5, 0), od(0, 0), 0), "reset streams are not news to spread")
	require.False(t, freshForForward(crdt.Delta{Origin: "c1", To: 5}, od(5, 0), od(4, 0), 0), "no entries")
}

// In a mesh of 8, every update reaches everybody; receivers relay fresh
// deltas (path "forward") down the push tree, no node relays an update
// more than once to each of its tree children, and with stable membership every node
// receives exactly one eager copy (push or forward): no duplicates.
func TestPushTreeForwardsOnce(t *testing.T) {
	keys := [][]byte{testKey(40)}
	var all []*tnode
	for i := 0; i < 8; i++ {
		all = append(all, startNode(t, fmt.Sprintf("n%d", i), fmt.Sprintf("c%d", i), keys, func(c *Config) {
			// Anti-entropy stays on (slowly) so that a push lost under load is
			// still repaired; the push tree is checked by the counters below.
			c.AntiEntropyInterval = 2 * time.Second
		}))
	}
	joinAll(t, all...)
	const updates = 6
	for u := 0; u < updates; u++ {
		all[0].write(t, crdt.KindPod, fmt.Sprintf("ns/p%d", u), podValue(t, fmt.Sprintf("10.0.0.%d", u)), false)
		requireConverged(t, waitConverge, all...)
	}
	var forwardedIn, eagerIn float64
	for _, n := range all {
		out := testutil.ToFloat64(n.m.deltas.WithLabelValues("out", "forward"))
		children := len(n.treePeers(all[0].cfg.ClusterID, "", false))
		require.LessOrEqual(t, out, float64(updates*children), "%s relayed an update more than once (%d tree children)", n.Name(), children)
		fin := testutil.ToFloat64(n.m.deltas.WithLabelValues("in", "forward"))
		forwardedIn += fin
		eagerIn += fin + testutil.ToFloat64(n.m.deltas.WithLabelValues("in", "push"))
	}
	require.Greater(t, forwardedIn, 0.0, "no delta travelled by the push tree")
	require.LessOrEqual(t, eagerIn, float64(updates*(len(all)-1)), "some node received an update twice by the push tree")
	// The writer never forwards its own deltas (it pushes them).
	require.Zero(t, testutil.ToFloat64(all[0].m.deltas.WithLabelValues("out", "forward")))
}
