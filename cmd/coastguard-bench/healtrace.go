package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// healTrace records the gossip nodes' debug events (Node.trace) with their
// time, so that a slow heal can be explained: which message finally closed
// the last gap. Enabled by COASTGUARD_HEAL_TRACE=<dir>; off otherwise.
type healTrace struct {
	mu     sync.Mutex
	lines  []traceLine
	active bool
}

type traceLine struct {
	at   time.Time
	text string
}

func newHealTrace() *healTrace {
	if os.Getenv("COASTGUARD_HEAL_TRACE") == "" {
		return nil
	}
	return &healTrace{}
}

func (t *healTrace) logger() *slog.Logger {
	if t == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(&traceHandler{t: t})
}

func (t *healTrace) start() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.active, t.lines = true, nil
	t.mu.Unlock()
}

// dump writes the events from t0 on to the trace dir, named by run, and
// prints those of the slowest node and origin.
func (t *healTrace) dump(run int, t0 time.Time, node, origin string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	dir := os.Getenv("COASTGUARD_HEAL_TRACE")
	var b strings.Builder
	for _, l := range t.lines {
		fmt.Fprintf(&b, "%6d %s\n", l.at.Sub(t0).Milliseconds(), l.text)
	}
	_ = os.MkdirAll(dir, 0o755)
	_ = os.WriteFile(fmt.Sprintf("%s/run%d.txt", dir, run), []byte(b.String()), 0o644)
	fmt.Fprintf(os.Stderr, "heal trace run %d: slowest %s <- %s\n", run, node, origin)
	for _, l := range t.lines {
		if l.at.After(t0) && strings.Contains(l.text, "node="+node+" ") && relevant(l.text, origin) {
			fmt.Fprintf(os.Stderr, "  %6d %s\n", l.at.Sub(t0).Milliseconds(), l.text)
		}
	}
}

// relevant: an event about origin, or an anti-entropy round.
func relevant(text, origin string) bool {
	for _, s := range []string{"origin=" + origin + " ", "TR tick", "TR sum", "TR dig"} {
		if strings.Contains(text, s) {
			return true
		}
	}
	return false
}

type traceHandler struct {
	t     *healTrace
	attrs string
}

func (h *traceHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *traceHandler) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "TR ") {
		return nil
	}
	var b strings.Builder
	b.WriteString(h.attrs)
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.t.mu.Lock()
	if h.t.active {
		h.t.lines = append(h.t.lines, traceLine{r.Time, b.String()})
	}
	h.t.mu.Unlock()
	return nil
}

func (h *traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		if a.Key == "node" {
			fmt.Fprintf(&b, "node=%v ", a.Value)
		}
	}
	return &traceHandler{t: h.t, attrs: b.String()}
}

func (h *traceHandler) WithGroup(string) slog.Handler { return h }
