package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procSpec describes a child process.
type procSpec struct {
	name    string
	path    string
	args    []string
	env     []string // full environment; nil = inherit
	dir     string
	logPath string
	// detach starts the process in its own session without a parent-death
	// signal, so it outlives this program (make demo). Otherwise the child is
	// in its own process group and gets SIGKILL when this program dies, so a
	// test binary killed by `go test -timeout` leaves nothing behind.
	detach bool
	// gid, when non-zero (and running as root), runs the child with this
	// primary group so iptables owner matches can tell processes apart.
	gid uint32
}

// Process is a child process whose stdout and stderr go to a log file. All
// signals go to its whole process group.
type Process struct {
	Name    string
	Path    string
	Args    []string
	LogPath string

	spec procSpec

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	started time.Time
}

func startProcess(spec procSpec) (*Process, error) {
	p := &Process{Name: spec.name, Path: spec.path, Args: spec.args, LogPath: spec.logPath, spec: spec}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("harness: %s already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("harness: %s log: %w", p.Name, err)
	}
	defer closeQuietly(logf) // the child holds its own descriptor
	if _, err := fmt.Fprintf(logf, "=== harness: starting %s at %s: %s %s\n", p.Name, time.Now().UTC().Format(time.RFC3339Nano), p.spec.path, strings.Join(p.spec.args, " ")); err != nil {
		return fmt.Errorf("harness: %s log: %w", p.Name, err)
	}
	cmd := exec.Command(p.spec.path, p.spec.args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = p.spec.env
	cmd.Dir = p.spec.dir
	attr := &syscall.SysProcAttr{}
	if p.spec.detach {
		attr.Setsid = true
	} else {
		attr.Setpgid = true
		attr.Pdeathsig = syscall.SIGKILL
	}
	if p.spec.gid != 0 && os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{Uid: 0, Gid: p.spec.gid, Groups: []uint32{}}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("harness: starting %s (%s): %w", p.Name, p.spec.path, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	p.waitErr = nil
	p.started = time.Now()
	done := p.done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func isClosed(ch chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Pid returns the process id of the current (or last) incarnation.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process has been started and not yet exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.done)
}

// Done is closed when the current incarnation exits.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is the result of Wait for an exited process (nil for exit code 0).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) error {
	pid := p.Pid()
	if pid == 0 || !p.Running() {
		return nil
	}
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// sends SIGKILL. It returns the process's exit error, except that a death by
// the harness's own signal is not an error.
func (p *Process) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("harness: SIGTERM %s: %w", p.Name, err)
	}
	pid := p.Pid()
	select {
	case <-p.Done():
		// The leader is gone; take down anything it left in its group.
		// (The pgid cannot have been recycled while members remain.)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return exitedBySignalOK(p.ExitErr())
	case <-time.After(grace):
	}
	return p.Kill()
}

// Kill sends SIGKILL to the process group and waits for the exit.
func (p *Process) Kill() error {
	if !p.Running() {
		return nil
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("harness: SIGKILL %s: %w", p.Name, err)
	}
	select {
	case <-p.Done():
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("harness: %s (pid %d) did not die 30s after SIGKILL", p.Name, p.Pid())
	}
}

// setArg replaces the argument that starts with prefix by prefix+value,
// or appends it; value "" removes it. It applies from the next start.
func (p *Process) setArg(prefix, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	args := slices.DeleteFunc(slices.Clone(p.spec.args), func(a string) bool { return strings.HasPrefix(a, prefix) })
	if value != "" {
		args = append(args, prefix+value)
	}
	p.spec.args, p.Args = args, args
}

// Restart starts the process again with the same command line. The process
// must have exited.
func (p *Process) Restart() error {
	if p.Running() {
		return fmt.Errorf("harness: restart %s: still running; Stop or Kill it first", p.Name)
	}
	return p.start()
}

func exitedBySignalOK(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			switch ws.Signal() {
			case syscall.SIGTERM, syscall.SIGKILL, syscall.SIGINT:
				return nil
			}
		}
	}
	return err
}

// RSS returns the resident set size of the process in bytes.
func (p *Process) RSS() (uint64, error) {
	pid := p.Pid()
	if pid == 0 || !p.Running() {
		return 0, fmt.Errorf("harness: %s is not running", p.Name)
	}
	return rssOf(pid)
}

func rssOf(pid int) (uint64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer closeQuietly(f) // read-only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "VmRSS:") {
			fields := strings.Fields(line)
			if len(fields) >= 2 {
				kb, err := strconv.ParseUint(fields[1], 10, 64)
				if err != nil {
					return 0, err
				}
				return kb * 1024, nil
			}
		}
	}
	return 0, fmt.Errorf("harness: no VmRSS for pid %d", pid)
}

// TailLog returns up to the last n lines of the process log.
func (p *Process) TailLog(n int) (string, error) {
	return tailFile(p.LogPath, n)
}

func tailFile(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer closeQuietly(f) // read-only
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	const window = 1 << 20
	off := int64(0)
	if st.Size() > window {
		off = st.Size() - window
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "", err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if off > 0 && len(lines) > 0 {
		lines = lines[1:] // first line is probably cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))), nil
}

// pidAlive reports whether a process with this pid exists (zombies count as
// gone).
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	_, state, ok := procGroup(pid)
	return ok && state != 'Z' && state != 'X'
}

// groupAlive reports whether any live process is left in process group pgid.
// Zombies do not count: a member killed a moment ago stays a zombie until its
// new parent reaps it, and an init that reaps slowly (or never, in some
// containers) would otherwise make a stopped group look alive.
func groupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pg, state, ok := procGroup(pid); ok && pg == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procGroup reads a process's group id and state from /proc/<pid>/stat.
func procGroup(pid int) (pgid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, 0, false
	}
	// After ")": state ppid pgrp ...
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return pg, f[0][0], true
}

// waitGroupGone polls until no live process is left in group pgid, for at
// most d, and reports whether the group is gone.
func waitGroupGone(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// closeQuietly closes c where a close error cannot matter: files only read,
// response bodies already read, listeners that only probed a port.
func closeQuietly(c io.Closer) {
	_ = c.Close()
}
