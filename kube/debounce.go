package kube

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Debouncer collects dirty keys and hands them to a fire function.
//
// Leading edge: the first mark after a quiet period (no mark for Quiet) is
// fired at once, so an isolated change costs no debounce delay. Marks that
// follow within Quiet are a burst and are batched: they fire once no key has
// been marked for Quiet, or MaxDelay after the oldest pending mark, whichever
// comes first; so steady churn cannot starve it. Fire runs on the Run
// goroutine, one batch at a time; marks made while it runs form the next
// batch.
//
// Mark arms the timer itself, under the lock, so the timer always reflects
// every mark made so far; that keeps the behaviour exact under a fake clock.
type Debouncer[K comparable] struct {
	quiet, maxDelay time.Duration
	clock           clock.Clock
	fire            func(ctx context.Context, keys []K)
	compare         func(a, b K) int // orders a fired batch

	mu        sync.Mutex
	dirty     map[K]struct{}
	firstMark time.Time
	lastMark  time.Time // kept after a fire: it decides the leading edge
	leading   bool      // the pending batch started after a quiet period: due at once
	timer     clock.Timer
	// kick wakes Run for a leading-edge batch without going through the
	// timer (so a fake clock needs no Step to fire it).
	kick chan struct{}
}

// NewDebouncer returns a debouncer over ordered keys. quiet <= 0 becomes
// 1ms; maxDelay < quiet is raised to quiet. clk may be nil (the real clock).
func NewDebouncer[K cmp.Ordered](quiet, maxDelay time.Duration, clk clock.Clock, fire func(ctx context.Context, keys []K)) *Debouncer[K] {
	return NewDebouncerFunc(quiet, maxDelay, clk, cmp.Compare[K], fire)
}

// NewDebouncerFunc is NewDebouncer for keys ordered by compare (a batch is
// fired sorted by it), e.g. a struct key.
func NewDebouncerFunc[K comparable](quiet, maxDelay time.Duration, clk clock.Clock, compare func(a, b K) int, fire func(ctx context.Context, keys []K)) *Debouncer[K] {
	if quiet <= 0 {
		quiet = time.Millisecond
	}
	if maxDelay < quiet {
		maxDelay = quiet
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := clk.NewTimer(time.Hour)
	t.Stop()
	return &Debouncer[K]{
		quiet: quiet, maxDelay: maxDelay, clock: clk, fire: fire, compare: compare,
		dirty: make(map[K]struct{}),
		timer: t,
		kick:  make(chan struct{}, 1),
	}
}

// Mark records keys as dirty and (re)arms the timer. It never blocks on
// the fire function.
func (d *Debouncer[K]) Mark(keys ...K) {
	if len(keys) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	if len(d.dirty) == 0 {
		d.firstMark = now
		d.leading = LeadingEdge(d.lastMark, now, d.quiet)
	}
	d.lastMark = now
	for _, k := range keys {
		d.dirty[k] = struct{}{}
	}
	if d.leading {
		select {
		case d.kick <- struct{}{}:
		default: // Run is already woken
		}
		return
	}
	d.armLocked(FireDeadline(d.firstMark, d.lastMark, d.quiet, d.maxDelay).Sub(now))
}

// LeadingEdge is the pure rule for the leading edge: a mark at now, with
// nothing pending, fires at once when the previous mark (zero: none) is at
// least quiet ago.
func LeadingEdge(prevMark, now time.Time, quiet time.Duration) bool {
	return prevMark.IsZero() || now.Sub(prevMark) >= quiet
}

func (d *Debouncer[K]) armLocked(wait time.Duration) {
	d.timer.Stop()
	select { // drop a tick that fired but was not read; the new arm supersedes it
	case <-d.timer.C():
	default:
	}
	d.timer.Reset(wait)
}

// Pending returns the number of dirty keys not yet fired.
func (d *Debouncer[K]) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.dirty)
}

// FireDeadline is the pure debounce rule: given the time of the first and
// the last pending mark, the batch is due at the earlier of lastMark+quiet
// and firstMark+maxDelay.
func FireDeadline(firstMark, lastMark time.Time, quiet, maxDelay time.Duration) time.Time {
	q := lastMark.Add(quiet)
	m := firstMark.Add(maxDelay)
	if m.Before(q) {
		return m
	}
	return q
}

// takeIfDue returns the sorted dirty keys and clears them when the batch is
// due; when it is not (a stale timer tick) it re-arms the timer.
func (d *Debouncer[K]) takeIfDue() []K {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.dirty) == 0 {
		return nil
	}
	now := d.clock.Now()
	due := FireDeadline(d.firstMark, d.lastMark, d.quiet, d.maxDelay)
	if d.leading {
		due = d.firstMark
	}
	if now.Before(due) {
		d.armLocked(due.Sub(now))
		return nil
	}
	keys := make([]K, 0, len(d.dirty))
	for k := range d.dirty {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, d.compare)
	clear(d.dirty)
	d.leading = false
	return keys
}

// Run fires batches until ctx is done. Keys still pending at exit are
// dropped (a new leader recomputes everything anyway).
func (d *Debouncer[K]) Run(ctx context.Context) {
	defer func() {
		d.mu.Lock()
		d.timer.Stop()
		d.mu.Unlock()
	}()
	c := d.timer.C()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c:
		case <-d.kick:
		}
		if keys := d.takeIfDue(); keys != nil {
			d.fire(ctx, keys)
		}
	}
}
