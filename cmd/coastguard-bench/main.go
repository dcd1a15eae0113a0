// Command coastguard-bench measures every performance goal of coastguard
// in one run and writes bench/results.json, a Markdown table (stdout and
// bench/results.md) and plots (bench/propagation.svg: end-to-end latency CDF;
// bench/sim.svg: simulated p99 latency versus mesh size, ours and naive).
//
//	go run ./cmd/coastguard-bench -out bench          # make bench (~20 min)
//	go run ./cmd/coastguard-bench -out bench -quick   # make bench-quick (~2 min)
//
// Sections (-only picks a comma list): e2e (real apiservers: propagation and
// churn), sim (in-process gossip meshes, ours and the naive baseline side by
// side), bytes, heal, enforce, store.
//
// Absolute figures depend on the machine; the tool prints it. Ratios against
// the naive baseline measured in the same run are what survive a noisy
// shared machine. Nothing here asserts a time: the exit status is non-zero
// only when a measurement could not be taken.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Metric is one measured figure.
type Metric struct {
	Name   string         `json:"name"`
	Value  float64        `json:"value"`
	Unit   string         `json:"unit"`
	Params map[string]any `json:"params,omitempty"`
	// Target is the goal from issue 10 in words ("<= 150"), empty if none.
	Target string `json:"target,omitempty"`
	// Met reports whether Value meets Target (nil: no target).
	Met *bool `json:"met,omitempty"`
}

// MarshalJSON writes a value that is not a finite number (a miss: +Inf; a
// figure that could not be computed: NaN) as JSON null plus a "missing"
// field naming it, instead of failing the whole report (encoding/json
// rejects NaN and ±Inf). The params say why (for example received=x/y).
func (m Metric) MarshalJSON() ([]byte, error) {
	type plain Metric // no methods: no recursion
	out := struct {
		plain
		Value   *float64 `json:"value"`
		Missing string   `json:"missing,omitempty"`
	}{plain: plain(m)}
	// Params may hold non-finite floats too (p50_ms of a mesh that missed).
	if len(m.Params) > 0 {
		ps := make(map[string]any, len(m.Params))
		for k, v := range m.Params {
			if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
				v = fmtValue(f)
			}
			ps[k] = v
		}
		out.Params = ps
	}
	switch v := m.Value; {
	case math.IsInf(v, 1):
		out.Missing = "inf"
	case math.IsInf(v, -1):
		out.Missing = "-inf"
	case math.IsNaN(v):
		out.Missing = "nan"
	default:
		out.Value = &v
	}
	return json.Marshal(out)
}

// ratio is num/den for figures that are non-negative by nature (latencies,
// byte counts). Anything else (a negative operand, a zero or non-finite
// denominator) is NaN, recorded as null with missing=nan: a ratio is never
// negative and never a division artefact.
func ratio(num, den float64) float64 {
	if num < 0 || den <= 0 || math.IsNaN(num) || math.IsInf(den, 0) || math.IsNaN(den) {
		return math.NaN()
	}
	return num / den
}

// Report is bench/results.json.
type Report struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Quick    bool      `json:"quick"`
	Seed     uint64    `json:"seed"`
	Machine  Machine   `json:"machine"`
	Metrics  []Metric  `json:"metrics"`
	Errors   []string  `json:"errors,omitempty"`
}

type config struct {
	out   string
	quick bool
	only  map[string]bool
	seed  uint64
	log   *slog.Logger
	simN  []int
	// simProfiles are the timing profiles used with simN.
	simProfiles []string
	// simUnsigned runs the simulated coastguard members without signing
	// keys (the pre-issue-29 cost, for comparison).
	simUnsigned bool
}

func (c *config) want(section string) bool { return len(c.only) == 0 || c.only[section] }

// recorder collects metrics in order.
type recorder struct {
	metrics []Metric
	// series for the plots
	e2eLatencies []time.Duration
	simPoints    []simPoint
}

type simPoint struct {
	Mode    string
	Profile string
	N       int
	P99ms   float64
}

func (r *recorder) add(name string, value float64, unit string, params map[string]any, target string, met func(float64) bool) {
	m := Metric{Name: name, Value: round(value), Unit: unit, Params: params, Target: target}
	// A miss (+Inf: not every update was delivered) is measured and misses
	// its target; NaN (not computable) is neither met nor missed.
	if met != nil && !math.IsNaN(value) {
		ok := met(value)
		m.Met = &ok
	}
	r.metrics = append(r.metrics, m)
	slog.Info("metric", "name", name, "value", m.Value, "unit", unit)
}

func round(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	switch a := math.Abs(v); {
	case a >= 100:
		return math.Round(v)
	case a >= 1:
		return math.Round(v*100) / 100
	default:
		return math.Round(v*10000) / 10000
	}
}

func le(limit float64) func(float64) bool { return func(v float64) bool { return v <= limit } }

// cliFlags is the command line as parsed, before validation.
type cliFlags struct {
	out, only, simNs, simProfiles string
	simChild, joinChild           string
	quick, verbose, simUnsigned   bool
	seed                          uint64
}

// parseFlags declares the flags and parses the command line.
func parseFlags() cliFlags {
	var f cliFlags
	flag.StringVar(&f.out, "out", "bench", "output directory (results.json, results.md, *.svg)")
	flag.BoolVar(&f.quick, "quick", false, "small sizes and short durations (~2 min); for CI, asserts nothing")
	flag.StringVar(&f.only, "only", "", "comma list of sections: e2e,sim,bytes,traffic,heal,enforce,store,reach,sign,join,packets,services (default all)")
	flag.Uint64Var(&f.seed, "seed", 20261122, "seed for every generated workload")
	flag.BoolVar(&f.verbose, "v", false, "debug logging")
	flag.StringVar(&f.simNs, "sim-n", "", "comma list of mesh sizes for the sim section, run with both LAN and WAN timings (default: LAN 10,50,100,300 and WAN 300)")
	flag.StringVar(&f.simProfiles, "sim-profiles", "lan,wan", "timing profiles used with -sim-n")
	flag.BoolVar(&f.simUnsigned, "sim-unsigned", false, "simulate coastguard members without signing keys (default: signed entries, state marks and membership, as deployed)")
	flag.DurationVar(&simTimeoutOverride, "sim-timeout", 0, "deadline of one simulated mesh in the sim section (default 90s + 0.6s*N)")
	flag.StringVar(&f.simChild, "sim-child", "", "internal: run one simulation (JSON options) and print its JSON result")
	flag.StringVar(&f.joinChild, "join-child", "", "internal: run the join section's cluster set (JSON options) until stdin closes")
	flag.Parse()
	return f
}

func main() {
	f := parseFlags()
	if f.simChild != "" {
		os.Exit(simChildMain(f.simChild))
	}
	if f.joinChild != "" {
		os.Exit(joinChildMain(f.joinChild))
	}

	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)
	cfg, err := f.config(logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(run(cfg))
}

// config validates the parsed flags into the run's configuration.
func (f cliFlags) config(logger *slog.Logger) (*config, error) {
	only, errOnly := parseSections(f.only)
	simN, errN := parseSimNs(f.simNs)
	profiles, errProfiles := parseSimProfiles(f.simProfiles)
	if err := cmp.Or(errOnly, errN, errProfiles); err != nil {
		return nil, err // the first bad flag, in this order
	}
	return &config{out: f.out, quick: f.quick, seed: f.seed, log: logger, only: only,
		simN: simN, simProfiles: profiles, simUnsigned: f.simUnsigned}, nil
}

// parseSections parses -only into the set of sections to run.
func parseSections(only string) (map[string]bool, error) {
	known := map[string]bool{"traffic": true, "e2e": true, "sim": true, "bytes": true, "heal": true, "enforce": true, "store": true, "reach": true, "sign": true, "join": true, "packets": true, "services": true}
	out := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !known[s] {
				return nil, fmt.Errorf("unknown section %q (want e2e,sim,bytes,traffic,heal,enforce,store,reach,sign,join,packets,services)", s)
			}
			out[s] = true
		}
	}
	return out, nil
}

// parseSimNs parses -sim-n: mesh sizes of at least 2.
func parseSimNs(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 2 {
			return nil, fmt.Errorf("bad -sim-n entry %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// parseSimProfiles parses -sim-profiles: lan, wan or local.
func parseSimProfiles(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		switch p = strings.TrimSpace(p); p {
		case "lan", "wan", "local":
			out = append(out, p)
		case "":
		default:
			return nil, fmt.Errorf("bad -sim-profiles entry %q (want lan, wan, local)", p)
		}
	}
	return out, nil
}

// section is one part of the bench, run when -only selects it.
type section struct {
	name string
	run  func(context.Context, *config, *recorder) error
}

// sections lists every section in the order they run.
func sections() []section {
	return []section{
		// Cheap, CPU-bound sections first; the real-apiserver section
		// starts processes and is the most expensive.
		{"enforce", runEnforce},
		{"store", runStore},
		{"bytes", runBytes},
		{"traffic", runTraffic},
		{"sim", runSim},
		{"heal", runHeal},
		{"e2e", runE2E},
		{"packets", runPackets},   // real dataplane: pod Running -> first allowed connection (packets.go)
		{"reach", runReach},       // kubectl coastguard conflicts engine (reach.go)
		{"sign", runSign},         // origin signature cost (sign.go)
		{"join", runJoin},         // a new cluster joining a signed set (join.go)
		{"services", runServices}, // the exported-Service kind's cost (services.go)
	}
}

// run runs the selected sections, writes the report into cfg.out and returns
// the exit code: 1 if a section failed or the report could not be written.
func run(cfg *config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := Report{Started: time.Now().UTC(), Quick: cfg.quick, Seed: cfg.seed, Machine: describeMachine()}
	rec := &recorder{}
	fmt.Fprintf(os.Stderr, "coastguard-bench: %s\n", rep.Machine)
	fmt.Fprintln(os.Stderr, "NOTE: figures come from a shared machine (2 cores shared with other jobs); absolute times are noisy, same-run ratios are the comparable figures.")

	rep.Errors = runSections(ctx, cfg, rec)
	rep.Metrics = rec.metrics
	rep.Duration = time.Since(rep.Started).Round(time.Second).String()

	if err := writeReport(cfg.out, rep, rec); err != nil {
		fmt.Fprintln(os.Stderr, "coastguard-bench:", err)
		return 1
	}
	if len(rep.Errors) > 0 {
		fmt.Fprintf(os.Stderr, "coastguard-bench: %d section(s) failed\n", len(rep.Errors))
		return 1
	}
	return 0
}

// runSections runs the sections cfg selects in order, until ctx ends, and
// returns the failures as "section: error".
func runSections(ctx context.Context, cfg *config, rec *recorder) []string {
	var failed []string
	for _, s := range sections() {
		if !cfg.want(s.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		began := time.Now()
		slog.Info("section start", "section", s.name)
		err := s.run(ctx, cfg, rec)
		slog.Info("section done", "section", s.name, "took", time.Since(began).Round(time.Millisecond))
		if err != nil {
			slog.Error("section failed", "section", s.name, "err", err)
			failed = append(failed, fmt.Sprintf("%s: %v", s.name, err))
		}
		runtime.GC()
	}
	return failed
}

// writeReport prints the Markdown table and writes results.json,
// results.md and the plots into dir.
func writeReport(dir string, rep Report, rec *recorder) error {
	table := markdown(rep)
	fmt.Print(table)
	var errs []error
	if b, err := json.MarshalIndent(rep, "", "  "); err != nil {
		errs = append(errs, err)
	} else if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		errs = append(errs, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(table), 0o644); err != nil {
		errs = append(errs, err)
	}
	if err := writePlots(dir, rec); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// markdown renders the report as a Markdown table.
func markdown(rep Report) string {
	var b strings.Builder
	mode := "full"
	if rep.Quick {
		mode = "quick (smaller sizes, shorter windows)"
	}
	fmt.Fprintf(&b, "\n## coastguard-bench %s, %s run, took %s\n\n", rep.Started.Format("2006-01-02 15:04 UTC"), mode, rep.Duration)
	fmt.Fprintf(&b, "Machine: %s. Figures come from a shared 2-core machine (other jobs running); compare the same-run ratios rather than absolute times. Seed %d.\n\n", rep.Machine, rep.Seed)
	b.WriteString("| metric | value | unit | target | met | params |\n|---|---:|---|---|---|---|\n")
	for _, m := range rep.Metrics {
		met := ""
		if m.Met != nil {
			met = "no"
			if *m.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", m.Name, fmtValue(m.Value), m.Unit, m.Target, met, fmtParams(m.Params))
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(&b, "\n**Failed:** %s\n", e)
	}
	return b.String()
}

func fmtValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsNaN(v):
		return "n/a"
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%g", v)
	}
}

func fmtParams(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, p[k]))
	}
	return strings.ReplaceAll(strings.Join(parts, " "), "|", "/")
}

// percentile of sorted durations (nearest rank), in milliseconds.
func percentileMS(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	idx := int(math.Ceil(p*float64(len(sorted)))) - 1
	idx = max(0, min(idx, len(sorted)-1))
	return float64(sorted[idx]) / float64(time.Millisecond)
}

func sortDurations(d []time.Duration) []time.Duration {
	out := append([]time.Duration(nil), d...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// removeScratch deletes a section's scratch directory. A failure leaves files
// in the temp dir but changes none of the section's figures, so it is logged.
func removeScratch(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		slog.Warn("cannot remove scratch directory", "dir", dir, "err", err)
	}
}
