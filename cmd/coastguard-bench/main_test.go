package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
)

func TestPercentileNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	s := sortDurations(d)
	require.Equal(t, 50.0, percentileMS(s, 0.50))
	require.Equal(t, 99.0, percentileMS(s, 0.99))
	require.Equal(t, 100.0, percentileMS(s, 1))
	require.True(t, math.IsNaN(percentileMS(nil, 0.5)))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
}

func TestRecorderTargetsAndMarkdown(t *testing.T) {
	rec := &recorder{}
	rec.add("a_ms", 120.456, "ms", map[string]any{"n": 3, "x": "a|b"}, "<= 150", le(150))
	rec.add("b_ms", 600, "ms", nil, "<= 500", le(500))
	rec.add("c", math.Inf(1), "ms", nil, "<= 1", le(1))
	require.True(t, *rec.metrics[0].Met)
	require.False(t, *rec.metrics[1].Met)
	require.False(t, *rec.metrics[2].Met, "a miss (+Inf) misses its target")
	require.Equal(t, 120.0, rec.metrics[0].Value)
	md := markdown(Report{Started: time.Unix(0, 0).UTC(), Machine: Machine{CPUs: 2}, Metrics: rec.metrics, Errors: []string{"sim: boom"}})
	require.Contains(t, md, "| a_ms | 120 | ms | <= 150 | yes | n=3 x=a/b |")
	require.Contains(t, md, "| b_ms | 600 | ms | <= 500 | no |")
	require.Contains(t, md, "| c | inf |")
	require.Contains(t, md, "shared 2-core machine")
	require.Contains(t, md, "**Failed:** sim: boom")
}

func TestPlotsAreWritten(t *testing.T) {
	dir := t.TempDir()
	rec := &recorder{}
	for i := 1; i <= 50; i++ {
		rec.e2eLatencies = append(rec.e2eLatencies, time.Duration(i*7)*time.Millisecond)
	}
	rec.simPoints = []simPoint{{"coastguard", "lan", 10, 120}, {"coastguard", "lan", 50, 200}, {"naive", "lan", 10, 400}, {"naive", "lan", 50, math.Inf(1)}}
	require.NoError(t, writePlots(dir, rec))
	for _, f := range []string{"propagation.svg", "propagation.png", "sim.svg", "sim.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		require.Greater(t, st.Size(), int64(1000), f)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sim.svg"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(b), "naive lan") && strings.Contains(string(b), "coastguard lan"))
}

// The workload generator feeds model's mirror (the daemon's) genuine crdt changes;
// a pod change through Mirror.Apply + Outputs.Recompute must give the same
// NetworkPolicies as a full translation.
func TestWorkloadIncrementalMatchesFull(t *testing.T) {
	sc := enforceScale{name: "t", clusters: 3, pods: 60, ns: 4, policies: 20, apps: 6}
	w, changes, err := newWorkload(sc, 1)
	require.NoError(t, err)
	m := model.NewMirror(origin(0))
	res := m.Apply(changes)
	require.Empty(t, res.Errors)
	out := model.NewOutputs(origin(0))
	out.Recompute(m.Inventory(), nil, true)
	require.Len(t, m.Inventory().Policies(), 20)
	for k := 0; k < 30; k++ {
		chs, err := w.podChange(k)
		require.NoError(t, err)
		r := m.Apply(chs)
		require.Empty(t, r.Errors)
		out.Recompute(m.Inventory(), r.Affected, r.All)
	}
	full := enforce.Translate(origin(0), m.Inventory())
	require.NotEmpty(t, full)
	require.Equal(t, full, out.Desired())
}

func TestEnforceSectionQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 20k-pod inventory")
	}
	rec := &recorder{}
	require.NoError(t, runEnforce(context.Background(), &config{quick: true, seed: 1}, rec))
	names := map[string]int{}
	for _, m := range rec.metrics {
		names[m.Name]++
		require.False(t, math.IsNaN(m.Value), m.Name)
		require.Greater(t, m.Value, 0.0, m.Name)
	}
	require.Equal(t, 2, names["enforce_incremental_daemon_ms"])
	require.Equal(t, 2, names["enforce_full_ms"])
}

func TestBytesBreakdownSmallMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets, ~10s")
	}
	rec := &recorder{}
	require.NoError(t, runBytesBreakdown(context.Background(), &config{seed: 1}, rec, 4, 5))
	require.Len(t, rec.metrics, 1)
	m := rec.metrics[0]
	require.Greater(t, m.Value, 0.0)
	msgs := m.Params["coastguard_msgs_by_type"].(map[string]any)
	require.Greater(t, msgs["push"].(float64), 0.0, "the writer pushes every update")
	t.Logf("%s", fmtParams(m.Params))
}

// A mesh that misses deliveries yields +Inf latencies and NaN ratios: the
// report is still written, the miss is null with missing=inf and the
// received count in its params, and no ratio is negative.
func TestReportWithMissesIsWritten(t *testing.T) {
	rec := &recorder{}
	rec.add("sim_propagation_p99_ms", math.Inf(1), "ms", map[string]any{"received": "4395/4485", "p50_ms": math.Inf(1)}, "<= 1000", le(1000))
	rec.add("sim_p99_ratio_ours_over_naive", ratio(math.Inf(1), 316), "ratio", nil, "< 1", func(v float64) bool { return v < 1 })
	rec.add("sim_p99_ratio_inf_over_inf", ratio(math.Inf(1), math.Inf(1)), "ratio", nil, "< 1", func(v float64) bool { return v < 1 })
	rec.add("bytes_ratio_of_negative", ratio(-15.6, 307), "ratio", nil, "<= 2", le(2))
	rec.add("ok_ms", 12.5, "ms", nil, "", nil)
	b, err := json.Marshal(Report{Metrics: rec.metrics})
	require.NoError(t, err, "json must accept misses")

	var back struct {
		Metrics []struct {
			Name    string         `json:"name"`
			Value   *float64       `json:"value"`
			Missing string         `json:"missing"`
			Met     *bool          `json:"met"`
			Params  map[string]any `json:"params"`
		} `json:"metrics"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Len(t, back.Metrics, 5)
	miss := back.Metrics[0]
	require.Nil(t, miss.Value)
	require.Equal(t, "inf", miss.Missing)
	require.Equal(t, "4395/4485", miss.Params["received"])
	require.Equal(t, "inf", miss.Params["p50_ms"], "non-finite params are written as text")
	require.NotNil(t, miss.Met)
	require.False(t, *miss.Met)
	require.Nil(t, back.Metrics[1].Value, "a miss over a finite baseline is a miss")
	require.Equal(t, "inf", back.Metrics[1].Missing)
	require.False(t, *back.Metrics[1].Met)
	require.Nil(t, back.Metrics[2].Value)
	require.Equal(t, "nan", back.Metrics[2].Missing)
	require.Nil(t, back.Metrics[2].Met, "inf/inf is not computable: neither met nor missed")
	require.Nil(t, back.Metrics[3].Value, "a ratio of a negative figure is not recorded as a negative ratio")
	require.NotNil(t, back.Metrics[4].Value)
	require.Equal(t, 12.5, *back.Metrics[4].Value)
	require.Empty(t, back.Metrics[4].Missing)

	md := markdown(Report{Metrics: rec.metrics})
	require.Contains(t, md, "| sim_propagation_p99_ms | inf | ms | <= 1000 | no | p50_ms=+Inf received=4395/4485 |")
	require.Contains(t, md, "| sim_p99_ratio_ours_over_naive | inf |")
	require.Contains(t, md, "| bytes_ratio_of_negative | n/a |")
}

func TestRatioNeverNegative(t *testing.T) {
	require.Equal(t, 0.5, ratio(1, 2))
	require.Equal(t, 0.0, ratio(0, 2))
	for _, c := range [][2]float64{{-1, 2}, {1, 0}, {1, -2}, {math.NaN(), 1}, {1, math.Inf(1)}, {math.Inf(1), math.Inf(1)}} {
		require.True(t, math.IsNaN(ratio(c[0], c[1])), "%v", c)
	}
	require.True(t, math.IsInf(ratio(math.Inf(1), 2), 1), "a miss over a finite baseline stays a miss")
}
