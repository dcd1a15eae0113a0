package daemon

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type fakeGC struct {
	mu      sync.Mutex
	percent int
	limit   int64
}

func (f *fakeGC) set(p int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.percent
	f.percent = p
	return old
}

func (f *fakeGC) get() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent
}

func newTestCatchUp(f *fakeGC, quiet time.Duration) *CatchUpGC {
	c := NewCatchUpGC(nil)
	c.setPercent, c.memLimit, c.quiet = f.set, func() int64 { return f.limit }, quiet
	return c
}

// Bulk batches raise the GC percent under a memory limit, and it comes back
// once they stop; small batches, no limit, or a GOGC that is off or already
// higher leave it alone.
func TestCatchUpGC(t *testing.T) {
	f := &fakeGC{percent: 100, limit: 1 << 30}
	c := newTestCatchUp(f, 50*time.Millisecond)
	c.Observe(catchUpBatch - 1)
	require.Equal(t, 100, f.get(), "ordinary churn")
	c.Observe(catchUpBatch)
	require.Equal(t, catchUpGCPercent, f.get())
	require.True(t, c.Relaxed())
	for range 5 { // batches keep coming: stays raised
		time.Sleep(20 * time.Millisecond)
		c.Observe(1000)
		require.Equal(t, catchUpGCPercent, f.get())
	}
	require.Eventually(t, func() bool { return f.get() == 100 }, 5*time.Second, 10*time.Millisecond)
	require.False(t, c.Relaxed())

	for _, tc := range []struct {
		name    string
		percent int
		limit   int64
	}{
		{"no memory limit", 100, math.MaxInt64},
		{"GOGC=off", -1, 1 << 30},
		{"GOGC already higher", 800, 1 << 30},
	} {
		f := &fakeGC{percent: tc.percent, limit: tc.limit}
		c := newTestCatchUp(f, time.Hour)
		c.Observe(10_000)
		require.Equal(t, tc.percent, f.get(), tc.name)
		require.False(t, c.Relaxed(), tc.name)
	}
}
