package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DaemonNamespace is the namespace coastguardd keeps its Lease in.
const DaemonNamespace = "coastguard-system"

// DaemonOptions configure a coastguardd (or other daemon) process.
type DaemonOptions struct {
	// Binary is the program to run, usually from Build("./cmd/coastguardd").
	Binary string
	// NodeName is the gossip identity (default "<cluster>-<n>").
	NodeName string
	// ClusterID passed as --cluster-id (default: the cluster's Name). Set
	// NoClusterID to make the daemon discover it.
	ClusterID   string
	NoClusterID bool
	// Kubeconfig (default: the cluster's admin kubeconfig).
	Kubeconfig string
	// Seeds passed as --seeds. nil means: the gossip addresses of every
	// daemon of the Env started before this one. Use an empty non-nil slice
	// for none.
	Seeds []string
	// GossipPort on the cluster's loopback alias (default: a free port).
	GossipPort int
	// DataDir (default: a fresh directory per daemon).
	DataDir string
	// ClusterCIDRs passed as --cluster-cidrs (the trusted pod/service CIDRs
	// of every cluster, see docs/SEMANTICS.md "Pod-IP ownership"). nil
	// means Env.ClusterCIDRs(): every cluster of the Env. Use an empty
	// non-nil slice for none (CIDRs then come from Submariner's Cluster
	// objects only).
	ClusterCIDRs []string
	// Args are appended after the default flags.
	Args []string
	// Env is appended to this process's environment.
	Env []string
	// RawArgs runs Binary with exactly Args: no default flags.
	RawArgs bool
	// T, if set, stops the daemon in T's cleanup and dumps its log if T
	// failed (for daemons that live in one subtest). The Env stops every
	// daemon on Close in any case.
	T testing.TB
}

// Daemon is a coastguardd process of one cluster.
type Daemon struct {
	*Process
	Cluster  *Cluster
	NodeName string
	// GossipAddr is ip:port of the gossip listener (TCP and UDP).
	GossipAddr string
	// MetricsAddr is 127.0.0.1:port of /metrics, /healthz and /readyz.
	MetricsAddr string
	// AdminAddr is 127.0.0.1:port of the loopback admin listener
	// (/debug/state, /admin/*).
	AdminAddr string
	DataDir   string
	// seedsFromEnv: started with the default seeds (Options.Seeds nil), so
	// a restart passes the gossip addresses of the Env's running daemons, as
	// the clusterset DNS name a deployed daemon dials resolves to its
	// peers whenever it starts. Without it the first daemon of an Env,
	// started with no peer, knew none after a restart and was found only
	// by a peer's periodic push/pull (RELIABILITY.md, finding 9).
	seedsFromEnv bool
}

// StartDaemon starts a daemon for cluster c with the flags of
// docs/CONTRACTS.md ("coastguardd run flags"). The process runs with the
// cluster's gossip group so Partition can cut it off.
func (e *Env) StartDaemon(c *Cluster, opts DaemonOptions) (*Daemon, error) {
	if opts.Binary == "" {
		return nil, errors.New("harness: DaemonOptions.Binary is required (use harness.Build(\"./cmd/coastguardd\"))")
	}
	if c == nil || c.env != e {
		return nil, errors.New("harness: StartDaemon needs a cluster of this Env")
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errors.New("harness: Env is closed")
	}
	n := 0
	var peers []string
	for _, d := range e.daemons {
		if d.Cluster == c {
			n++
		}
		peers = append(peers, d.GossipAddr)
	}
	e.mu.Unlock()

	if opts.NodeName == "" {
		opts.NodeName = fmt.Sprintf("%s-%d", c.Name, n)
	}
	dir := filepath.Join(e.Dir, "daemons", opts.NodeName)
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("harness: a daemon named %q already exists", opts.NodeName)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(dir, "data")
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, err
	}
	port := opts.GossipPort
	if port == 0 {
		var err error
		if port, err = FreePort(c.GossipIP, true); err != nil {
			return nil, err
		}
	}
	metricsPort, err := FreePort("127.0.0.1", false)
	if err != nil {
		return nil, err
	}
	adminPort, err := FreePort("127.0.0.1", false)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		Cluster:     c,
		NodeName:    opts.NodeName,
		GossipAddr:  net.JoinHostPort(c.GossipIP, strconv.Itoa(port)),
		MetricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(metricsPort)),
		AdminAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(adminPort)),
		DataDir:     opts.DataDir,
	}
	args := opts.Args
	if !opts.RawArgs {
		kubeconfig := opts.Kubeconfig
		if kubeconfig == "" {
			kubeconfig = c.Kubeconfig
		}
		seeds := opts.Seeds
		if seeds == nil {
			seeds = peers
			d.seedsFromEnv = true
		}
		args = []string{
			"run",
			"--kubeconfig=" + kubeconfig,
			"--node-name=" + opts.NodeName,
			"--namespace=" + DaemonNamespace,
			"--bind-addr=" + d.GossipAddr,
			"--advertise-addr=" + d.GossipAddr,
			"--data-dir=" + opts.DataDir,
			"--metrics-addr=" + d.MetricsAddr,
			"--admin-addr=" + d.AdminAddr,
			"--gossip-profile=local",
		}
		if !opts.NoClusterID {
			id := opts.ClusterID
			if id == "" {
				id = c.Name
			}
			args = append(args, "--cluster-id="+id)
		}
		if len(seeds) > 0 {
			args = append(args, "--seeds="+strings.Join(seeds, ","))
		}
		keyID := opts.ClusterID
		if keyID == "" {
			keyID = c.Name
		}
		keys, err := e.keyArgs(keyID, opts.Args)
		if err != nil {
			return nil, err
		}
		args = append(args, keys...)
		cidrs := opts.ClusterCIDRs
		if cidrs == nil {
			cidrs = e.ClusterCIDRs()
		}
		if len(cidrs) > 0 {
			args = append(args, "--cluster-cidrs="+strings.Join(cidrs, ","))
		}
		args = append(args, opts.Args...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = c.EnsureNamespace(ctx, DaemonNamespace, nil)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("harness: namespace %s in %s: %w", DaemonNamespace, c.Name, err)
		}
	}
	spec := e.procSpec("coastguardd/"+opts.NodeName, opts.Binary, args, "coastguardd-"+opts.NodeName+".log")
	spec.env = append(os.Environ(), opts.Env...)
	spec.gid = c.GossipGID
	spec.dir = dir
	p, err := startProcess(spec)
	if err != nil {
		return nil, err
	}
	d.Process = p
	e.mu.Lock()
	e.daemons = append(e.daemons, d)
	e.mu.Unlock()
	if err := e.saveState(); err != nil {
		return d, err
	}
	if opts.T != nil {
		t := opts.T
		t.Cleanup(func() {
			if t.Failed() {
				if tail, err := d.TailLog(200); err == nil {
					t.Logf("harness: ===== last 200 lines of %s (%s) =====\n%s\n===== end of %s =====", d.Name, d.LogPath, tail, d.Name)
				}
			}
			if err := d.Stop(); err != nil {
				t.Errorf("harness: stopping %s: %v", d.Name, err)
			}
		})
	}
	return d, nil
}

// ClusterCIDRs returns the --cluster-cidrs entries describing every
// cluster of the Env: its PodCIDR and ServiceCIDR, as an operator would
// configure them on every daemon of the cluster set.
func (e *Env) ClusterCIDRs() []string {
	var out []string
	for _, c := range e.Clusters {
		out = append(out, c.Name+"="+c.PodCIDR, c.Name+":service="+c.ServiceCIDR)
	}
	return out
}

// Daemons returns the daemons started so far (running or not).
func (e *Env) Daemons() []*Daemon {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Daemon(nil), e.daemons...)
}

// Seeds returns the gossip addresses of the running daemons, except those of
// the given clusters.
func (e *Env) Seeds(except ...*Cluster) []string {
	var out []string
	for _, d := range e.Daemons() {
		skip := !d.Running()
		for _, c := range except {
			skip = skip || d.Cluster == c
		}
		if !skip {
			out = append(out, d.GossipAddr)
		}
	}
	return out
}

// Stop sends SIGTERM and waits up to 15s before SIGKILL.
func (d *Daemon) Stop() error { return d.Process.Stop(15 * time.Second) }

// SetSeeds gives the next Restart exactly these --seeds (instead of the
// Env's running daemons, for a daemon started with the default seeds).
func (d *Daemon) SetSeeds(seeds ...string) {
	d.seedsFromEnv = false
	d.setArg("--seeds=", strings.Join(seeds, ","))
}

// Restart starts the stopped or killed daemon again with the same flags,
// data directory and gossip address; a daemon started with the default
// seeds gets the Env's running daemons as --seeds (seedsFromEnv).
func (d *Daemon) Restart() error {
	if d.seedsFromEnv {
		d.setArg("--seeds=", strings.Join(d.Cluster.env.Seeds(), ",")) // d is stopped: not among them
	}
	if err := d.Process.Restart(); err != nil {
		return err
	}
	return d.Cluster.env.saveState()
}

func (d *Daemon) get(ctx context.Context, path string) (int, []byte, error) {
	addr := d.MetricsAddr
	if strings.HasPrefix(path, "/debug/") || strings.HasPrefix(path, "/admin/") {
		addr = d.AdminAddr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer closeQuietly(resp.Body) // read below
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	return resp.StatusCode, b, err
}

// Probe GETs /healthz or /readyz and returns nil on HTTP 200.
func (d *Daemon) Probe(ctx context.Context, path string) error {
	code, body, err := d.get(ctx, path)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", d.Name, path, code, strings.TrimSpace(string(body)))
	}
	return nil
}

// WaitReady waits until /readyz answers 200, failing early if the process
// exits.
func (d *Daemon) WaitReady(ctx context.Context, timeout time.Duration) error {
	return waitReady(ctx, d.Process, timeout, func(ctx context.Context) error { return d.Probe(ctx, "/readyz") })
}

// Metrics scrapes /metrics and parses the text exposition format.
func (d *Daemon) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	code, body, err := d.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: HTTP %d", d.Name, code)
	}
	return parseMetrics(string(body))
}

func parseMetrics(text string) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(strings.NewReader(text))
}

// MetricValue returns the value of the gauge, counter or untyped sample of
// family name whose labels include all of labels. Several matching samples
// are summed. ok is false if no sample matched.
func MetricValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) (v float64, ok bool) {
	mf := families[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, want := range labels {
			if have[k] != want {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Untyped != nil:
			v += m.GetUntyped().GetValue()
		default:
			continue next
		}
		ok = true
	}
	return v, ok
}

// Partition cuts the gossip traffic between the daemons of clusters a and b
// in both directions (iptables DROP in OUTPUT, matched by the sender's group
// and the receiver's loopback alias). It fails, naming the reason, when
// iptables or root are missing.
func (e *Env) Partition(a, b *Cluster) error {
	if a == b {
		return fmt.Errorf("harness: cannot partition %s from itself", a.Name)
	}
	return e.part.cut(a.GossipGID, a.GossipIP, b.GossipGID, b.GossipIP)
}

// PartitionOneWay drops the gossip traffic from cluster from to cluster to,
// and only that direction (an asymmetric partition: to still reaches from),
// until Heal.
func (e *Env) PartitionOneWay(from, to *Cluster) error {
	if from == to {
		return fmt.Errorf("harness: cannot partition %s from itself", from.Name)
	}
	return e.part.add(dropRule(from.GossipGID, to.GossipIP))
}

// Isolate partitions c from every other cluster.
func (e *Env) Isolate(c *Cluster) error {
	for _, o := range e.Clusters {
		if o != c {
			if err := e.Partition(c, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// HealPair removes the partition between a and b.
func (e *Env) HealPair(a, b *Cluster) error {
	return e.part.heal(a.GossipGID, a.GossipIP, b.GossipGID, b.GossipIP)
}

// Lossy drops a random share (0 < probability < 1) of the gossip traffic
// between two clusters, both ways, until Heal.
func (e *Env) Lossy(a, b *Cluster, probability float64) error {
	if a == b || probability <= 0 || probability >= 1 {
		return fmt.Errorf("harness: lossy link %s-%s with probability %v: want two clusters and 0 < p < 1", a.Name, b.Name, probability)
	}
	return e.part.add(lossRule(a.GossipGID, b.GossipIP, probability), lossRule(b.GossipGID, a.GossipIP, probability))
}

// Heal removes every partition.
func (e *Env) Heal() error { return e.part.healAll() }

// PartitionRules returns the number of DROP rules installed.
func (e *Env) PartitionRules() int { return e.part.active() }

// PartitionChain is the iptables chain holding this Env's rules.
func (e *Env) PartitionChain() string { return e.part.chain }
