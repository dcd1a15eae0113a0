package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
	"github.com/coastguard-mcnp/coastguard/store"
)

// StateFile is the bbolt file name inside the data dir.
const StateFile = "state.db"

// Daemon is one coastguardd.
type Daemon struct {
	opts Options
	log  *slog.Logger
	m    *metrics
	lost lostOrigins // lost clusters whose policies are kept (lost.go)

	sanity *sanity
	podIPs *podIPReport

	// infrastructure, built by Run's phases (wiring.go)
	rep     *store.Replica
	node    *gossip.Node
	elector *kube.Elector
	inv     *kube.Inventory
	applier *kube.Applier
	status  *kube.StatusWriter

	view  // mirror and outputs
	roles // leader, decommissioned

	// the parts (see docs/ARCHITECTURE.md, "The daemon")
	w       *writer
	reports *reporter // the enforcer's report publisher
	enf     *enforcer
	enforce *kube.Debouncer[enforce.PolicyRef] // fires enf
	st      *statusLoop
	stat    *kube.Debouncer[enforce.PolicyRef] // fires st
	dec     *decommissioner

	stop context.CancelFunc

	safety // gate, store failure, liveness (safety.go)

	// known: the clusters known independently of gossip (ownership.go)
	known atomic.Pointer[map[string]bool]
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
		view:   view{mirror: newMirror(opts.ClusterID), outputs: model.NewOutputs(opts.ClusterID), hold: newInventoryHold(opts.ClusterID)},
	}
	d.mirror.Inventory().SetGlobalnetPolicy(opts.GlobalnetPolicy)
	d.outputs.SetGuards(opts.Guards)
	d.outputs.SetConsent(opts.Consent)
	if opts.Consent != nil {
		d.mirror.SetTrustedLabels(opts.Consent.ClusterLabels)
	}
	if err := d.initSafety(); err != nil {
		return nil, err
	}
	d.mirror.SetNetworks(enforce.MergeNetworks(opts.ClusterCIDRs))
	d.setKnownOrigins(enforce.MergeNetworks(opts.ClusterCIDRs))
	return d, nil
}

// Run runs the daemon until ctx ends or the cluster is decommissioned. It
// leaves the mesh gracefully but never retires the cluster on shutdown.
//
// Run only composes the parts, in dependency order: durable state (loaded
// before anything talks to peers), the change feed and its loops, leader
// election, gossip and the writer, the Kubernetes side; then it starts the
// loops and waits. A leadership term (lead) runs the leader-only parts.
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
	rep, err := d.openState() // 1. durable state
	if err != nil {
		return err
	}
	defer func() {
		if cerr := rep.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	d.wireLoops()                          // 2. enforcer and status; the change feed marks them
	if err := d.newElector(); err != nil { // 3. leader election
		return err
	}
	if err := d.advertiseGlobalIP(ctx); err != nil { // 4. Globalnet: wait for the address to advertise
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := d.startGossip(); err != nil { // 5. gossip, writer, reporter
		return err
	}
	defer d.leaveMesh()
	k, err := d.wireKube(cancel) // 6. applier, inventory, status writer
	if err != nil {
		return err
	}
	defer k.stopEvents()

	var wg sync.WaitGroup
	goRun := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	d.startLoops(ctx, cancel, k, goRun)
	<-ctx.Done()
	k.factory.Shutdown()
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

// Decommission retires this cluster from the cluster set and stops the
// daemon (see decommissioner). Only the leader can.
func (d *Daemon) Decommission(ctx context.Context) error {
	if !d.leader.Load() || d.dec == nil {
		return errNotLeaderDecommission
	}
	return d.dec.Decommission(ctx)
}

func (d *Daemon) statsLoop(ctx context.Context) {
	every(ctx, 5*time.Second, func(time.Time) {
		d.m.enforcePending.Set(float64(d.enforce.Pending()))
	})
}
