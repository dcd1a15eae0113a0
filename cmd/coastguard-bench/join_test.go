package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The join measurement completes at a small size, with and without
// checkpoints (the joiner's view and enforce view complete).
func TestMeasureJoinSmall(t *testing.T) {
	defer func(d time.Duration) { joinTimeout = d }(joinTimeout)
	joinTimeout = 2 * time.Minute
	for _, withCP := range []bool{false, true} {
		r, err := measureJoin(context.Background(), filepath.Join(t.TempDir(), "j.db"), 2, 1500, withCP, false)
		require.NoError(t, err)
		require.Positive(t, r.view)
		require.GreaterOrEqual(t, r.enforce, time.Duration(0))
		// How much a checkpoint saves depends on when it arrives (the
		// bench measures it); without, nothing is skipped.
		require.LessOrEqual(t, r.stats.SkippedVerifies, uint64(3000))
		if !withCP {
			require.Zero(t, r.stats.Hits+r.stats.SkippedVerifies)
		}
	}
}
