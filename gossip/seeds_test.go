package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSeedBackoffSpacesLookupsAndLogsOncePerMinute(t *testing.T) {
	b := newSeedBackoff(2*time.Second, 30*time.Second)
	t0 := time.Unix(1000, 0)
	require.True(t, b.due("s", t0))

	logs := 0
	now := t0
	var waits []time.Duration
	for i := 0; i < 8; i++ {
		log, n := b.failed("s", now)
		require.Equal(t, i+1, n)
		if log {
			logs++
		}
		// find when it becomes due again
		next := now
		for !b.due("s", next) {
			next = next.Add(100 * time.Millisecond)
		}
		waits = append(waits, next.Sub(now))
		now = next
	}
	require.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		30 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}, waits, "exponential, capped")
	// 150 s of failures: logged at 0 s, then once a minute
	require.Equal(t, 3, logs)

	b.succeeded("s")
	require.True(t, b.due("s", now))
	log, n := b.failed("s", now)
	require.True(t, log, "a fresh failure after success is logged")
	require.Equal(t, 1, n)
}
