//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Convergence after each fault (issue 34): when a fault has healed, the
// workload pauses and the nemesis measures how long every cluster takes to
// admit exactly what the inputs of that moment say (n.converged). A fault
// after which the set does not converge within nemesisConvergence fails
// the run; every measurement is written to
// .cache/nemesis-settle-<seed>.json for hack/nemesis-report.

// settleRecord is one measured heal.
type settleRecord struct {
	Fault   string  `json:"fault"`
	At      float64 `json:"at_s"`      // seconds into the run when the fault healed
	Settled float64 `json:"settled_s"` // time from the heal until every cluster converged
}

// settleFile is what a run writes.
type settleFile struct {
	Seed     uint64         `json:"seed"`
	Duration string         `json:"duration"`
	Faults   map[string]int `json:"faults"`
	Settles  []settleRecord `json:"settles"`
}

// withSettle runs one fault step and, if it injected a fault, measures the
// convergence after its heal.
func (n *nemesis) withSettle(ctx context.Context, fault func(context.Context)) {
	n.mu.Lock()
	n.stepFault = ""
	n.mu.Unlock()
	fault(ctx)
	n.mu.Lock()
	kind := n.stepFault
	n.mu.Unlock()
	if kind == "" {
		return
	}
	healed := time.Now()
	if err := n.converged(ctx, nemesisConvergence); err != nil {
		n.t.Fatalf("after %s: %v", kind, err)
	}
	d := time.Since(healed)
	n.log("converged %s after the %s healed", d.Round(time.Millisecond), kind)
	n.mu.Lock()
	n.settles = append(n.settles, settleRecord{Fault: kind, At: healed.Sub(n.start).Seconds(), Settled: d.Seconds()})
	n.mu.Unlock()
}

// settleSummary is one line per fault kind: count, p50, p99, max (seconds).
func settleSummary(rs []settleRecord) []string {
	by := map[string][]float64{}
	for _, r := range rs {
		by[r.Fault] = append(by[r.Fault], r.Settled)
	}
	kinds := make([]string, 0, len(by))
	for k := range by {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		v := by[k]
		slices.Sort(v)
		out = append(out, fmt.Sprintf("%-18s n=%-3d p50 %6.2fs  p99 %6.2fs  max %6.2fs", k, len(v), quantile(v, 0.5), quantile(v, 0.99), v[len(v)-1]))
	}
	return out
}

// quantile of sorted v by nearest rank.
func quantile(v []float64, q float64) float64 {
	i := int(q*float64(len(v))+0.999999) - 1
	return v[max(0, min(i, len(v)-1))]
}

// writeSettles saves the run's measurements (called from the test's cleanup
// with n.mu held).
func (n *nemesis) writeSettles(seed uint64, dur time.Duration) (string, error) {
	n.mu.Lock()
	b, err := json.MarshalIndent(settleFile{Seed: seed, Duration: dur.String(), Faults: n.faults, Settles: n.settles}, "", " ")
	n.mu.Unlock()
	if err != nil {
		return "", err
	}
	path := repoPath(".cache", fmt.Sprintf("nemesis-settle-%d.json", seed))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, b, 0o644)
}

func (n *nemesis) logSettles() {
	n.t.Logf("nemesis convergence after each healed fault:\n  %s", strings.Join(settleSummary(n.settles), "\n  "))
}

func TestNemesisSettleSummary(t *testing.T) {
	rs := []settleRecord{{Fault: "partition", Settled: 3}, {Fault: "partition", Settled: 1}, {Fault: "kill -9", Settled: 0.5},
		{Fault: "partition", Settled: 2}}
	got := settleSummary(rs)
	require.Equal(t, []string{
		"kill -9            n=1   p50   0.50s  p99   0.50s  max   0.50s",
		"partition          n=3   p50   2.00s  p99   3.00s  max   3.00s",
	}, got)
	require.Equal(t, 1.0, quantile([]float64{1, 2, 3, 4}, 0.25))
	require.Equal(t, 4.0, quantile([]float64{1, 2, 3, 4}, 0.99))
}
