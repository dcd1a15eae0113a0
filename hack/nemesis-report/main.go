// Command nemesis-report aggregates the per-run convergence measurements
// the nemesis writes (.cache/nemesis-settle-<seed>.json, see
// test/e2e/nemesis_settle_test.go) into the markdown tables of
// docs/RELIABILITY.md and an SVG strip plot of convergence time by fault
// type.
//
//	go run ./hack/nemesis-report -svg docs/nemesis-settle.svg .cache/nemesis-settle-*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

type record struct {
	Fault   string  `json:"fault"`
	At      float64 `json:"at_s"`
	Settled float64 `json:"settled_s"`
}

type run struct {
	Seed     uint64         `json:"seed"`
	Duration string         `json:"duration"`
	Faults   map[string]int `json:"faults"`
	Settles  []record       `json:"settles"`
}

func main() {
	svg := flag.String("svg", "", "write the strip plot here")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: nemesis-report [-svg FILE] RUN.json...")
		os.Exit(2)
	}
	runs, err := load(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "nemesis-report:", err)
		os.Exit(1)
	}
	byFault := group(runs)
	if err := writeTables(os.Stdout, runs, byFault); err != nil {
		fmt.Fprintln(os.Stderr, "nemesis-report:", err)
		os.Exit(1)
	}
	if *svg != "" {
		if err := os.WriteFile(*svg, []byte(plot(byFault)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "nemesis-report:", err)
			os.Exit(1)
		}
	}
}

func load(paths []string) ([]run, error) {
	var runs []run
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r run
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Seed < runs[j].Seed })
	return runs, nil
}

// group collects every run's settle times by fault type, sorted.
func group(runs []run) map[string][]float64 {
	by := map[string][]float64{}
	for _, r := range runs {
		for _, s := range r.Settles {
			by[s.Fault] = append(by[s.Fault], s.Settled)
		}
	}
	for _, v := range by {
		slices.Sort(v)
	}
	return by
}

// quantile of sorted v by nearest rank.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	i := int(q*float64(len(v))+0.999999) - 1
	return v[max(0, min(i, len(v)-1))]
}

func writeTables(out io.Writer, runs []run, by map[string][]float64) error {
	var w strings.Builder
	fmt.Fprintln(&w, "| seed | duration | faults injected | heals measured | convergence p50 / p99 / max (s) |")
	fmt.Fprintln(&w, "|---|---|---|---:|---|")
	for _, r := range runs {
		var all []float64
		for _, s := range r.Settles {
			all = append(all, s.Settled)
		}
		slices.Sort(all)
		var fs []string
		for k, n := range r.Faults {
			fs = append(fs, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(fs)
		fmt.Fprintf(&w, "| %d | %s | %s | %d | %.2f / %.2f / %.2f |\n", r.Seed, r.Duration, strings.Join(fs, ", "), len(all),
			quantile(all, 0.5), quantile(all, 0.99), quantile(all, 1))
	}
	fmt.Fprintln(&w)
	fmt.Fprintln(&w, "| fault | heals | p50 (s) | p99 (s) | max (s) |")
	fmt.Fprintln(&w, "|---|---:|---:|---:|---:|")
	for _, k := range kinds(by) {
		v := by[k]
		fmt.Fprintf(&w, "| %s | %d | %.2f | %.2f | %.2f |\n", k, len(v), quantile(v, 0.5), quantile(v, 0.99), v[len(v)-1])
	}
	_, err := io.WriteString(out, w.String())
	return err
}

func kinds(by map[string][]float64) []string {
	out := make([]string, 0, len(by))
	for k := range by {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// plot is a strip plot: one row per fault type, one dot per heal, the
// median as a bar, on a shared linear axis in seconds.
func plot(by map[string][]float64) string {
	ks := kinds(by)
	top := 1.0
	for _, v := range by {
		top = max(top, v[len(v)-1])
	}
	const left, width, row = 150.0, 520.0, 28.0
	h := 50 + row*float64(len(ks))
	x := func(s float64) float64 { return left + width*s/top }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", left+width+30, h+20)
	fmt.Fprintf(&b, `<text x="%.0f" y="16">convergence after each healed fault (s), all runs</text>`+"\n", left)
	for i, k := range ks {
		y := 36 + row*float64(i)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s (%d)</text>`+"\n", left-8, y+4, k, len(by[k]))
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, left+width, y, y)
		for _, s := range by[k] {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1f77b4" fill-opacity="0.5"/>`+"\n", x(s), y)
		}
		m := quantile(by[k], 0.5)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#d62728" stroke-width="2"/>`+"\n", x(m), x(m), y-8, y+8)
	}
	axis := h - 6
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#000"/>`+"\n", left, left+width, axis, axis)
	for i := 0; i <= 4; i++ {
		s := top * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.1f</text>`+"\n", x(s), axis+14, s)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
