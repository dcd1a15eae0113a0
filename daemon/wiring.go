package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/store"
)

// The phases Run composes, in order. Each builds parts from the ones
// before it; none starts a goroutine except startLoops.

// openState opens the replica and loads the view from it, before anything
// talks to peers.
func (d *Daemon) openState() (*store.Replica, error) {
	o := d.opts
	start := time.Now()
	ignoreFileSizeSignal()
	d.mu.Lock()
	rep, loadErrs, err := LoadState(filepath.Join(o.DataDir, StateFile), o.ClusterID,
		store.Options{Registerer: o.Registry, Logger: d.log, OnCommitError: d.storeFailed, Now: d.now}, d.mirror)
	if err != nil {
		d.mu.Unlock()
		return nil, fmt.Errorf("opening state: %w", err)
	}
	d.rep = rep
	if info := rep.Info(); info.MovedAside != "" {
		d.log.Warn("state file was corrupt; moved aside, resyncing from peers", "moved_to", info.MovedAside)
	}
	d.lost.recs = map[string]store.LostOrigin{}
	d.restoreLost()
	d.holdLoaded()
	d.outputs.Recompute(d.mirror.Inventory(), nil, true)
	d.mu.Unlock()
	for _, e := range loadErrs {
		d.log.Warn("skipping undecodable entry", "err", e)
	}
	d.log.Info("state loaded", "duration", time.Since(start), "origins", len(rep.Digest()), "policies", d.outputs.Len())
	o.Ready("state", nil)
	return rep, nil
}

// wireLoops builds the enforcer and status parts and their debouncers, and
// subscribes the change feed that marks them.
func (d *Daemon) wireLoops() {
	o := d.opts
	d.enf = &enforcer{view: &d.view, roles: &d.roles, m: d.m, log: d.log, lastRun: &d.lastEnforce}
	d.enforce = kube.NewDebouncerFunc(o.Debounce, o.MaxDelay, nil, enforce.PolicyRef.Compare, d.enf.Fire)
	d.st = &statusLoop{self: o.ClusterID, view: &d.view, roles: &d.roles, m: d.m, log: d.log}
	d.stat = kube.NewDebouncerFunc(2*o.Debounce, 4*o.MaxDelay, nil, enforce.PolicyRef.Compare, d.st.Fire)
	d.st.mark = d.stat.Mark
	d.rep.Subscribe(d.onChanges)
}

// newElector builds leader election (needed by gossip's writer gate and the
// inventory). The Lease identity is kept in the data dir: a daemon
// restarted after a crash (same data dir, whose bbolt lock proves the old
// process is gone) resumes its own Lease at once instead of waiting for it
// to expire; its versions stay unique because the store bumps the epoch on
// every open.
func (d *Daemon) newElector() error {
	o := d.opts
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
	return err
}

// startGossip joins the mesh and builds the parts that publish: the writer
// and the reporter.
func (d *Daemon) startGossip() error {
	o, rep := d.opts, d.rep
	gcfg := o.Gossip
	gcfg.NodeName, gcfg.ClusterID = o.NodeName, o.ClusterID
	gcfg.IsWriter = d.elector.IsLeader
	gcfg.Logger, gcfg.Registerer = d.log, o.Registry
	gcfg.OnDigest = d.observeDigest
	gcfg.WantDigests = d.wantDigests
	if gcfg.ReconnectTimeout == 0 {
		gcfg.ReconnectTimeout = 24 * time.Hour
	}
	// The replica's own configuration, before it meets the mesh: limits
	// on what peers can make it hold (known clusters always get an origin
	// slot: crdt.Limits.Known), and signing and verification under the
	// node's retire authority.
	lim := crdt.DefaultLimits()
	lim.Known = d.knownOrigin
	var err error
	if o.SigningKey != nil {
		if gcfg.Signer, gcfg.Trust, err = trustFor(o, rep, d.log); err != nil {
			return err
		}
	}
	gcfg.KnownPeers = d.knownPeers()
	gossip.ConfigureReplica(&gcfg, decidingReplica{Configurable: rep, lost: &d.lost}, lim)
	d.node, err = gossip.New(gcfg, lostGuard{Replica: rep, d: d})
	if err != nil {
		return fmt.Errorf("gossip: %w", err)
	}
	d.w = newWriter(rep, d.node, &d.decommissioned, d.log)
	d.reports = newReporter(replicaReports{rep, o.ClusterID}, d.w.Write, d.acting, d.log)
	d.enf.reports = d.reports
	d.log.Info("gossip started", "addr", d.node.Addr(), "members", len(d.node.Members()))
	return nil
}

// leaveMesh leaves gracefully on shutdown (a decommission already did).
func (d *Daemon) leaveMesh() {
	if !d.decommissioned.Load() {
		_ = d.node.Leave(5 * time.Second)
		_ = d.node.Shutdown()
	}
}

// kubeParts are the Kubernetes-side handles Run starts and stops.
type kubeParts struct {
	factory    informers.SharedInformerFactory
	recorder   record.EventRecorder
	stopEvents func()
}

// wireKube builds the Kubernetes side: the NetworkPolicy applier, the
// inventory (informers warm on standbys too; writes fenced by the Lease),
// the MCNP status writer, and the decommission part that uses them.
func (d *Daemon) wireKube(cancel context.CancelFunc) (kubeParts, error) {
	o := d.opts
	k := kubeParts{factory: informers.NewSharedInformerFactory(o.Client, 0)}
	k.recorder, k.stopEvents = kube.NewEventRecorder(o.Client, "coastguard")
	var err error
	d.applier, err = kube.NewApplier(o.Client, k.factory.Networking().V1().NetworkPolicies(),
		kube.ApplierOptions{Registerer: o.Registry, Logger: d.log, Recorder: k.recorder,
			OnFailure: d.markFailed})
	if err == nil {
		d.enf.applier = d.applier
		d.enf.releaseHold = func() {
			if !d.gateClosed.Load() { // not a later term's gate, closed meanwhile
				d.applier.SetHold(false)
			}
		}
		d.dec = &decommissioner{roles: &d.roles, rep: d.rep, node: d.node, applier: d.applier, releaseGate: d.releaseGate,
			dataDir: o.DataDir, stop: cancel, log: d.log, settle: 30 * time.Second, poll: 100 * time.Millisecond}
		d.inv, err = kube.NewInventory(d.inventoryConfig())
	}
	if err == nil {
		d.status, err = kube.NewStatusWriter(o.Dynamic, kube.StatusWriterOptions{
			Lister: d.inv.MCNPLister(), Recorder: k.recorder, Gate: d.elector.IsLeader, Logger: d.log})
		d.st.store = d.status
	}
	if err != nil {
		k.stopEvents()
		return kubeParts{}, err
	}
	return k, nil
}

func (d *Daemon) inventoryConfig() kube.InventoryConfig {
	o := d.opts
	return kube.InventoryConfig{
		ClusterID: o.ClusterID, Client: o.Client, Dynamic: o.Dynamic,
		Writer:           d.elector.Fenced(d.w),
		Persisted:        d.persistedOwn,
		PodEgressIPs:     o.Submariner.PodEgressIPsFunc(),
		ServiceGlobalIPs: o.Submariner.ServiceGlobalIPsFunc(),
		ClusterInfo: func() kube.ClusterInfo {
			ci := o.ClusterInfo
			if o.Submariner != nil {
				ci = o.Submariner.Info()
			}
			ci.GossipName = o.NodeName
			return ci
		},
		Registerer: o.Registry, Logger: d.log,
	}
}

// startLoops starts every long-running part; leadership (lead) starts the
// leader-only ones.
func (d *Daemon) startLoops(ctx context.Context, cancel context.CancelFunc, k kubeParts, goRun func(func())) {
	o := d.opts
	d.applier.SetUnprovenCheck(d.policyUnproven) // before the first reconcile (proven.go)
	k.factory.Start(ctx.Done())
	d.inv.Start(ctx)
	goRun(func() { d.enforce.Run(ctx) })
	goRun(func() { d.stat.Run(ctx) })
	goRun(func() { d.statsLoop(ctx) })
	goRun(func() { d.sanityLoop(ctx, d.sanity, k.recorder) })
	goRun(func() { d.keyEventLoop(ctx, k.recorder) })     // SigningKeyMismatch Events (trust.go)
	goRun(func() { d.consentEventLoop(ctx, k.recorder) }) // MCNPNotAdmitted Events (consent.go)
	goRun(func() { d.releaseLoop(ctx) })                  // release annotations of lost clusters (lost.go)
	goRun(func() { d.pinLoop(ctx) })                      // this cluster's shared key pins (pins.go)
	goRun(func() { d.provenLoop(ctx) })                   // MCNPs not yet proven by their origin's mark (proven.go)
	goRun(func() { d.peerLoop(ctx) })                     // the gossip addresses a restart dials with the seeds (peers.go)
	if o.Submariner != nil {
		d.startSubmariner(ctx)
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
}

// startSubmariner follows Submariner's objects. The trusted pod CIDRs come
// from its Cluster objects: enforce (and lead) only once they are listed,
// so that a restart does not apply a view that drops every remote pod. If
// listing hangs (RBAC, apiserver), go on after a while: unknown CIDRs drop
// peers (fail closed) and the informer catches up level-triggered.
func (d *Daemon) startSubmariner(ctx context.Context) {
	sub := d.opts.Submariner
	sub.OnChange(d.inv.ClusterChanged)
	sub.OnChange(d.refreshNetworks)
	sub.OnPodEgressChange(d.inv.NamespacePodsChanged)
	sub.OnServiceGlobalIPChange(d.inv.ServiceChanged)
	sub.Start(ctx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, SubmarinerSyncTimeout)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), sub.HasSynced) && ctx.Err() == nil {
		d.log.Warn("Submariner objects not listed yet; remote pods of clusters without --cluster-cidrs are left out until they are",
			"waited", SubmarinerSyncTimeout)
	}
	if ctx.Err() == nil {
		d.refreshNetworks()
	}
}
