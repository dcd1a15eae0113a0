package gossip

import (
	"sync"
	"testing"
	"time"

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
