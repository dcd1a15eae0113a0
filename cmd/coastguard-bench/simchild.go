package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/coastguard-mcnp/coastguard/gossip/sim"
)

// Each simulated mesh runs in a child process of this binary: hundreds of
// memberlist instances leave nothing behind in the parent (sockets,
// goroutines, heap), and a mesh that does not shut down cleanly is killed at
// its deadline instead of stalling the whole bench.

// simChildMain runs one simulation with the JSON-encoded options and prints
// the JSON result on stdout.
func simChildMain(optsJSON string) int {
	var o sim.Options
	if err := json.Unmarshal([]byte(optsJSON), &o); err != nil {
		fmt.Fprintln(os.Stderr, "sim-child: options:", err)
		return 2
	}
	// COASTGUARD_BENCH_CPUPROFILE=<dir> writes a CPU profile per mesh
	// (sim-<mode>-<profile>-<N>.pprof) for `go tool pprof -top`.
	if dir := os.Getenv("COASTGUARD_BENCH_CPUPROFILE"); dir != "" {
		mode := "coastguard"
		if o.Naive {
			mode = "naive"
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("sim-%s-%s-%d.pprof", mode, o.Profile, o.N)))
		if err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				// Bounded, so that a mesh killed at its deadline still
				// leaves a usable profile of its busy part.
				var once sync.Once
				stop := func() {
					once.Do(func() {
						pprof.StopCPUProfile()
						_ = f.Close()
					})
				}
				time.AfterFunc(120*time.Second, stop)
				defer stop()
			}
		}
	}
	r, err := sim.RunPropagationSim(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim-child:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "sim-child:", err)
		return 1
	}
	return 0
}

var errSimKilled = errors.New("simulation killed at its deadline")

// runSimIsolated runs one simulation in a child process, killed after
// timeout.
func runSimIsolated(ctx context.Context, o sim.Options, timeout time.Duration) (sim.Result, error) {
	var r sim.Result
	b, err := json.Marshal(o)
	if err != nil {
		return r, err
	}
	self, err := os.Executable()
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-sim-child", string(b))
	var out bytes.Buffer
	cmd.Stdout = &out
	// The child's stderr goes to a file: at its deadline it gets SIGQUIT,
	// and the Go runtime's goroutine dump there shows where it was stuck.
	errf, err := os.CreateTemp("", fmt.Sprintf("coastguard-bench-sim-%d-*.stderr", o.N))
	if err != nil {
		return r, err
	}
	// Closing after the child exited loses nothing: the child wrote
	// through its own descriptor, and the file is only read by name.
	defer func() { _ = errf.Close() }()
	cmd.Stderr = errf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	if err == nil {
		_ = os.Remove(errf.Name())
	}
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return r, fmt.Errorf("%w: N=%d naive=%v did not finish within %s (goroutine dump in %s)", errSimKilled, o.N, o.Naive, timeout, errf.Name())
		}
		if b, rerr := os.ReadFile(errf.Name()); rerr == nil {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(b))
		}
		return r, fmt.Errorf("simulation N=%d naive=%v: %w", o.N, o.Naive, err)
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("simulation result: %w", err)
	}
	return r, nil
}
