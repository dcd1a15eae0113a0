package daemon

import (
	"log/slog"
	"math"
	"runtime/debug"
	"sync"
	"time"
)

// Catch-up GC. A cluster joining a set takes in the whole set (a million
// entries) by bulk sync, and every entry costs several short-lived
// allocations on the way: memberlist's stream buffers, the decoded delta,
// the store record, the change. At the default GOGC=100 the garbage
// collector took about half of a 1 M-entry join's CPU
// (docs/PERFORMANCE.md, "Fast join"). While the change feed delivers bulk
// batches the daemon therefore raises the GC percent to catchUpGCPercent,
// but only under a memory limit (GOMEMLIMIT; deploy/ derives it from the
// container's limit): the runtime still collects as the heap nears the
// limit, so the relaxation spends headroom below the limit, never the
// limit itself. catchUpQuiet after the last bulk batch the previous
// percent is restored. A GOGC that is off or already higher is left alone.
const (
	catchUpGCPercent = 400
	// catchUpBatch is the smallest change batch that counts as bulk: sync
	// answers commit hundreds of entries at once, ordinary churn a few.
	catchUpBatch = 256
	catchUpQuiet = 2 * time.Second
)

// CatchUpGC raises the GC percent while bulk change batches arrive (see
// above). Safe for concurrent use.
type CatchUpGC struct {
	mu      sync.Mutex
	relaxed bool
	base    int
	gen     uint64
	timer   *time.Timer
	log     *slog.Logger

	// setPercent and memLimit are debug.SetGCPercent and the current
	// memory limit (math.MaxInt64: none); tests replace them.
	setPercent func(int) int
	memLimit   func() int64
	quiet      time.Duration
}

// NewCatchUpGC returns the controller of the process's GC percent.
func NewCatchUpGC(log *slog.Logger) *CatchUpGC {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &CatchUpGC{log: log, setPercent: debug.SetGCPercent,
		memLimit: func() int64 { return debug.SetMemoryLimit(-1) }, quiet: catchUpQuiet}
}

// Observe notes a committed change batch of n changes.
func (c *CatchUpGC) Observe(n int) {
	if c == nil || n < catchUpBatch {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if !c.relaxed {
		if c.memLimit() == math.MaxInt64 {
			return // no limit: a higher percent could grow the heap unbounded
		}
		base := c.setPercent(catchUpGCPercent)
		if base < 0 || base >= catchUpGCPercent {
			c.setPercent(base)
			return
		}
		c.base, c.relaxed = base, true
		c.log.Info("bulk catch-up: GC percent raised until it ends", "gc_percent", catchUpGCPercent,
			"restores_to", base, "memory_limit_bytes", c.memLimit())
	}
	gen := c.gen
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.AfterFunc(c.quiet, func() { c.restore(gen) })
}

// restore puts the previous GC percent back if no bulk batch came since
// the one numbered gen.
func (c *CatchUpGC) restore(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.relaxed || c.gen != gen {
		return
	}
	c.setPercent(c.base)
	c.relaxed = false
	c.log.Info("bulk catch-up over: GC percent restored", "gc_percent", c.base)
}

// Relaxed reports whether the GC percent is raised now.
func (c *CatchUpGC) Relaxed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.relaxed
}
