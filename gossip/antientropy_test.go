package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The full-digest budget is a byte token bucket: whatever the load (how
// many mismatches arrive), a node sends at most FullDigestBurst at once and
// FullDigestBytesPerSec on average. Deterministic: the decision takes the
// time as an argument.
func TestFullDigestBudget(t *testing.T) {
	lim := newDigestLimiter()
	t0 := time.Unix(1000, 0)
	const size = 4 << 10 // a 4 KiB digest (~100 clusters)

	// A storm of mismatches at one instant: only the burst goes out.
	sent := 0
	for i := 0; i < 1000; i++ {
		if allowDigest(lim, t0, size) {
			sent++
		}
	}
	require.Equal(t, FullDigestBurst/size, sent)

	// A sustained storm for 10 s (a mismatch every millisecond): the bytes
	// sent stay within rate*10s (+ the burst already spent above).
	sent = 0
	for ms := 1; ms <= 10_000; ms++ {
		if allowDigest(lim, t0.Add(time.Duration(ms)*time.Millisecond), size) {
			sent++
		}
	}
	require.LessOrEqual(t, sent*size, FullDigestBytesPerSec*10)
	require.GreaterOrEqual(t, sent*size, FullDigestBytesPerSec*10-size, "the budget is used, not starved")

	// A digest larger than the burst still goes out when the bucket is full,
	// and empties it.
	big := newDigestLimiter()
	require.True(t, allowDigest(big, t0, 10*FullDigestBurst))
	require.False(t, allowDigest(big, t0, 1))
	require.True(t, allowDigest(big, t0.Add(time.Second), 1), "refills at the rate")
}
