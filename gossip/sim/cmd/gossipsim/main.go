// Command gossipsim runs the in-process gossip propagation simulation for
// several mesh sizes and prints coastguard next to the naive baseline.
//
//	go run ./gossip/sim/cmd/gossipsim -n 10,50,100 -updates 20 -entries 10000,100000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/gossip/sim"
)

func ints(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func ms(d time.Duration) string {
	if d == time.Duration(1<<63-1) {
		return "inf"
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond))
}

// options is the command line.
type options struct {
	nList, entries, profile    string
	updates, maxIdleN, payload int
	idle                       time.Duration
	naive, asJSON, fdTimeline  bool
	joinRate                   float64
}

// parseFlags declares the flags and parses the command line.
func parseFlags() options {
	var o options
	flag.StringVar(&o.nList, "n", "10,50,100", "mesh sizes")
	flag.IntVar(&o.updates, "updates", 20, "updates per run")
	flag.StringVar(&o.entries, "entries", "10000,100000", "preloaded entries for the idle measurement (first one also used for the update run)")
	flag.IntVar(&o.maxIdleN, "max-idle-n-large", 100, "largest N for which entries beyond the first are preloaded (memory)")
	flag.StringVar(&o.profile, "profile", "wan", "wan|lan|local")
	flag.IntVar(&o.payload, "payload", 200, "pod value padding bytes")
	flag.DurationVar(&o.idle, "idle", 5*time.Second, "idle measurement window")
	flag.BoolVar(&o.naive, "naive", true, "also run the naive baseline")
	flag.BoolVar(&o.asJSON, "json", false, "print JSON lines")
	flag.Float64Var(&o.joinRate, "join-rate", 30, "member joins per second (negative: unpaced)")
	flag.BoolVar(&o.fdTimeline, "fd", false, "print each run's failure-detector timeline (suspect/dead/alive messages and failed probes per second, all members)")
	flag.Parse()
	return o
}

func main() {
	opts := parseFlags()
	ns, err := ints(opts.nList)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	es, err := ints(opts.entries)
	if err != nil || len(es) == 0 {
		fmt.Fprintln(os.Stderr, "bad -entries")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rn := &runner{ctx: ctx, opts: opts}
	for _, n := range ns {
		rn.size(n, es)
	}
	if opts.asJSON {
		return
	}
	printTable(rn.results)
}

// runner runs the simulations and collects their results.
type runner struct {
	ctx     context.Context
	opts    options
	results []sim.Result
}

// size runs the simulations of mesh size n: updates with the first entry
// count, idle with each further one (up to -max-idle-n-large), and the
// naive baseline.
func (rn *runner) size(n int, es []int) {
	opts := rn.opts
	base := sim.Options{N: n, Profile: gossip.Profile(opts.profile), PayloadBytes: opts.payload, IdleWindow: opts.idle, JoinRate: opts.joinRate}
	o := base
	o.Updates, o.Entries = opts.updates, es[0]
	rn.run(o)
	for _, e := range es[1:] {
		if n > opts.maxIdleN {
			continue
		}
		o := base
		o.Entries = e
		rn.run(o)
	}
	if opts.naive {
		o := base
		o.Naive, o.Updates = true, opts.updates
		rn.run(o)
	}
}

// run runs one simulation (exiting on failure) and prints its result.
func (rn *runner) run(o sim.Options) {
	r, err := sim.RunPropagationSim(rn.ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "N=%d naive=%v entries=%d: %v\n", o.N, o.Naive, o.Entries, err)
		os.Exit(1)
	}
	if rn.opts.fdTimeline {
		printFD(r)
	}
	r.FD = nil
	rn.results = append(rn.results, r)
	if rn.opts.asJSON {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	} else {
		fmt.Fprintf(os.Stderr, "done %+v\n", r)
	}
}

// printTable prints the results as a table.
func printTable(results []sim.Result) {
	fmt.Printf("%-10s %4s %5s %8s %8s %7s %6s %6s %6s %9s %8s %10s %10s %12s %12s\n",
		"mode", "N", "minN", "settle_s", "upd_susp", "entries", "recv%", "p50ms", "p99ms", "payloadB", "app/u/n", "wire/u/n", "app/payload", "idleWire/s/n", "idleApp/s/n")
	for _, r := range results {
		recv, ratio := "-", "-"
		p50, p99 := "-", "-"
		app, wire := "-", "-"
		if r.Updates > 0 {
			recv = fmt.Sprintf("%.1f", 100*float64(r.Received)/float64(max(r.Expected, 1)))
			p50, p99 = ms(r.P50), ms(r.P99)
			app, wire = fmt.Sprintf("%.0f", r.AppBytesPerUpdatePerNode), fmt.Sprintf("%.0f", r.WireBytesPerUpdatePerNode)
			ratio = fmt.Sprintf("%.2f", r.AppBytesPerUpdatePerNode/float64(max(r.PayloadBytes, 1)))
		}
		settle := fmt.Sprintf("%.1f", r.SettleWait.Seconds())
		if r.Unsettled {
			settle = "never"
		}
		fmt.Printf("%-10s %4d %5d %8s %8d %7d %6s %6s %6s %9d %8s %10s %10s %12.0f %12.0f\n",
			r.Mode, r.N, r.MinMembersSeen, settle, r.UpdateFD.Suspect, r.Entries, recv, p50, p99, r.PayloadBytes, app, wire, ratio,
			r.IdleWireBytesPerSecPerNode, r.IdleAppBytesPerSecPerNode)
	}
}

func printFD(r sim.Result) {
	fmt.Fprintf(os.Stderr, "failure detector, %s N=%d (t: seconds from the first update)\n%7s %8s %6s %7s %11s\n", r.Mode, r.N, "t", "suspect", "dead", "alive", "probe-fail")
	for _, s := range r.FD {
		fmt.Fprintf(os.Stderr, "%7.1f %8d %6d %7d %11d\n", s.At, s.Suspect, s.Dead, s.Alive, s.ProbeFailed)
	}
}
