package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// The cluster set a joiner joins runs, in the bench, in a child process of
// this binary: as on separate machines, the joiner's garbage collector then
// does not scan the set's million entries, nor pays for the set's own
// allocations (encoding sync answers). Both processes still share this
// machine's cores, so the set's serving work is still charged to the wall
// time. Tests run the set in-process (the test binary has no -join-child).

// joinSet is a running cluster set: the address to join, the digest the
// joiner must reach and the writers' checkpoint build time.
type joinSet struct {
	Addr   string
	Want   crdt.Digest
	Build  time.Duration
	closer func()
}

func (s *joinSet) close() { s.closer() }

type joinChildOpts struct{ Origins, Per int }

// startJoinSet builds the cluster set, in a child process when isolated.
func startJoinSet(ctx context.Context, origins, per int, isolated bool) (*joinSet, error) {
	if !isolated {
		mesh, err := newJoinMesh(origins, per)
		if err != nil {
			return nil, err
		}
		return &joinSet{Addr: mesh.nodes[0].Addr(), Want: mesh.hub.Digest(), Build: mesh.build, closer: mesh.close}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(joinChildOpts{Origins: origins, Per: per})
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-join-child", string(b))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() {
		_ = stdin.Close() // the child shuts its mesh down and exits
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	var s joinSet
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &s)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("join set child: %w", err)
	}
	s.closer = stop
	return &s, nil
}

// joinChildMain builds the cluster set, prints it as one JSON line and
// serves until stdin is closed.
func joinChildMain(optsJSON string) int {
	var o joinChildOpts
	if err := json.Unmarshal([]byte(optsJSON), &o); err != nil || o.Origins <= 0 || o.Per <= 0 {
		fmt.Fprintln(os.Stderr, "join-child: bad options:", optsJSON, err)
		return 2
	}
	mesh, err := newJoinMesh(o.Origins, o.Per)
	if err != nil {
		fmt.Fprintln(os.Stderr, "join-child:", err)
		return 1
	}
	defer mesh.close()
	s := joinSet{Addr: mesh.nodes[0].Addr(), Want: mesh.hub.Digest(), Build: mesh.build}
	// JOIN_CHILD_CPUPROFILE profiles the set's serving (after its fill)
	if path := os.Getenv("JOIN_CHILD_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(s); err != nil {
		fmt.Fprintln(os.Stderr, "join-child:", err)
		return 1
	}
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil && !errors.Is(err, os.ErrClosed) {
		fmt.Fprintln(os.Stderr, "join-child: stdin:", err)
	}
	return 0
}
