package kube

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

func TestFireDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q, m := 50*time.Millisecond, 500*time.Millisecond
	assert.Equal(t, t0.Add(q), FireDeadline(t0, t0, q, m))
	assert.Equal(t, t0.Add(130*time.Millisecond), FireDeadline(t0, t0.Add(80*time.Millisecond), q, m))
	assert.Equal(t, t0.Add(m), FireDeadline(t0, t0.Add(480*time.Millisecond), q, m), "max delay caps the quiet period")
	assert.Equal(t, t0.Add(m), FireDeadline(t0, t0.Add(time.Hour), q, m))
}

type debounceRig struct {
	clk     *testingclock.FakeClock
	d       *Debouncer[string]
	batches chan []string
	cancel  context.CancelFunc
	done    chan struct{}
}

func newRig(t *testing.T, quiet, maxDelay time.Duration) *debounceRig {
	r := &debounceRig{clk: testingclock.NewFakeClock(time.Unix(1000, 0)), batches: make(chan []string, 16), done: make(chan struct{})}
	r.d = NewDebouncer[string](quiet, maxDelay, r.clk, func(_ context.Context, keys []string) { r.batches <- keys })
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); r.d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func (r *debounceRig) expectBatch(t *testing.T, want ...string) {
	t.Helper()
	select {
	case got := <-r.batches:
		assert.Equal(t, want, got)
	case <-time.After(5 * time.Second):
		t.Fatalf("no batch fired; want %v", want)
	}
}

func (r *debounceRig) expectNone(t *testing.T) {
	t.Helper()
	select {
	case got := <-r.batches:
		t.Fatalf("unexpected batch %v", got)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestLeadingEdge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	q := 50 * time.Millisecond
	assert.True(t, LeadingEdge(time.Time{}, t0, q), "no previous mark")
	assert.True(t, LeadingEdge(t0, t0.Add(q), q), "a full quiet period since the last mark")
	assert.False(t, LeadingEdge(t0, t0.Add(q-time.Nanosecond), q), "inside the quiet period: a burst")
}

// lead fires the leading edge of a burst: a mark after a quiet period is
// handed to fire at once, without the clock moving.
func (r *debounceRig) lead(t *testing.T, key string) {
	t.Helper()
	r.d.Mark(key)
	r.expectBatch(t, key)
}

func TestDebouncerLeadingEdgeFiresAtOnce(t *testing.T) {
	r := newRig(t, 50*time.Millisecond, 500*time.Millisecond)
	// First change ever: no delay at all (the fake clock never moves).
	r.lead(t, "a")
	assert.Equal(t, 0, r.d.Pending())
	// A change right after it is part of a burst: batched by the quiet period.
	r.clk.Step(10 * time.Millisecond)
	r.d.Mark("b")
	r.expectNone(t)
	r.clk.Step(49 * time.Millisecond)
	r.expectNone(t)
	r.clk.Step(time.Millisecond)
	r.expectBatch(t, "b")
	// A full quiet period after the last mark: the next change is a new
	// leading edge and fires at once again.
	r.clk.Step(50 * time.Millisecond)
	r.lead(t, "c")
	// Just under a quiet period after "c": batched.
	r.clk.Step(49 * time.Millisecond)
	r.d.Mark("d")
	r.expectNone(t)
	r.clk.Step(50 * time.Millisecond)
	r.expectBatch(t, "d")
}

func TestDebouncerQuietPeriod(t *testing.T) {
	r := newRig(t, 50*time.Millisecond, 500*time.Millisecond)
	r.lead(t, "lead")
	r.d.Mark("b", "a")
	r.d.Mark("a")
	assert.Equal(t, 2, r.d.Pending())
	r.clk.Step(49 * time.Millisecond)
	r.expectNone(t)
	r.clk.Step(time.Millisecond)
	r.expectBatch(t, "a", "b")
	assert.Equal(t, 0, r.d.Pending())
	// nothing pending: time passing fires nothing
	r.clk.Step(time.Second)
	r.expectNone(t)
}

func TestDebouncerMarkExtendsQuiet(t *testing.T) {
	r := newRig(t, 50*time.Millisecond, 500*time.Millisecond)
	r.lead(t, "lead")
	r.d.Mark("a")
	r.clk.Step(40 * time.Millisecond)
	r.d.Mark("b")
	r.clk.Step(40 * time.Millisecond) // 80ms: first deadline passed, but b extended it to 90
	r.expectNone(t)
	r.clk.Step(10 * time.Millisecond)
	r.expectBatch(t, "a", "b")
}

func TestDebouncerMaxDelayUnderChurn(t *testing.T) {
	r := newRig(t, 50*time.Millisecond, 500*time.Millisecond)
	r.lead(t, "lead")
	// a mark every 30ms never leaves a 50ms quiet gap
	for i := 0; i < 16; i++ { // marks at 0..450ms
		r.d.Mark("k")
		r.clk.Step(30 * time.Millisecond)
		r.expectNone(t)
	}
	// now at 480ms; one more mark, then the 500ms cap fires
	r.d.Mark("last")
	r.clk.Step(19 * time.Millisecond)
	r.expectNone(t)
	r.clk.Step(time.Millisecond)
	r.expectBatch(t, "k", "last")
	// churn continues right after the cap fired: still a burst, a fresh window
	r.d.Mark("z")
	r.clk.Step(49 * time.Millisecond)
	r.expectNone(t)
	r.clk.Step(time.Millisecond)
	r.expectBatch(t, "z")
}

func TestDebouncerMarksDuringFireFormNextBatch(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	entered, release := make(chan []string, 4), make(chan struct{})
	d := NewDebouncer[string](10*time.Millisecond, 100*time.Millisecond, clk, func(_ context.Context, keys []string) {
		entered <- keys
		<-release
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); close(release); <-done }()

	d.Mark("a") // leading edge: fires without the clock moving
	select {
	case got := <-entered:
		assert.Equal(t, []string{"a"}, got)
	case <-time.After(5 * time.Second):
		t.Fatal("first batch did not fire")
	}
	// fire is blocked; marks keep accumulating (a burst: the first is 0 ms
	// after "a") and time passes beyond due
	d.Mark("b")
	clk.Step(10 * time.Millisecond)
	d.Mark("c")
	clk.Step(10 * time.Millisecond)
	require.Equal(t, 2, d.Pending())
	release <- struct{}{}
	select {
	case got := <-entered:
		assert.Equal(t, []string{"b", "c"}, got)
	case <-time.After(5 * time.Second):
		t.Fatal("second batch did not fire")
	}
	release <- struct{}{}
}

func TestDebouncerStopsOnCancel(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	d := NewDebouncer[int](time.Millisecond, 0, clk, func(context.Context, []int) { t.Error("must not fire") })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	cancel()
	<-done
	d.Mark(1) // Mark after Run exits must not block
	assert.Equal(t, 1, d.Pending())
}

func TestDebouncerRealClock(t *testing.T) {
	got := make(chan []int, 1)
	d := NewDebouncer[int](5*time.Millisecond, 50*time.Millisecond, nil, func(_ context.Context, k []int) { got <- k })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	d.Mark(3, 1, 2)
	select {
	case k := <-got:
		assert.Equal(t, []int{1, 2, 3}, k)
	case <-time.After(5 * time.Second):
		t.Fatal("real-clock debouncer never fired")
	}
}

func BenchmarkDebouncerMark(b *testing.B) {
	d := NewDebouncer[string](time.Hour, time.Hour, nil, func(context.Context, []string) {})
	keys := []string{"a/b/c", "a/b/d"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		d.Mark(keys...)
	}
}
