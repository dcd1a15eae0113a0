package daemon

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/store"
)

// StateFile is the bbolt file name inside the data dir.
const StateFile = "state.db"

// Options configure a Daemon.
type Options struct {
	ClusterID string
	NodeName  string
	Namespace string // of the Lease

	Client  kubernetes.Interface
	Dynamic dynamic.Interface

	DataDir string
	// Gossip is completed by the daemon (NodeName, ClusterID, IsWriter,
	// Logger, Registerer).
	Gossip gossip.Config

	Debounce         time.Duration
	MaxDelay         time.Duration
	LeaseDuration    time.Duration
	TombstoneGCAfter time.Duration // 0 = never collect

	ClusterInfo kube.ClusterInfo
	// Submariner, when set, supplies ClusterInfo live (CIDRs, Globalnet
	// egress IPs); the daemon starts it and republishes on changes.
	Submariner *kube.SubmarinerWatcher
	// GlobalnetPolicy: render (coarse) or drop peers of Globalnet clusters
	// that only have cluster-wide egress IPs.
	GlobalnetPolicy enforce.GlobalnetPolicy
	// ClusterCIDRs is the operator's --cluster-cidrs: trusted networks
	// merged with the Submariner Cluster objects' (pod-IP ownership).
	ClusterCIDRs enforce.Networks

	// GossipKeyFile, when set, is re-read every KeyReloadInterval (default
	// 10s): new keys are installed, the first line becomes primary, keys no
	// longer listed are removed — so a rotation (install, use, remove) needs
	// no restart.
	GossipKeyFile     string
	KeyReloadInterval time.Duration

	// SigningKey is this cluster's Ed25519 identity (docs/SECURITY.md).
	// When set, own writes are signed and every peer's data is verified:
	// against TrustBundle (strict) when set, else against keys pinned on
	// first use in the store. nil (--insecure-gossip only) trusts peers.
	SigningKey  ed25519.PrivateKey
	TrustBundle map[string][]byte
	// EmptyViewTimeout bounds the empty-view gate (see gate.go); 0 = no bound.
	EmptyViewTimeout time.Duration
	// Guards are the guard rails (protected namespaces, caps).
	Guards Guards

	Registry *prometheus.Registry
	Logger   *slog.Logger
	// Ready reports readiness checks ("state", "enforcement") to the HTTP server.
	Ready func(check string, err error)
}

// Daemon is one coastguardd.
type Daemon struct {
	opts Options
	log  *slog.Logger
	m    *metrics

	sanity *sanity
	podIPs *podIPReport

	rep     *store.Replica
	node    *gossip.Node
	elector *kube.Elector
	inv     *kube.Inventory
	applier *kube.Applier
	status  *kube.StatusWriter

	view  // mirror and outputs
	roles // leader, decommissioned
	enf   *enforcer
	st    *statusLoop
	dec   *decommissioner

	enforce *kube.Debouncer[string]
	stat    *kube.Debouncer[string]

	w    *writer
	stop context.CancelFunc

	safety // gate, store failure, liveness (safety.go)
}

// SubmarinerSyncTimeout bounds how long the daemon waits at start for the
// Submariner Cluster objects (the trusted pod CIDRs) before it enforces.
var SubmarinerSyncTimeout = 30 * time.Second

// New validates options; Run does the work.
func New(opts Options) (*Daemon, error) {
	if opts.ClusterID == "" || opts.NodeName == "" {
		return nil, errors.New("daemon: ClusterID and NodeName are required")
	}
	if opts.Client == nil || opts.Dynamic == nil {
		return nil, errors.New("daemon: Kubernetes clients are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Ready == nil {
		opts.Ready = func(string, error) {}
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 50 * time.Millisecond
	}
	if opts.MaxDelay < opts.Debounce {
		opts.MaxDelay = 10 * opts.Debounce
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	san, err := newSanity(opts.Registry)
	if err != nil {
		return nil, err
	}
	podIPs, err := newPodIPReport(opts.Registry)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		opts:   opts,
		log:    opts.Logger,
		m:      m,
		sanity: san,
		podIPs: podIPs,
		view:   view{mirror: NewMirror(opts.ClusterID), outputs: NewOutputs(opts.ClusterID)},
	}
	d.mirror.Inventory().SetGlobalnetPolicy(opts.GlobalnetPolicy)
	d.outputs.SetGuards(opts.Guards)
	if err := d.initSafety(); err != nil {
		return nil, err
	}
	d.mirror.SetNetworks(enforce.MergeNetworks(opts.ClusterCIDRs))
	return d, nil
}

// Run runs the daemon until ctx ends or the cluster is decommissioned. It
// leaves the mesh gracefully but never retires the cluster on shutdown.
func (d *Daemon) Run(parent context.Context) (err error) {
	ctx, cancel := context.WithCancel(parent)
	d.stop = cancel
	defer cancel()
	o := d.opts

	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := checkNotDecommissioned(o.DataDir, o.ClusterID); err != nil {
		return err
	}

	// 1. durable state, loaded before anything talks to peers
	start := time.Now()
	ignoreFileSizeSignal()
	rep, err := store.OpenReplica(filepath.Join(o.DataDir, StateFile), o.ClusterID,
		store.Options{Registerer: o.Registry, Logger: d.log, OnCommitError: d.storeFailed})
	if err != nil {
		return fmt.Errorf("opening state: %w", err)
	}
	d.rep = rep
	defer func() {
		if cerr := rep.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if info := rep.Info(); info.MovedAside != "" {
		d.log.Warn("state file was corrupt; moved aside, resyncing from peers", "moved_to", info.MovedAside)
	}
	d.mu.Lock()
	var loadErrs []error
	rep.View(func(st *crdt.State) { loadErrs = d.mirror.Load(st) })
	d.outputs.Recompute(d.mirror.Inventory(), nil, true)
	d.mu.Unlock()
	for _, e := range loadErrs {
		d.log.Warn("skipping undecodable entry", "err", e)
	}
	d.log.Info("state loaded", "duration", time.Since(start), "origins", len(rep.Digest()), "policies", d.outputs.Len())
	o.Ready("state", nil)

	// 2. enforcer and status debouncers; the change feed marks them
	d.enf = &enforcer{view: &d.view, roles: &d.roles, m: d.m, log: d.log, lastRun: &d.lastEnforce}
	d.enforce = kube.NewDebouncer(o.Debounce, o.MaxDelay, nil, d.enf.Fire)
	d.st = &statusLoop{self: o.ClusterID, view: &d.view, roles: &d.roles, m: d.m, log: d.log}
	d.stat = kube.NewDebouncer(2*o.Debounce, 4*o.MaxDelay, nil, d.st.Fire)
	d.st.mark = d.stat.Mark
	rep.Subscribe(d.onChanges)

	// 3. leader election (needed by gossip's writer gate and the inventory).
	// The Lease identity is kept in the data dir: a daemon restarted after a
	// crash (same data dir, whose bbolt lock proves the old process is gone)
	// resumes its own Lease at once instead of waiting for it to expire; its
	// versions stay unique because the store bumps the epoch on every open.
	identity, err := leaseIdentity(o.DataDir, o.NodeName)
	if err != nil {
		return err
	}
	d.elector, err = kube.NewElector(kube.LeaderConfig{
		Client: o.Client, Namespace: o.Namespace, ClusterID: o.ClusterID,
		Identity:         identity,
		LeaseDuration:    o.LeaseDuration,
		RenewDeadline:    o.LeaseDuration * 2 / 3,
		RetryPeriod:      o.LeaseDuration / 7,
		OnStartedLeading: d.lead,
		OnStoppedLeading: func() {
			d.leader.Store(false)
			d.m.leader.Set(0)
			d.log.Info("lost leadership; standing by")
		},
		Logger: d.log,
	})
	if err != nil {
		return err
	}

	// 4. gossip
	gcfg := o.Gossip
	gcfg.NodeName, gcfg.ClusterID = o.NodeName, o.ClusterID
	gcfg.IsWriter = d.elector.IsLeader
	gcfg.Logger, gcfg.Registerer = d.log, o.Registry
	gcfg.OnDigest = d.observeDigest
	if gcfg.ReconnectTimeout == 0 {
		gcfg.ReconnectTimeout = 24 * time.Hour
	}
	if o.SigningKey != nil {
		if gcfg.Signer, gcfg.Trust, err = trustFor(o, rep, d.log); err != nil {
			return err
		}
	}
	d.node, err = gossip.New(gcfg, rep)
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	d.w = newWriter(rep, d.node, &d.decommissioned, d.log)
	d.enf.reports = newReporter(replicaReports{rep, o.ClusterID}, d.w.Write, d.acting, d.log)
	defer func() {
		if !d.decommissioned.Load() {
			_ = d.node.Leave(5 * time.Second)
			_ = d.node.Shutdown()
		}
	}()
	d.log.Info("gossip started", "addr", d.node.Addr(), "members", len(d.node.Members()))

	// 5. Kubernetes side: inventory informers (warm on standbys too),
	// NetworkPolicy applier, MCNP status writer
	factory := informers.NewSharedInformerFactory(o.Client, 0)
	recorder, stopEvents := kube.NewEventRecorder(o.Client, "coastguard")
	defer stopEvents()
	d.applier, err = kube.NewApplier(o.Client, factory.Networking().V1().NetworkPolicies(),
		kube.ApplierOptions{Registerer: o.Registry, Logger: d.log, Recorder: recorder,
			OnFailure: func(origin string) { d.enforce.Mark(origin) }})
	if err != nil {
		return err
	}
	d.enf.applier = d.applier
	d.dec = &decommissioner{roles: &d.roles, node: d.node, applier: d.applier, releaseGate: d.releaseGate,
		dataDir: o.DataDir, stop: cancel, log: d.log, settle: 30 * time.Second, poll: 100 * time.Millisecond}
	d.inv, err = kube.NewInventory(kube.InventoryConfig{
		ClusterID: o.ClusterID, Client: o.Client, Dynamic: o.Dynamic,
		Writer:       d.elector.Fenced(d.w),
		Persisted:    d.persistedOwn,
		PodEgressIPs: o.Submariner.PodEgressIPsFunc(),
		ClusterInfo: func() kube.ClusterInfo {
			ci := o.ClusterInfo
			if o.Submariner != nil {
				ci = o.Submariner.Info()
			}
			ci.GossipName = o.NodeName
			return ci
		},
		Registerer: o.Registry, Logger: d.log,
	})
	if err != nil {
		return err
	}
	d.status, err = kube.NewStatusWriter(o.Dynamic, kube.StatusWriterOptions{
		Lister: d.inv.MCNPLister(), Recorder: recorder, Gate: d.elector.IsLeader, Logger: d.log})
	if err != nil {
		return err
	}
	d.st.store = d.status

	var wg sync.WaitGroup
	goRun := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	factory.Start(ctx.Done())
	d.inv.Start(ctx)
	goRun(func() { d.enforce.Run(ctx) })
	goRun(func() { d.stat.Run(ctx) })
	goRun(func() { d.statsLoop(ctx) })
	goRun(func() { d.sanityLoop(ctx, d.sanity, recorder) })
	if o.Submariner != nil {
		o.Submariner.OnChange(d.inv.ClusterChanged)
		o.Submariner.OnChange(d.refreshNetworks)
		o.Submariner.OnPodEgressChange(d.inv.NamespacePodsChanged)
		o.Submariner.Start(ctx.Done())
		// The trusted pod CIDRs come from Submariner's Cluster objects:
		// enforce (and lead) only once they are listed, so that a restart
		// does not apply a view that drops every remote pod. If listing
		// hangs (RBAC, apiserver), go on after a while: unknown CIDRs drop
		// peers (fail closed) and the informer catches up level-triggered.
		syncCtx, syncCancel := context.WithTimeout(ctx, SubmarinerSyncTimeout)
		if !cache.WaitForCacheSync(syncCtx.Done(), o.Submariner.HasSynced) && ctx.Err() == nil {
			d.log.Warn("Submariner objects not listed yet; remote pods of clusters without --cluster-cidrs are left out until they are",
				"waited", SubmarinerSyncTimeout)
		}
		syncCancel()
		if ctx.Err() == nil {
			d.refreshNetworks()
		}
	}
	if o.GossipKeyFile != "" {
		kr := newKeyring(o.GossipKeyFile, o.KeyReloadInterval, d.node, d.log)
		goRun(func() { kr.Run(ctx) })
	}
	goRun(func() {
		if err := d.elector.Run(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("leader election stopped", "err", err)
			cancel()
		}
	})
	d.enforce.Mark(allPolicies)
	o.Ready("enforcement", errors.New("standby: waiting for leadership or first enforcement"))
	goRun(func() { d.readiness(ctx) })

	<-ctx.Done()
	factory.Shutdown()
	wg.Wait()
	d.log.Info("stopped")
	return d.fatal()
}

// readiness: ready once state is loaded and, when leader, the first
// enforcement has been applied; a standby is ready once its caches synced.
func (d *Daemon) readiness(ctx context.Context) {
	every(ctx, 200*time.Millisecond, func(now time.Time) {
		d.heartbeat(now)
		switch {
		case d.leader.Load() && d.applier.Settled():
			d.opts.Ready("enforcement", nil)
		case !d.leader.Load() && d.inv.HasSynced():
			d.opts.Ready("enforcement", nil)
		}
	})
}

// every calls fn on each tick of a ticker until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}

// lead runs for one leadership term.
func (d *Daemon) lead(ctx context.Context, epochHint uint32) {
	if err := d.rep.SetMinEpoch(epochHint); err != nil {
		d.log.Error("cannot persist writer epoch; giving up this term", "err", err)
		return
	}
	// Seed the applier with what this daemon already computed (from the
	// loaded state, or warm as a standby) before it runs: started with an
	// empty desired set it would delete every generated NetworkPolicy and
	// re-create it on the first enforcement after a restart or failover.
	d.mu.Lock()
	desired := d.outputs.Desired()
	d.mu.Unlock()
	if err := d.applier.SetDesired(desired); err != nil {
		d.log.Error("enforcer produced an invalid NetworkPolicy set", "err", err)
	}
	d.closeGate() // nothing is deleted or shrunk until the view is complete
	d.leader.Store(true)
	d.m.leader.Set(1)
	d.log.Info("leading", "epoch", d.rep.Epoch())

	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); d.clusterSetLoop(ctx) }() // CoastguardCluster objects
	go func() { defer wg.Done(); d.gateLoop(ctx) }()
	go func() {
		defer wg.Done()
		if err := d.applier.Run(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("applier stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		newCollector(d.opts.ClusterID, d.opts.TombstoneGCAfter, d.rep, d.node, d.log).Run(ctx)
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.w.FullSyncRequests():
				if err := d.inv.FullSync(); err != nil && ctx.Err() == nil {
					d.log.Warn("full sync after epoch bump failed", "err", err)
				}
			}
		}
	}()
	d.enforce.Mark(allPolicies) // re-apply everything and reconcile reports
	d.st.MarkAll()
	if err := d.inv.RunWriter(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, kube.ErrNotLeader) {
		d.log.Error("inventory writer stopped", "err", err)
	}
	wg.Wait()
}

// leaseIdentity returns the identity persisted in dataDir for this node name,
// creating it on first use.
func leaseIdentity(dataDir, node string) (string, error) {
	path := filepath.Join(dataDir, "lease-identity")
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if strings.HasPrefix(id, node+"_") {
			return id, nil
		}
	} else if !os.IsNotExist(err) {
		return "", fmt.Errorf("lease identity: %w", err)
	}
	id := kube.NewIdentity(node)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("lease identity: %w", err)
	}
	return id, nil
}

// persistedOwn lists this cluster's own live entries for the inventory diff.
func (d *Daemon) persistedOwn() (kube.Snapshot, error) {
	var snap kube.Snapshot
	d.rep.View(func(st *crdt.State) { snap = kube.OwnSnapshot(st, d.opts.ClusterID, kube.InventoryKinds) })
	return snap, nil
}

// onChanges is the replica's change feed (called after commit, in order).
func (d *Daemon) onChanges(changes []crdt.Change) {
	var newest int64
	ownRemoved := false
	for _, ch := range changes {
		if ch.New != nil && ch.New.Stamp > newest {
			newest = ch.New.Stamp
		}
		if ch.Key.Origin == d.opts.ClusterID && ch.New == nil && ch.Old != nil && !ch.Old.Deleted {
			ownRemoved = true
		}
	}
	d.mu.Lock()
	res := d.mirror.Apply(changes)
	d.mu.Unlock()
	for _, e := range res.Errors {
		d.m.decodeErrors.Inc()
		d.log.Warn("skipping undecodable entry", "err", e)
	}
	d.enf.NoteStamp(newest)
	switch {
	case res.All:
		d.enforce.Mark(allPolicies)
	case len(res.Affected) > 0:
		d.enforce.Mark(res.Affected...)
	}
	if len(res.StatusDirty) > 0 {
		d.stat.Mark(res.StatusDirty...)
	}
	if ownRemoved && d.leader.Load() {
		d.w.OwnRetired()
	}
}

// Decommission retires this cluster from the cluster set and stops the
// daemon (see decommissioner). Only the leader can.
func (d *Daemon) Decommission(ctx context.Context) error {
	if !d.leader.Load() || d.dec == nil {
		return errNotLeaderDecommission
	}
	return d.dec.Decommission(ctx)
}

// State is the /debug/state document.
type State struct {
	Cluster    string                          `json:"cluster"`
	Node       string                          `json:"node"`
	Leader     bool                            `json:"leader"`
	Epoch      uint32                          `json:"epoch"`
	Members    []gossip.MemberInfo             `json:"members"`
	Clusters   map[string]gossip.ClusterStatus `json:"clusters"`
	Origins    map[string]string               `json:"origins"`
	Policies   int                             `json:"policies"`
	Generated  int                             `json:"generatedNetworkPolicies"`
	PendingInv int                             `json:"pendingInventory"`
}

// DebugState summarises the daemon for operators and the demo.
func (d *Daemon) DebugState() any {
	s := State{Cluster: d.opts.ClusterID, Node: d.opts.NodeName, Leader: d.leader.Load(), Origins: map[string]string{}}
	if d.rep != nil {
		s.Epoch = d.rep.Epoch()
		for o, od := range d.rep.Digest() {
			s.Origins[o] = od.Max.String()
		}
	}
	if d.node != nil {
		s.Members = d.node.Members()
		sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Name < s.Members[j].Name })
		s.Clusters = d.node.Clusters()
	}
	d.mu.Lock()
	s.Policies = d.outputs.Len()
	s.Generated = len(d.outputs.Desired())
	d.mu.Unlock()
	if d.inv != nil {
		s.PendingInv = d.inv.Pending()
	}
	return s
}

func (d *Daemon) statsLoop(ctx context.Context) {
	every(ctx, 5*time.Second, func(time.Time) {
		d.m.enforcePending.Set(float64(d.enforce.Pending()))
	})
}
