package sim

import (
	"sync"
	"sync/atomic"
	"time"

	metrics "github.com/hashicorp/go-metrics"
)

// Failure-detector events, counted from memberlist's own go-metrics
// counters (process-global: memberlist has no per-instance sink). They show
// when a mesh starts to churn: every suspicion of a live member costs a
// refutation (a fresh alive message) and, past the suspicion timeout, a
// dead declaration that a rejoin has to undo.
const (
	fdSuspect   = iota // memberlist.msg.suspect: suspect messages handled
	fdDead             // memberlist.msg.dead
	fdAlive            // memberlist.msg.alive (includes refutations)
	fdProbeFail        // memberlist.degraded.probe: a probe got no ack in time
	fdKinds
)

// FDSecond is one second of failure-detector events over all members.
type FDSecond struct {
	// At is the second's end, relative to the start of the update phase
	// (negative: before it).
	At                                float64
	Suspect, Dead, Alive, ProbeFailed int64
}

// fdSink is a go-metrics MetricSink counting the four events above.
type fdSink struct{ c [fdKinds]atomic.Int64 }

var (
	fdOnce   sync.Once
	fdGlobal = &fdSink{}
)

// installFDSink makes fdGlobal memberlist's (process-wide) metrics sink.
func installFDSink() *fdSink {
	fdOnce.Do(func() {
		cfg := metrics.DefaultConfig("")
		cfg.EnableHostname = false
		cfg.EnableRuntimeMetrics = false
		_, _ = metrics.NewGlobal(cfg, fdGlobal)
	})
	return fdGlobal
}

func fdKind(key []string) int {
	if len(key) < 3 || key[len(key)-3] != "memberlist" {
		return -1
	}
	// memberlist counts every packet through here: compare in place.
	group, name := key[len(key)-2], key[len(key)-1]
	switch {
	case group == "msg" && name == "suspect":
		return fdSuspect
	case group == "msg" && name == "dead":
		return fdDead
	case group == "msg" && name == "alive":
		return fdAlive
	case group == "degraded" && name == "probe":
		return fdProbeFail
	}
	return -1
}

func (s *fdSink) IncrCounter(key []string, val float32) {
	if k := fdKind(key); k >= 0 {
		s.c[k].Add(int64(val))
	}
}

func (s *fdSink) IncrCounterWithLabels(key []string, val float32, _ []metrics.Label) {
	s.IncrCounter(key, val)
}
func (*fdSink) SetGauge([]string, float32)                             {}
func (*fdSink) SetGaugeWithLabels([]string, float32, []metrics.Label)  {}
func (*fdSink) EmitKey([]string, float32)                              {}
func (*fdSink) AddSample([]string, float32)                            {}
func (*fdSink) AddSampleWithLabels([]string, float32, []metrics.Label) {}
func (s *fdSink) snapshot() (out [fdKinds]int64) {
	for i := range out {
		out[i] = s.c[i].Load()
	}
	return out
}

// fdRecorder samples the sink once a second into a timeline.
type fdRecorder struct {
	sink  *fdSink
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	secs  []FDSecond
	zero  time.Time // start of the update phase, once known
	mark  [fdKinds]int64
	times []time.Time
}

// fdQuietSeconds is how many quiet seconds in a row make a settled mesh.
const fdQuietSeconds = 3

func startFD(sink *fdSink) *fdRecorder {
	r := &fdRecorder{sink: sink, stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *fdRecorder) loop() {
	defer close(r.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prev := r.sink.snapshot()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			cur := r.sink.snapshot()
			r.mu.Lock()
			r.secs = append(r.secs, fdDiff(cur, prev))
			r.times = append(r.times, now)
			r.mu.Unlock()
			prev = cur
		}
	}
}

// markUpdates records the start of the update phase.
func (r *fdRecorder) markUpdates(t time.Time) {
	snap := r.sink.snapshot()
	r.mu.Lock()
	r.zero, r.mark = t, snap
	r.mu.Unlock()
}

// sinceMark sums the events since markUpdates.
func (r *fdRecorder) sinceMark() FDSecond {
	cur := r.sink.snapshot()
	r.mu.Lock()
	defer r.mu.Unlock()
	return fdDiff(cur, r.mark)
}

// fdDiff is the events between two snapshots of the sink.
func fdDiff(cur, prev [fdKinds]int64) FDSecond {
	return FDSecond{Suspect: cur[fdSuspect] - prev[fdSuspect], Dead: cur[fdDead] - prev[fdDead],
		Alive: cur[fdAlive] - prev[fdAlive], ProbeFailed: cur[fdProbeFail] - prev[fdProbeFail]}
}

// quiet reports whether the last k sampled seconds had no suspicion and
// no failed probe.
func (r *fdRecorder) quiet(k int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return quietTail(r.secs, k)
}

func quietTail(secs []FDSecond, k int) bool {
	if len(secs) < k {
		return false
	}
	for _, s := range secs[len(secs)-k:] {
		if s.Suspect != 0 || s.ProbeFailed != 0 {
			return false
		}
	}
	return true
}

// finish stops sampling and returns the timeline relative to the mark.
func (r *fdRecorder) finish() []FDSecond {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]FDSecond, len(r.secs))
	for i, s := range r.secs {
		if !r.zero.IsZero() {
			s.At = r.times[i].Sub(r.zero).Seconds()
		}
		out[i] = s
	}
	return out
}
