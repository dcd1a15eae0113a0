package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Options configure an Env.
type Options struct {
	// Clusters is the number of simulated clusters (default 3). Ignored when
	// Names is set.
	Clusters int
	// Names of the clusters (default cluster1..clusterN). They are the default
	// coastguard cluster IDs.
	Names []string
	// ControllerManager starts a kube-controller-manager per cluster for
	// namespace deletion, garbage collection and service accounts.
	ControllerManager bool
	// ExtraControllers are kube-controller-manager controllers to run
	// besides the harness's own (for example "daemonset-controller", so
	// that `kubectl rollout status` sees a DaemonSet's spec observed; with
	// no nodes it schedules nothing). Implies ControllerManager.
	ExtraControllers []string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and kubectl
	// (default TestbinDir()).
	BinDir string
	// Dir is the root directory for data, certificates and logs (default: a
	// new temporary directory, removed by Close unless KeepDir is set or the
	// test failed with COASTGUARD_E2E_KEEP=1).
	Dir string
	// KeepDir keeps Dir after Close.
	KeepDir bool
	// Detach starts every process in its own session so that it outlives
	// this program (make demo); Down(dir) stops them later.
	Detach bool
	// ServiceCIDRs, when set, are the clusters' --service-cluster-ip-range
	// in order (default 10.<96+i>.0.0/16): the demo uses the ranges its
	// examples' Services and Submariner Cluster objects name.
	ServiceCIDRs []string
	// GossipIPBase: cluster i gossips on 127.0.0.(GossipIPBase+i) (default 10).
	GossipIPBase int
	// StartTimeout bounds the start of the control planes (default 120s).
	StartTimeout time.Duration
	// Dataplane gives every cluster NodesPerCluster nodes and every Running
	// pod a network namespace, joins the clusters like Submariner does and
	// runs a real NetworkPolicy engine on every node (see Dataplane). It
	// needs root, iproute2, iptables, ipset and the kube-router binary.
	Dataplane bool
	// Services adds real Services to the dataplane: kube-proxy (iptables
	// mode) on every node and kube-controller-manager's EndpointSlice
	// controller (implies ControllerManager). A pod in one cluster that
	// connects to another cluster's ClusterIP is routed there and
	// translated there, as with Submariner and Lighthouse.
	Services bool
	// Logf receives progress messages (default: discard; Start uses t.Logf).
	Logf func(format string, args ...any)
}

// Env is a set of simulated clusters sharing one etcd.
type Env struct {
	Dir      string
	BinDir   string
	Etcd     *Process
	EtcdURL  string
	Clusters []*Cluster
	// StartupTime is the wall time New took until every cluster was ready.
	StartupTime time.Duration

	opts    Options
	kubectl string
	gidBase uint32
	part    *partitioner
	dp      *Dataplane
	t       testing.TB

	mu      sync.Mutex
	daemons []*Daemon
	closed  bool
}

var envSeq atomic.Uint32

// MaxClusters is the largest number of clusters one Env supports.
const MaxClusters = 16

var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// EnvKeep is the environment variable that, set to 1, keeps the directory of
// a failed test's Env.
const EnvKeep = "COASTGUARD_E2E_KEEP"

// Start creates an Env for a test and registers its cleanup (Close). When the
// test has failed by the time the Env closes, Close first prints the tails of
// every daemon log (and of the control-plane logs). Startup errors fail the
// test.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := New(ctx, opts)
	if err != nil {
		t.Fatalf("harness: starting clusters: %v", err)
	}
	env.t = t
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Errorf("harness: cleanup: %v", err)
		}
	})
	// go test -timeout panics without running cleanups: the children die by
	// their parent-death signal, but iptables rules would stay. Clean up
	// shortly before the deadline instead.
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := dt.Deadline(); ok {
			if d := time.Until(deadline) - 10*time.Second; d > 0 {
				timer := time.AfterFunc(d, func() {
					fmt.Fprintf(os.Stderr, "harness: test deadline near; killing clusters in %s and removing partitions\n", env.Dir)
					env.emergencyStop()
				})
				t.Cleanup(func() { timer.Stop() })
			}
		}
	}
	return env
}

// New starts etcd and the clusters' control planes and waits until every
// apiserver is ready. The caller must Close the Env (or, when detached, call
// Down on its Dir).
func New(ctx context.Context, opts Options) (env *Env, err error) {
	began := time.Now()
	names := opts.Names
	if len(names) == 0 {
		n := opts.Clusters
		if n == 0 {
			n = 3
		}
		for i := range n {
			names = append(names, "cluster"+strconv.Itoa(i+1))
		}
	}
	if len(names) > MaxClusters {
		return nil, fmt.Errorf("harness: %d clusters requested, at most %d supported", len(names), MaxClusters)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if !clusterNameRE.MatchString(n) {
			return nil, fmt.Errorf("harness: cluster name %q must be a DNS label of at most 32 characters", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("harness: duplicate cluster name %q", n)
		}
		seen[n] = true
	}
	if opts.GossipIPBase == 0 {
		opts.GossipIPBase = 10
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 120 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Services {
		opts.Dataplane, opts.ControllerManager = true, true
	}
	if len(opts.ExtraControllers) > 0 {
		opts.ControllerManager = true
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = TestbinDir(); err != nil {
			return nil, err
		}
	}
	bins := map[string]string{}
	need := []string{BinEtcd, BinKubeAPIServer, BinKubectl}
	if opts.ControllerManager {
		need = append(need, BinKubeControllerMgr)
	}
	for _, b := range need {
		p, err := Binary(opts.BinDir, b)
		if err != nil {
			return nil, err
		}
		bins[b] = p
	}

	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "coastguard-e2e-"); err != nil {
			return nil, fmt.Errorf("harness: temp dir: %w", err)
		}
	} else {
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
	}
	seq := envSeq.Add(1)
	env = &Env{
		Dir:     dir,
		BinDir:  opts.BinDir,
		opts:    opts,
		kubectl: bins[BinKubectl],
		gidBase: 1_000_000 + uint32(os.Getpid()%100_000)*64 + (seq%4)*16,
		part:    newPartitioner(),
	}
	defer func() {
		if err != nil {
			if cerr := env.Close(); cerr != nil {
				err = fmt.Errorf("%w (cleanup: %v)", err, cerr)
			}
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	if err := env.startEtcd(ctx, bins[BinEtcd]); err != nil {
		return env, err
	}
	opts.Logf("harness: etcd ready at %s (%.1fs)", env.EtcdURL, time.Since(began).Seconds())

	if opts.Dataplane {
		owner := os.Getpid()
		if opts.Detach {
			owner = env.Etcd.Pid() // outlives this program, like the dataplane
		}
		if env.dp, err = newDataplane(env, owner); err != nil {
			return env, err
		}
	}
	for i, name := range names {
		c, err := newCluster(env, i, name)
		if err != nil {
			return env, err
		}
		env.Clusters = append(env.Clusters, c)
	}
	errs := make([]error, len(env.Clusters))
	var wg sync.WaitGroup
	for i, c := range env.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startAPIServer(ctx, bins[BinKubeAPIServer])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return env, err
	}
	opts.Logf("harness: %d kube-apiservers ready (%.1fs)", len(env.Clusters), time.Since(began).Seconds())
	if opts.ControllerManager {
		for i, c := range env.Clusters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.startControllerManager(ctx, bins[BinKubeControllerMgr])
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return env, err
		}
		opts.Logf("harness: kube-controller-managers ready (%.1fs)", time.Since(began).Seconds())
	}
	if env.dp != nil {
		if err := env.dp.addNodes(ctx); err != nil {
			return env, err
		}
		opts.Logf("harness: dataplane ready: %d nodes with kube-router (%.1fs)", NodesPerCluster*len(env.Clusters), time.Since(began).Seconds())
	}
	env.StartupTime = time.Since(began)
	if err := env.saveState(); err != nil {
		return env, err
	}
	return env, nil
}

func (e *Env) procSpec(name, path string, args []string, logName string) procSpec {
	return procSpec{
		name:    name,
		path:    path,
		args:    args,
		logPath: filepath.Join(e.Dir, "logs", logName),
		detach:  e.opts.Detach,
	}
}

func (e *Env) startEtcd(ctx context.Context, bin string) error {
	if err := os.MkdirAll(filepath.Join(e.Dir, "logs"), 0o755); err != nil {
		return err
	}
	var lastErr error
	for attempt := range 3 {
		clientPort, err := FreePort("127.0.0.1", false)
		if err != nil {
			return err
		}
		peerPort, err := FreePort("127.0.0.1", false)
		if err != nil {
			return err
		}
		dataDir := filepath.Join(e.Dir, "etcd", "data")
		_ = os.RemoveAll(dataDir)
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return err
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		args := []string{
			"--name=e2e",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=e2e=" + peerURL,
			"--initial-cluster-state=new",
			"--unsafe-no-fsync",
			"--quota-backend-bytes=4294967296",
			"--log-level=warn",
		}
		p, err := startProcess(e.procSpec("etcd", bin, args, "etcd.log"))
		if err != nil {
			return err
		}
		e.Etcd = p
		e.EtcdURL = clientURL
		err = waitReady(ctx, p, 30*time.Second, func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer closeQuietly(resp.Body) // read below
			var h struct {
				Health string `json:"health"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
				return err
			}
			if h.Health != "true" {
				return fmt.Errorf("etcd health %q", h.Health)
			}
			return nil
		})
		if err == nil {
			return nil
		}
		lastErr = err
		_ = p.Kill()
		if !errors.Is(err, errExited) || ctx.Err() != nil {
			break
		}
		e.opts.Logf("harness: etcd attempt %d failed (%v); retrying with new ports", attempt+1, err)
	}
	return fmt.Errorf("harness: etcd did not start: %w", lastErr)
}

var errExited = errors.New("process exited")

// waitReady polls check every 100ms until it succeeds, the process exits,
// timeout passes or ctx ends. Errors carry the process's log tail.
func waitReady(ctx context.Context, p *Process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.Done():
			tail, _ := p.TailLog(30)
			return fmt.Errorf("%w: %s exited (%v) before becoming ready; log %s ends:\n%s", errExited, p.Name, p.ExitErr(), p.LogPath, tail)
		case <-ctx.Done():
			tail, _ := p.TailLog(30)
			return fmt.Errorf("%s not ready after %s (last check: %v); log %s ends:\n%s", p.Name, timeout, last, p.LogPath, tail)
		case <-tick.C:
		}
	}
}

// Cluster returns the cluster with the given name, or nil.
func (e *Env) Cluster(name string) *Cluster {
	for _, c := range e.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Processes returns every process the Env started (control planes and
// daemons), running or not.
func (e *Env) Processes() []*Process {
	var ps []*Process
	if e.Etcd != nil {
		ps = append(ps, e.Etcd)
	}
	for _, c := range e.Clusters {
		if c.APIServer != nil {
			ps = append(ps, c.APIServer)
		}
		if c.ControllerManager != nil {
			ps = append(ps, c.ControllerManager)
		}
	}
	e.mu.Lock()
	for _, d := range e.daemons {
		ps = append(ps, d.Process)
	}
	e.mu.Unlock()
	if e.dp != nil {
		ps = append(ps, e.dp.engineProcesses()...)
	}
	return ps
}

// RSS returns the resident set size in bytes of every running process, by
// process name.
func (e *Env) RSS() map[string]uint64 {
	out := map[string]uint64{}
	for _, p := range e.Processes() {
		if rss, err := p.RSS(); err == nil {
			out[p.Name] = rss
		}
	}
	return out
}

// DumpLogs writes the last n lines of every daemon log, and the last 40 lines
// of each control-plane log, through logf.
func (e *Env) DumpLogs(logf func(string, ...any), n int) {
	e.mu.Lock()
	daemons := append([]*Daemon(nil), e.daemons...)
	e.mu.Unlock()
	for _, d := range daemons {
		tail, err := d.TailLog(n)
		if err != nil {
			logf("harness: %s log %s: %v", d.Name, d.LogPath, err)
			continue
		}
		logf("harness: ===== last %d lines of %s (%s) =====\n%s\n===== end of %s =====", n, d.Name, d.LogPath, tail, d.Name)
	}
	for _, p := range e.Processes() {
		if p.Name == "etcd" || isDaemonProcess(daemons, p) {
			continue
		}
		tail, err := p.TailLog(40)
		if err == nil {
			logf("harness: ----- last 40 lines of %s (%s) -----\n%s", p.Name, p.LogPath, tail)
		}
	}
}

func isDaemonProcess(ds []*Daemon, p *Process) bool {
	for _, d := range ds {
		if d.Process == p {
			return true
		}
	}
	return false
}

// Close stops every daemon and control plane, removes the partition rules and
// the directory (unless kept). It is idempotent.
func (e *Env) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	daemons := append([]*Daemon(nil), e.daemons...)
	e.mu.Unlock()

	if e.t != nil && e.t.Failed() {
		e.DumpLogs(e.t.Logf, 200)
		if os.Getenv(EnvKeep) == "1" {
			e.opts.KeepDir = true
			e.t.Logf("harness: keeping %s (%s=1)", e.Dir, EnvKeep)
		}
	}

	// Remember which process groups we are about to stop: only those are
	// checked for leftovers afterwards (the pid of a process that exited
	// long ago may belong to someone else by now).
	var wasRunning []*Process
	for _, p := range e.Processes() {
		if p.Running() {
			wasRunning = append(wasRunning, p)
		}
	}

	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	stopAll := func(ps []*Process, grace time.Duration) {
		for _, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.Stop(grace); err != nil {
					emu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
					emu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	var ds []*Process
	for _, d := range daemons {
		ds = append(ds, d.Process)
	}
	stopAll(ds, 10*time.Second)
	if err := e.part.close(); err != nil {
		errs = append(errs, err)
	}
	if e.dp != nil {
		if err := e.dp.close(); err != nil {
			errs = append(errs, err)
		}
	}
	var cms, apis []*Process
	for _, c := range e.Clusters {
		if c.ControllerManager != nil {
			cms = append(cms, c.ControllerManager)
		}
		if c.APIServer != nil {
			apis = append(apis, c.APIServer)
		}
	}
	stopAll(cms, 5*time.Second)
	stopAll(apis, 10*time.Second)
	if e.Etcd != nil {
		stopAll([]*Process{e.Etcd}, 5*time.Second)
	}
	for _, p := range wasRunning {
		// A group member SIGKILLed by Stop a moment ago may still be on its
		// way out; only one that outlives a short wait is a leak.
		if pid := p.Pid(); pid != 0 && !waitGroupGone(pid, 5*time.Second) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			errs = append(errs, fmt.Errorf("harness: process group of %s (pid %d) still alive after stop; killed", p.Name, pid))
		}
	}
	if !e.opts.KeepDir {
		if err := os.RemoveAll(e.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// emergencyStop kills everything without waiting for graceful shutdown.
func (e *Env) emergencyStop() {
	for _, p := range e.Processes() {
		_ = p.Signal(syscall.SIGKILL)
	}
	_ = e.part.close()
	if e.dp != nil {
		_ = e.dp.close()
	}
}

// state is the on-disk description of a (possibly detached) Env, used by
// Down and by tools that attach to running clusters (make demo).
type state struct {
	Dir   string `json:"dir"`
	Chain string `json:"iptablesChain"`
	// Dataplane is the name prefix of the dataplane's network namespaces
	// and Bridge its underlay bridge (empty without a dataplane).
	Dataplane string         `json:"dataplane,omitempty"`
	Bridge    string         `json:"bridge,omitempty"`
	Processes []stateProcess `json:"processes"`
	Clusters  []stateCluster `json:"clusters"`
}

type stateProcess struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	Path string `json:"path"`
	Log  string `json:"log"`
}

type stateCluster struct {
	Name       string `json:"name"`
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	GossipIP   string `json:"gossipIP"`
}

// StateFile is the name of the Env description written into Dir.
const StateFile = "env.json"

func (e *Env) saveState() error {
	st := state{Dir: e.Dir, Chain: e.part.chain}
	if e.dp != nil {
		st.Dataplane, st.Bridge = e.dp.prefix, e.dp.bridge
	}
	for _, p := range e.Processes() {
		if pid := p.Pid(); pid != 0 {
			st.Processes = append(st.Processes, stateProcess{Name: p.Name, Pid: pid, Path: p.Path, Log: p.LogPath})
		}
	}
	for _, c := range e.Clusters {
		st.Clusters = append(st.Clusters, stateCluster{Name: c.Name, Kubeconfig: c.Kubeconfig, Server: c.Server, GossipIP: c.GossipIP})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(e.Dir, StateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(e.Dir, StateFile))
}

// Down stops the processes of an Env described by dir/env.json (typically a
// detached one started by another program), removes its partition chain and
// deletes dir. A process is signalled only if its pid still runs the recorded
// binary, so a recycled pid is never hit.
func Down(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("harness: %s: %w", StateFile, err)
	}
	var errs []error
	var live []stateProcess
	for _, p := range st.Processes {
		if !runsBinary(p.Pid, p.Path) {
			continue
		}
		if err := syscall.Kill(-p.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
		}
		live = append(live, p)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, p := range live {
		for pidAlive(p.Pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if pidAlive(p.Pid) {
			_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		}
	}
	if st.Dataplane != "" {
		if err := removeDataplane(st.Dataplane, st.Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	if st.Chain != "" && CheckPartitionSupport() == nil && chainExists(st.Chain) {
		if err := deleteChain(st.Chain); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// runsBinary reports whether pid is alive and executes the file at path
// (symlinks resolved; a binary replaced on disk since it started counts).
func runsBinary(pid int, path string) bool {
	if !pidAlive(pid) {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	return exe == path
}
