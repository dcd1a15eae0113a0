package gossip

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Two replicas in sync exchange only digest sums, never full digests. An
// equal sum is still a complete anti-entropy round, so OnDigest must report
// it: the daemon's empty-view gate waits for exactly that, and a gate fed
// only by full digests stays closed for as long as the replicas agree.
func TestOnDigestReportsEqualSums(t *testing.T) {
	keys := [][]byte{testKey(41)}
	var mu sync.Mutex
	seen := map[string]crdt.Digest{}
	a := startNode(t, "a", "c1", keys, func(c *Config) {
		c.AntiEntropyInterval = 100 * time.Millisecond
		c.OnDigest = func(cluster string, d crdt.Digest) {
			mu.Lock()
			seen[cluster] = d
			mu.Unlock()
		}
	})
	b := startNode(t, "b", "c2", keys, func(c *Config) { c.AntiEntropyInterval = 100 * time.Millisecond })
	joinAll(t, a, b)
	b.write(t, crdt.KindPod, "ns/p", podValue(t, "10.2.0.1"), false)
	requireConverged(t, waitConverge, a, b)
	mu.Lock()
	seen = map[string]crdt.Digest{} // only what arrives once both agree
	mu.Unlock()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		d, ok := seen["c2"]
		return ok && d["c2"].Max > 0
	}, waitEvent, pollEvery, "a replica in sync with c2 must still report c2's digest to OnDigest")
}

// A node that waits for some clusters' digests (Config.WantDigests: the
// daemon's empty-view gate after a restart or a leadership change) asks
// members of exactly those clusters, at the repair pace, and gets their
// digest sums back, even when no peer would have sent it one on its own:
// here the peers' own anti-entropy ticks never fire.
func TestWantDigestsAsksWantedClusters(t *testing.T) {
	keys := [][]byte{testKey(42)}
	var mu sync.Mutex
	seen := map[string]int{}
	want := map[string]bool{}
	wanted := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for c, w := range want {
			if w {
				out = append(out, c)
			}
		}
		return out
	}
	// no periodic memberlist push/pull either: its state carries digests
	noPushPull := func(c *Config) {
		c.MemberlistHook = func(mc *memberlist.Config) { mc.PushPullInterval = 0 }
	}
	a := startNode(t, "a", "c1", keys, func(c *Config) {
		noPushPull(c)
		c.AntiEntropyInterval = 400 * time.Millisecond
		c.WantDigests = wanted
		c.OnDigest = func(cluster string, d crdt.Digest) {
			mu.Lock()
			seen[cluster]++
			want[cluster] = false
			mu.Unlock()
		}
	})
	quiet := func(c *Config) { noPushPull(c); c.AntiEntropyInterval = time.Hour }
	b := startNode(t, "b", "c2", keys, quiet)
	c := startNode(t, "c", "c3", keys, quiet)
	d := startNode(t, "d", "c4", keys, quiet)
	joinAll(t, a, b, c, d)
	b.write(t, crdt.KindPod, "ns/p", podValue(t, "10.2.0.1"), false)
	requireConverged(t, waitConverge, a, b, c, d)

	mu.Lock()
	seen = map[string]int{} // what the join's push/pull brought does not count
	want = map[string]bool{"c2": true, "c3": true}
	mu.Unlock()
	a.WakeAntiEntropy()
	require.Eventually(t, func() bool { return len(wanted()) == 0 }, waitEvent, pollEvery,
		"the wanted clusters' members must answer a's asks")
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, seen["c2"])
	require.Positive(t, seen["c3"])
	require.Zero(t, seen["c4"], "asks go to members of the wanted clusters only")
}
