package kube

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
)

// podRelevant is the default pod filter: only pods that can be policy peers
// (they have an IP and have not terminated) are replicated. This keeps pod
// creation to one write instead of three (pending, IP assigned, running).
func podRelevant(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	return p.Status.PodIP != "" || len(p.Status.PodIPs) > 0
}

// InventoryConfig configures an Inventory.
type InventoryConfig struct {
	ClusterID string
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	// Discovery decides whether ClusterProperty is served; defaults to
	// Client.Discovery().
	Discovery discovery.DiscoveryInterface
	// Writer receives this cluster's writes (wrap it with Elector.Fenced).
	Writer Writer
	// Persisted lists this cluster's own live entries as the replica holds
	// them (for InventoryKinds); compared with the informer caches on every
	// full sync.
	Persisted func() (Snapshot, error)
	// ClusterInfo supplies CIDRs/Globalnet data for the cluster entry
	// (optional). Call Inventory.ClusterChanged when it changes.
	ClusterInfo func() ClusterInfo
	// PodEgressIPs supplies a pod's Globalnet egress IPs (optional; see
	// SubmarinerWatcher.PodEgressIPs). Call NamespacePodsChanged when they
	// change.
	PodEgressIPs func(namespace string, labels map[string]string) []string
	// ServiceGlobalIPs supplies an exported Service's Globalnet global
	// ingress IPs (optional; see SubmarinerWatcher.ServiceGlobalIPs). Call
	// ServiceChanged when they change.
	ServiceGlobalIPs func(namespace, name string) ([]string, error)
	// PodFilter selects replicated pods (default podRelevant).
	PodFilter func(*corev1.Pod) bool
	// FullSyncPeriod is how often the writer re-diffs everything against
	// the persisted entries (default 10m; also done at every term start).
	FullSyncPeriod time.Duration
	RateLimiter    workqueue.TypedRateLimiter[InventoryKey]
	Registerer     prometheus.Registerer
	// Recorder, when set, gets a Warning Event on every MCNP that cannot be
	// replicated (no spec, too large).
	Recorder record.EventRecorder
	Logger   *slog.Logger
}

// InventoryKey is one queued inventory item. Kind 0 means "full sync".
type InventoryKey struct {
	Kind crdt.Kind
	Name string
}

var fullSyncKey = InventoryKey{}

type inventoryMetrics struct {
	writes    *prometheus.CounterVec // kind, op=set|delete
	errors    *prometheus.CounterVec // kind
	fullSyncs prometheus.Counter
}

func newInventoryMetrics(reg prometheus.Registerer) (*inventoryMetrics, error) {
	m := &inventoryMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_inventory_writes_total", Help: "Local CRDT writes emitted from Kubernetes inventory."}, []string{"kind", "op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_inventory_errors_total", Help: "Inventory objects that could not be converted or written."}, []string{"kind"}),
		fullSyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_inventory_full_syncs_total", Help: "Full diffs of the informer caches against persisted own entries."}),
	}
	if err := metricsreg.All(reg, m.writes, m.errors, m.fullSyncs); err != nil {
		return nil, fmt.Errorf("inventory metrics: %w", err)
	}
	return m, nil
}

// Inventory watches local pods, namespaces, MCNPs, exported Services and
// (when installed) ClusterProperties and ServiceExports, and turns them into this cluster's CRDT writes. The
// informers run on every daemon (warm standby); only RunWriter, run by the
// leader, writes.
type Inventory struct {
	cfg     InventoryConfig
	log     *slog.Logger
	metrics *inventoryMetrics

	factory    informers.SharedInformerFactory
	dynFactory dynamicinformer.DynamicSharedInformerFactory
	pods       corelisters.PodLister
	namespaces corelisters.NamespaceLister
	mcnps      cache.GenericLister
	services   corelisters.ServiceLister
	synced     []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[InventoryKey]

	mu          sync.Mutex
	props       cache.GenericLister // nil until ClusterProperty is watched
	propsSynced cache.InformerSynced
	// exports is nil until ServiceExport is watched (services.go).
	exports       cache.GenericLister
	exportsSynced cache.InformerSynced
	lastWritten   Snapshot // what this term wrote or found persisted
	started       bool
	stopCh        <-chan struct{}
}

// NewInventory sets up the informers (not started yet).
func NewInventory(cfg InventoryConfig) (*Inventory, error) {
	switch {
	case cfg.ClusterID == "":
		return nil, errors.New("inventory: cluster ID is required")
	case cfg.Client == nil || cfg.Dynamic == nil:
		return nil, errors.New("inventory: kubernetes and dynamic clients are required")
	case cfg.Writer == nil:
		return nil, errors.New("inventory: writer is required")
	case cfg.Persisted == nil:
		return nil, errors.New("inventory: persisted-entries lister is required")
	}
	if cfg.Discovery == nil {
		cfg.Discovery = cfg.Client.Discovery()
	}
	if cfg.PodFilter == nil {
		cfg.PodFilter = podRelevant
	}
	if cfg.FullSyncPeriod <= 0 {
		cfg.FullSyncPeriod = 10 * time.Minute
	}
	if cfg.RateLimiter == nil {
		cfg.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[InventoryKey]()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := newInventoryMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	inv := &Inventory{
		cfg: cfg, log: cfg.Logger.With("component", "inventory"), metrics: m,
		factory:     informers.NewSharedInformerFactory(cfg.Client, 0),
		dynFactory:  dynamicinformer.NewDynamicSharedInformerFactory(cfg.Dynamic, 0),
		queue:       workqueue.NewTypedRateLimitingQueueWithConfig(cfg.RateLimiter, workqueue.TypedRateLimitingQueueConfig[InventoryKey]{Name: "coastguard_inventory"}),
		lastWritten: Snapshot{},
	}

	for _, kind := range InventoryKinds {
		src := kindSources[kind]
		if src.watch == nil {
			continue
		}
		inf, err := src.watch(inv)
		if err != nil {
			return nil, fmt.Errorf("inventory: %v informer: %w", kind, err)
		}
		src.bind(inv, inf.GetIndexer())
		inv.synced = append(inv.synced, inf.HasSynced)
		if _, err := inf.AddEventHandler(inv.handler(kind)); err != nil {
			return nil, fmt.Errorf("inventory: add handler: %w", err)
		}
		if err := inf.SetWatchErrorHandlerWithContext(inv.onWatchError); err != nil {
			return nil, fmt.Errorf("inventory: watch error handler: %w", err)
		}
	}
	return inv, nil
}

// RelistSyncDelay is how long after a watch failure (which makes the
// reflector relist) the writer re-diffs everything against the persisted
// entries.
var RelistSyncDelay = 2 * time.Second

// onWatchError keeps client-go's logging and schedules a full sync: the
// reflector is about to relist, and the diff after it catches anything a
// broken watch lost.
func (inv *Inventory) onWatchError(ctx context.Context, r *cache.Reflector, err error) {
	cache.DefaultWatchErrorHandler(ctx, r, err)
	inv.queue.AddAfter(fullSyncKey, RelistSyncDelay)
}

func (inv *Inventory) handler(kind crdt.Kind) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			inv.log.Warn("cannot key object", "kind", kind, "err", err)
			return
		}
		inv.queue.Add(InventoryKey{Kind: kind, Name: key})
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	}
}

// Start starts the informers and returns at once; ClusterProperty is
// watched only if discovery shows it is served (re-checked on every full
// sync, so installing the CRD later is picked up).
func (inv *Inventory) Start(ctx context.Context) {
	inv.mu.Lock()
	inv.started = true
	inv.stopCh = ctx.Done()
	inv.mu.Unlock()
	inv.ensureClusterProperties()
	inv.ensureServiceExports()
	inv.factory.Start(ctx.Done())
	inv.dynFactory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		inv.queue.ShutDown()
	}()
	inv.queue.Add(InventoryKey{Kind: crdt.KindCluster})
}

// ResourceServed asks discovery whether the apiserver serves gvr (for
// example whether a CRD is installed). A missing group/version is
// (false, nil); other discovery failures are errors.
func ResourceServed(d discovery.DiscoveryInterface, gvr schema.GroupVersionResource) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// ClusterPropertyServed reports whether about.k8s.io/v1alpha1
// clusterproperties is installed.
func ClusterPropertyServed(d discovery.DiscoveryInterface) (bool, error) {
	return ResourceServed(d, ClusterPropertyResource)
}

// ensureClusterProperties starts the ClusterProperty informer once the
// resource is served.
func (inv *Inventory) ensureClusterProperties() {
	inv.mu.Lock()
	have, stop := inv.props != nil, inv.stopCh
	inv.mu.Unlock()
	if have {
		return
	}
	ok, err := ClusterPropertyServed(inv.cfg.Discovery)
	if err != nil {
		inv.log.Warn("discovery of ClusterProperty failed; will retry", "err", err)
		return
	}
	if !ok {
		return
	}
	inf := inv.dynFactory.ForResource(ClusterPropertyResource)
	_ = inf.Informer().SetTransform(stripManagedFields) // fails only once started; then it is already set
	enqueue := func(any) { inv.queue.Add(InventoryKey{Kind: crdt.KindCluster}) }
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue,
	}); err != nil {
		inv.log.Warn("cannot watch ClusterProperty", "err", err)
		return
	}
	inv.mu.Lock()
	inv.props, inv.propsSynced = inf.Lister(), inf.Informer().HasSynced
	inv.mu.Unlock()
	if stop != nil {
		inv.dynFactory.Start(stop) // starts only the new informer
	}
	inv.log.Info("watching ClusterProperty")
}

// HasSynced reports whether every informer has completed its initial list.
func (inv *Inventory) HasSynced() bool {
	for _, s := range inv.synced {
		if !s() {
			return false
		}
	}
	inv.mu.Lock()
	ps, es := inv.propsSynced, inv.exportsSynced
	inv.mu.Unlock()
	return (ps == nil || ps()) && (es == nil || es())
}

// WaitForSync blocks until the caches are synced or ctx is done.
func (inv *Inventory) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), inv.HasSynced) {
		return fmt.Errorf("inventory caches did not sync: %w", ctx.Err())
	}
	return nil
}

// MCNPLister lists MCNPs from the informer cache (unstructured).
func (inv *Inventory) MCNPLister() cache.GenericLister { return inv.mcnps }

// ClusterChanged queues a rewrite of the cluster entry (call it when
// ClusterInfo changes).
func (inv *Inventory) ClusterChanged() { inv.queue.Add(InventoryKey{Kind: crdt.KindCluster}) }

// NamespacePodsChanged queues a rewrite of every pod of a namespace (call
// it when PodEgressIPs may have changed for them).
func (inv *Inventory) NamespacePodsChanged(namespace string) {
	pods, err := inv.pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range pods {
		inv.queue.Add(InventoryKey{Kind: crdt.KindPod, Name: PodName(p.Namespace, p.Name)})
	}
}

// desiredValue computes one entry's value from the caches. present=false
// means the object is gone (or filtered out) and its entry should be a
// tombstone.
func (inv *Inventory) desiredValue(key InventoryKey) (value []byte, present bool, err error) {
	src, ok := kindSources[key.Kind]
	if !ok {
		return nil, false, fmt.Errorf("inventory: unknown kind %v", key.Kind)
	}
	return src.value(inv, key.Name)
}

func (inv *Inventory) clusterValue() (crdt.ClusterValue, []error) {
	var props []clusterProperty
	var errs []error
	inv.mu.Lock()
	lister := inv.props
	inv.mu.Unlock()
	if lister != nil {
		objs, err := lister.List(labels.Everything())
		if err != nil {
			errs = append(errs, err)
		}
		for _, o := range objs {
			u, ok := o.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			p, err := clusterPropertyFrom(u)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			props = append(props, p)
		}
	}
	var info ClusterInfo
	if inv.cfg.ClusterInfo != nil {
		info = inv.cfg.ClusterInfo()
	}
	v, more := clusterValueFrom(inv.cfg.ClusterID, props, info)
	return v, append(errs, more...)
}

// Desired converts the whole informer cache into a snapshot. Objects that
// fail to convert are returned in failed (their persisted values must be
// kept, not tombstoned).
func (inv *Inventory) Desired() (desired Snapshot, failed []InventoryKey, err error) {
	desired, errs, err := inv.Entries()
	if err != nil {
		return nil, nil, err
	}
	for _, k := range sortedKeys(errs) {
		failed = append(failed, k)
		inv.metrics.errors.WithLabelValues(k.Kind.String()).Inc()
		inv.log.Warn("cannot convert object; keeping its last replicated value", "kind", k.Kind, "name", k.Name, "err", errs[k])
	}
	return desired, failed, nil
}

// Entries converts every object of the inventory's listers into the
// entries this cluster writes, with kindSources' converters; the objects
// that fail to convert are in errs, keyed by their entry.
func (inv *Inventory) Entries() (entries Snapshot, errs map[InventoryKey]error, err error) {
	entries = Snapshot{}
	for _, k := range InventoryKinds {
		entries[k] = map[string][]byte{}
	}
	var keys []InventoryKey
	for _, kind := range InventoryKinds {
		names, err := kindSources[kind].names(inv)
		if err != nil {
			return nil, nil, err
		}
		for _, n := range names {
			keys = append(keys, InventoryKey{Kind: kind, Name: n})
		}
	}
	errs = map[InventoryKey]error{}
	for _, k := range keys {
		v, present, err := inv.desiredValue(k)
		if err != nil {
			errs[k] = err
			continue
		}
		if present {
			entries.Set(k.Kind, k.Name, v)
		}
	}
	return entries, errs, nil
}

// sortedKeys is the keys of errs in crdt kind order, then by name.
func sortedKeys(errs map[InventoryKey]error) []InventoryKey {
	order := map[crdt.Kind]int{}
	for i, k := range InventoryKinds {
		order[k] = i
	}
	keys := slices.Collect(maps.Keys(errs))
	slices.SortFunc(keys, func(a, b InventoryKey) int {
		return cmp.Or(cmp.Compare(order[a.Kind], order[b.Kind]), cmp.Compare(a.Name, b.Name))
	})
	return keys
}

// FullSync diffs the caches against the persisted own entries and writes
// the difference (the join flow: objects deleted while the daemon was down
// become tombstones). It resets the no-op cache to the result. RunWriter
// calls it at the start of every term and every FullSyncPeriod; call it
// directly only while RunWriter is not running.
func (inv *Inventory) FullSync() error { return inv.fullSync(false) }

// Republish is FullSync that also rewrites every desired entry whose
// replicated value is already equal, so that after it every own live
// inventory entry carries a version of the writer's current epoch. A new
// leader calls it before sealing the prior epochs (what the old leader
// wrote and this replica never saw is then retired everywhere).
func (inv *Inventory) Republish() error { return inv.fullSync(true) }

func (inv *Inventory) fullSync(all bool) error {
	if !inv.HasSynced() {
		return errors.New("inventory: caches not synced")
	}
	desired, failed, err := inv.Desired()
	if err != nil {
		return err
	}
	persisted, err := inv.cfg.Persisted()
	if err != nil {
		return fmt.Errorf("inventory: list persisted entries: %w", err)
	}
	for _, k := range failed { // never tombstone what we merely failed to convert
		if v, ok := persisted.Get(k.Kind, k.Name); ok {
			desired.Set(k.Kind, k.Name, v)
		}
	}
	inv.metrics.fullSyncs.Inc()
	writes := Diff(InventoryKinds, desired, persisted)
	if all {
		writes = republishWrites(desired, writes)
	}
	written := Snapshot{}
	for k, m := range persisted {
		for n, v := range m {
			written.Set(k, n, v)
		}
	}
	var errs []error
	writeErrs := inv.writeAll(writes)
	for i, w := range writes {
		if err := writeErrs[i]; err != nil {
			inv.metrics.errors.WithLabelValues(w.Kind.String()).Inc()
			errs = append(errs, fmt.Errorf("%v %s: %w", w.Kind, w.Name, err))
			if errors.Is(err, ErrNotLeader) {
				break
			}
			inv.queue.AddRateLimited(InventoryKey{Kind: w.Kind, Name: w.Name})
			continue
		}
		inv.countWrite(w.Kind, w.Deleted)
		if w.Deleted {
			written.Delete(w.Kind, w.Name)
		} else {
			written.Set(w.Kind, w.Name, w.Value)
		}
	}
	inv.mu.Lock()
	inv.lastWritten = written
	inv.mu.Unlock()
	inv.log.Info("full sync", "writes", len(writes), "errors", len(errs))
	return errors.Join(errs...)
}

// writeAll writes the full sync's writes and returns one error per write:
// in chunks through a BatchWriter (one durable commit per chunk instead of
// one fsync per object), else one by one.
func (inv *Inventory) writeAll(writes []Write) []error {
	writeErrs := make([]error, len(writes))
	if bw, ok := inv.cfg.Writer.(BatchWriter); ok {
		for lo := 0; lo < len(writes); lo += fullSyncBatch {
			hi := min(lo+fullSyncBatch, len(writes))
			copy(writeErrs[lo:hi], bw.WriteBatch(writes[lo:hi]))
		}
		return writeErrs
	}
	for i, w := range writes {
		writeErrs[i] = inv.cfg.Writer.Write(w.Kind, w.Name, w.Value, w.Deleted)
	}
	return writeErrs
}

// republishWrites is every desired entry as a set, plus the tombstones of
// diff (the persisted entries no longer desired).
func republishWrites(desired Snapshot, diff []Write) []Write {
	out := Diff(InventoryKinds, desired, Snapshot{})
	for _, w := range diff {
		if w.Deleted {
			out = append(out, w)
		}
	}
	return out
}

func (inv *Inventory) countWrite(kind crdt.Kind, deleted bool) {
	op := "set"
	if deleted {
		op = "delete"
	}
	inv.metrics.writes.WithLabelValues(kind.String(), op).Inc()
}

// syncKey writes one entry if it changed since the last write.
func (inv *Inventory) syncKey(key InventoryKey) error {
	v, present, err := inv.desiredValue(key)
	if err != nil {
		inv.metrics.errors.WithLabelValues(key.Kind.String()).Inc()
		inv.log.Warn("cannot convert object; keeping its last replicated value", "kind", key.Kind, "name", key.Name, "err", err)
		return nil // retrying cannot help until the object changes
	}
	inv.mu.Lock()
	old, had := inv.lastWritten.Get(key.Kind, key.Name)
	inv.mu.Unlock()
	switch {
	case present && had && bytes.Equal(old, v):
		return nil
	case !present && !had:
		return nil
	}
	if err := inv.cfg.Writer.Write(key.Kind, key.Name, v, !present); err != nil {
		inv.metrics.errors.WithLabelValues(key.Kind.String()).Inc()
		return err
	}
	inv.countWrite(key.Kind, !present)
	inv.mu.Lock()
	if present {
		inv.lastWritten.Set(key.Kind, key.Name, v)
	} else {
		inv.lastWritten.Delete(key.Kind, key.Name)
	}
	inv.mu.Unlock()
	return nil
}

// RunWriter is the leader's loop: wait for the caches, full sync, then
// write each changed object as its events arrive, with a full sync every
// FullSyncPeriod. It returns when ctx is done (leadership lost) or the
// writer reports ErrNotLeader.
func (inv *Inventory) RunWriter(ctx context.Context) error {
	inv.mu.Lock()
	started := inv.started
	inv.mu.Unlock()
	if !started {
		return errors.New("inventory: Start must be called before RunWriter")
	}
	if err := inv.WaitForSync(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx) // also stops the ticker when we return early
	defer cancel()
	inv.queue.Add(fullSyncKey)
	go func() {
		t := time.NewTicker(inv.cfg.FullSyncPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				inv.queue.Add(fullSyncKey) // wake the worker so it sees ctx
				return
			case <-t.C:
				inv.queue.Add(fullSyncKey)
			}
		}
	}()
	for {
		key, quit := inv.queue.Get()
		if quit {
			return nil
		}
		if ctx.Err() != nil {
			// Leave the item for the next term (which starts with a full
			// sync anyway).
			inv.queue.Done(key)
			return nil
		}
		var err error
		if key == fullSyncKey {
			inv.ensureClusterProperties()
			inv.ensureServiceExports()
			err = inv.FullSync()
		} else {
			err = inv.syncKey(key)
		}
		switch {
		case errors.Is(err, ErrNotLeader):
			inv.queue.Done(key)
			return ErrNotLeader
		case err != nil:
			inv.log.Warn("inventory write failed; will retry", "kind", key.Kind, "name", key.Name, "err", err)
			inv.queue.AddRateLimited(key)
		default:
			inv.queue.Forget(key)
		}
		inv.queue.Done(key)
	}
}

// Pending returns the number of queued inventory items (for tests and
// readiness).
func (inv *Inventory) Pending() int { return inv.queue.Len() }
