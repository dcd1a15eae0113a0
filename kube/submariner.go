package kube

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Submariner resources coastguard reads (submariner.io/v1).
var (
	SubmarinerClusterResource     = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "clusters"}
	ClusterGlobalEgressIPResource = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "clusterglobalegressips"}
	GlobalEgressIPResource        = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "globalegressips"}
	GlobalIngressIPResource       = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "globalingressips"}
)

// SubmarinerConfig configures a SubmarinerWatcher.
type SubmarinerConfig struct {
	ClusterID string
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// Namespace holds Submariner's Cluster and ClusterGlobalEgressIP
	// objects (default submariner-operator).
	Namespace string
	// Base is what is known without the watcher (discovered at start);
	// fields the watched objects provide replace it.
	Base   ClusterInfo
	Logger *slog.Logger
}

// SubmarinerWatcher watches Submariner's Cluster object for this cluster
// and the Globalnet egress IP allocations (ClusterGlobalEgressIP and
// GlobalEgressIP status), and turns them into ClusterInfo. Resources that
// are not served are simply not watched.
type SubmarinerWatcher struct {
	cfg      SubmarinerConfig
	log      *slog.Logger
	synced   []cache.InformerSynced
	startFns []func(<-chan struct{})

	clusters, clusterEgress, egress, ingress cache.GenericLister

	mu         sync.Mutex
	onChange   []func()
	onPods     []func(namespace string)
	onServices []func(namespace, name string)
}

// NewSubmarinerWatcher sets up informers for the served Submariner
// resources (not started).
func NewSubmarinerWatcher(cfg SubmarinerConfig) (*SubmarinerWatcher, error) {
	if cfg.ClusterID == "" || cfg.Dynamic == nil || cfg.Discovery == nil {
		return nil, fmt.Errorf("submariner watcher: cluster ID, dynamic client and discovery are required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "submariner-operator"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &SubmarinerWatcher{cfg: cfg, log: cfg.Logger.With("component", "submariner")}
	watch := func(gvr schema.GroupVersionResource, ns string) (cache.GenericLister, error) {
		perPod := gvr == GlobalEgressIPResource
		ok, err := ResourceServed(cfg.Discovery, gvr)
		if err != nil {
			return nil, fmt.Errorf("discovery of %s: %w", gvr, err)
		}
		if !ok {
			return nil, nil
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(cfg.Dynamic, gvr, ns, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil)
		if err := inf.Informer().SetTransform(stripManagedFields); err != nil {
			return nil, err
		}
		var h cache.ResourceEventHandlerFuncs
		if gvr == GlobalIngressIPResource {
			h = cache.ResourceEventHandlerFuncs{
				AddFunc:    w.serviceChanged,
				UpdateFunc: func(o, n any) { w.serviceChanged(o); w.serviceChanged(n) },
				DeleteFunc: w.serviceChanged,
			}
		} else {
			h = cache.ResourceEventHandlerFuncs{
				AddFunc:    func(o any) { w.changed(o, perPod) },
				UpdateFunc: func(o, n any) { w.changed(o, perPod); w.changed(n, false) },
				DeleteFunc: func(o any) { w.changed(o, perPod) },
			}
		}
		if _, err := inf.Informer().AddEventHandler(h); err != nil {
			return nil, err
		}
		w.synced = append(w.synced, inf.Informer().HasSynced)
		w.startFns = append(w.startFns, inf.Informer().Run)
		return inf.Lister(), nil
	}
	var err error
	if w.clusters, err = watch(SubmarinerClusterResource, cfg.Namespace); err != nil {
		return nil, err
	}
	if w.clusterEgress, err = watch(ClusterGlobalEgressIPResource, cfg.Namespace); err != nil {
		return nil, err
	}
	if w.egress, err = watch(GlobalEgressIPResource, metav1.NamespaceAll); err != nil {
		return nil, err
	}
	if w.ingress, err = watch(GlobalIngressIPResource, metav1.NamespaceAll); err != nil {
		return nil, err
	}
	return w, nil
}

// OnServiceGlobalIPChange registers fn to be called with the Service a
// changed GlobalIngressIP names (its global ingress IPs may have changed).
func (w *SubmarinerWatcher) OnServiceGlobalIPChange(fn func(namespace, name string)) {
	w.mu.Lock()
	w.onServices = append(w.onServices, fn)
	w.mu.Unlock()
}

func (w *SubmarinerWatcher) serviceChanged(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "serviceRef", "name")
	if name == "" {
		return // not a ClusterIP Service's (headless pods: not replicated)
	}
	w.mu.Lock()
	fns := slices.Clone(w.onServices)
	w.mu.Unlock()
	for _, fn := range fns {
		fn(u.GetNamespace(), name)
	}
}

// ServiceGlobalIPs returns the global ingress IPs Globalnet allocated to
// the ClusterIP Service namespace/name (ServiceGlobalIPsFrom).
func (w *SubmarinerWatcher) ServiceGlobalIPs(ns, name string) ([]string, error) {
	return ServiceGlobalIPsFrom(list(w.ingress, ns), ns, name)
}

// ServiceGlobalIPsFunc returns ServiceGlobalIPs for InventoryConfig, or nil
// when w is nil or GlobalIngressIP is not served.
func (w *SubmarinerWatcher) ServiceGlobalIPsFunc() func(string, string) ([]string, error) {
	if w == nil || w.ingress == nil {
		return nil
	}
	return w.ServiceGlobalIPs
}

// OnChange registers fn to be called (from an informer goroutine) after
// any watched object changes.
func (w *SubmarinerWatcher) OnChange(fn func()) {
	w.mu.Lock()
	w.onChange = append(w.onChange, fn)
	w.mu.Unlock()
}

// OnPodEgressChange registers fn to be called with the namespace of a
// changed GlobalEgressIP (its pods' egress IPs may have changed).
func (w *SubmarinerWatcher) OnPodEgressChange(fn func(namespace string)) {
	w.mu.Lock()
	w.onPods = append(w.onPods, fn)
	w.mu.Unlock()
}

func (w *SubmarinerWatcher) changed(obj any, perPod bool) {
	w.mu.Lock()
	fns, podFns := slices.Clone(w.onChange), slices.Clone(w.onPods)
	w.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	if !perPod {
		return
	}
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		for _, fn := range podFns {
			fn(u.GetNamespace())
		}
	}
}

// Start runs the informers until stop is closed.
func (w *SubmarinerWatcher) Start(stop <-chan struct{}) {
	for _, run := range w.startFns {
		go run(stop)
	}
}

// HasSynced reports whether every watched resource has synced.
func (w *SubmarinerWatcher) HasSynced() bool {
	for _, s := range w.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Watching lists the resources being watched (those served at start).
func (w *SubmarinerWatcher) Watching() []string {
	var out []string
	for _, x := range []struct {
		l   cache.GenericLister
		gvr schema.GroupVersionResource
	}{{w.clusters, SubmarinerClusterResource}, {w.clusterEgress, ClusterGlobalEgressIPResource}, {w.egress, GlobalEgressIPResource}, {w.ingress, GlobalIngressIPResource}} {
		if x.l != nil {
			out = append(out, x.gvr.Resource)
		}
	}
	return out
}

func list(l cache.GenericLister, ns string) []*unstructured.Unstructured {
	if l == nil {
		return nil
	}
	var objs []any
	var err error
	if ns == "" {
		objs, err = toAny(l.List(labels.Everything()))
	} else {
		objs, err = toAny(l.ByNamespace(ns).List(labels.Everything()))
	}
	if err != nil {
		return nil
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetNamespace() != out[j].GetNamespace() {
			return out[i].GetNamespace() < out[j].GetNamespace()
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}

func toAny[T any](in []T, err error) ([]any, error) {
	out := make([]any, len(in))
	for i := range in {
		out[i] = in[i]
	}
	return out, err
}

// Info returns the cluster's network description: the base, with CIDRs
// from this cluster's Submariner Cluster object and the Globalnet egress
// IPs Submariner allocated. Invalid entries are skipped and logged.
func (w *SubmarinerWatcher) Info() ClusterInfo {
	info, errs := submarinerInfo(w.cfg.ClusterID, w.cfg.Base,
		list(w.clusters, w.cfg.Namespace), list(w.clusterEgress, w.cfg.Namespace), list(w.egress, ""))
	for _, err := range errs {
		w.log.Warn("ignoring invalid allocated IP", "err", err)
	}
	return info
}

// submarinerInfo is what Submariner's objects say about cluster clusterID
// (the converter behind SubmarinerWatcher.Info, and `coastguardd render`):
// base, with the CIDRs of clusterID's Cluster object (the last one wins)
// and the egress IPs allocated by its ClusterGlobalEgressIPs and by the
// GlobalEgressIPs without a podSelector (per namespace; those with one are
// per pod, see podEgressIPsFrom). Invalid allocated IPs are skipped and
// returned as errors.
func submarinerInfo(clusterID string, base ClusterInfo, clusters, clusterEgress, egress []*unstructured.Unstructured) (ClusterInfo, []error) {
	info := base
	var errs []error
	allocated := func(u *unstructured.Unstructured) []string {
		ips, bad := AllocatedIPs(u)
		for _, s := range bad {
			errs = append(errs, fmt.Errorf("%s %s: status.allocatedIPs: %q is not an IP address", u.GetKind(), objectName(u), s))
		}
		return ips
	}
	for _, u := range clusters {
		c := SubmarinerClusterFrom(u)
		if c.ClusterID != clusterID {
			continue
		}
		info.PodCIDRs, info.ServiceCIDRs, info.GlobalCIDRs = c.PodCIDRs, c.ServiceCIDRs, c.GlobalCIDRs
		info.Globalnet = len(c.GlobalCIDRs) > 0
	}
	var cluster []string
	for _, u := range clusterEgress {
		cluster = append(cluster, allocated(u)...)
	}
	info.ClusterEgressIPs = sortedUnique(cluster)
	nsIPs := map[string][]string{}
	for _, u := range egress {
		g, err := GlobalEgressIPFrom(u)
		if err != nil || g.Selector != nil {
			continue // per pod: see podEgressIPsFrom
		}
		nsIPs[u.GetNamespace()] = append(nsIPs[u.GetNamespace()], allocated(u)...)
	}
	info.NamespaceEgressIPs = nil
	for ns, ips := range nsIPs {
		if ips = sortedUnique(ips); len(ips) > 0 {
			if info.NamespaceEgressIPs == nil {
				info.NamespaceEgressIPs = map[string][]string{}
			}
			info.NamespaceEgressIPs[ns] = ips
		}
	}
	return info, errs
}

func objectName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// Clusters returns every Submariner Cluster object in the namespace: this
// cluster's own and the other clusters' (Submariner syncs them from the
// broker). Sorted by cluster ID; objects with the same cluster ID keep the
// order of their names.
func (w *SubmarinerWatcher) Clusters() []SubmarinerCluster {
	var out []SubmarinerCluster
	for _, u := range list(w.clusters, w.cfg.Namespace) {
		out = append(out, SubmarinerClusterFrom(u))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ClusterID < out[j].ClusterID })
	return out
}

// PodEgressIPs returns the egress IPs of the GlobalEgressIPs whose
// spec.podSelector selects a pod with these labels in namespace ns.
func (w *SubmarinerWatcher) PodEgressIPs(ns string, podLabels map[string]string) []string {
	var gs []GlobalEgressIP
	for _, u := range list(w.egress, ns) {
		g, err := GlobalEgressIPFrom(u)
		if err != nil {
			w.log.Warn("GlobalEgressIP ignored", "err", err)
			continue
		}
		gs = append(gs, g)
	}
	return podEgressIPsFrom(gs, ns, podLabels)
}

// podEgressIPsFrom returns the egress IPs (sorted, unique) of the
// GlobalEgressIPs of namespace ns whose spec.podSelector selects a pod with
// these labels (the converter behind PodEgressIPs, and `coastguardd
// render`).
func podEgressIPsFrom(egress []GlobalEgressIP, ns string, podLabels map[string]string) []string {
	var out []string
	for _, g := range egress {
		if g.Namespace == ns && g.Selector != nil && g.Selector.Matches(labels.Set(podLabels)) {
			out = append(out, g.IPs...)
		}
	}
	return sortedUnique(out)
}

// PodEgressIPsFunc returns PodEgressIPs for InventoryConfig, or nil when
// w is nil or GlobalEgressIP is not served.
func (w *SubmarinerWatcher) PodEgressIPsFunc() func(string, map[string]string) []string {
	if w == nil || w.egress == nil {
		return nil
	}
	return w.PodEgressIPs
}

// AllocatedIPs reads status.allocatedIPs of a ClusterGlobalEgressIP or
// GlobalEgressIP: the valid IP addresses, and the invalid entries.
func AllocatedIPs(u *unstructured.Unstructured) (ips, invalid []string) {
	raw, _, _ := unstructured.NestedStringSlice(u.Object, "status", "allocatedIPs")
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil {
			invalid = append(invalid, s)
			continue
		}
		ips = append(ips, a.Unmap().String())
	}
	return ips, invalid
}

// GlobalEgressIP is what coastguard reads of a GlobalEgressIP.
type GlobalEgressIP struct {
	Namespace, Name string
	// Selector is spec.podSelector; nil means the whole namespace.
	Selector labels.Selector
	IPs      []string
}

// GlobalEgressIPFrom reads a GlobalEgressIP; an invalid podSelector is an
// error (the object is then ignored rather than widened to the namespace).
func GlobalEgressIPFrom(u *unstructured.Unstructured) (GlobalEgressIP, error) {
	g := GlobalEgressIP{Namespace: u.GetNamespace(), Name: u.GetName()}
	g.IPs, _ = AllocatedIPs(u)
	m, has, err := unstructured.NestedMap(u.Object, "spec", "podSelector")
	if err != nil {
		return g, fmt.Errorf("GlobalEgressIP %s/%s: spec.podSelector: %w", g.Namespace, g.Name, err)
	}
	if !has {
		return g, nil
	}
	var ls metav1.LabelSelector
	if err := runtimeFromUnstructured(m, &ls); err != nil {
		return g, fmt.Errorf("GlobalEgressIP %s/%s: spec.podSelector: %w", g.Namespace, g.Name, err)
	}
	if g.Selector, err = metav1.LabelSelectorAsSelector(&ls); err != nil {
		return g, fmt.Errorf("GlobalEgressIP %s/%s: spec.podSelector: %w", g.Namespace, g.Name, err)
	}
	return g, nil
}

func sortedUnique(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// SubmarinerCluster is what coastguard reads of a Submariner Cluster object.
type SubmarinerCluster struct {
	ClusterID    string
	PodCIDRs     []string
	ServiceCIDRs []string
	GlobalCIDRs  []string
}

// SubmarinerClusterFrom reads spec.cluster_id (else metadata.name),
// spec.cluster_cidr, spec.service_cidr and spec.global_cidr.
func SubmarinerClusterFrom(u *unstructured.Unstructured) SubmarinerCluster {
	get := func(f string) []string {
		v, _, _ := unstructured.NestedStringSlice(u.Object, "spec", f)
		return v
	}
	id, _, _ := unstructured.NestedString(u.Object, "spec", "cluster_id")
	if id == "" {
		id = u.GetName()
	}
	return SubmarinerCluster{ClusterID: id, PodCIDRs: get("cluster_cidr"), ServiceCIDRs: get("service_cidr"), GlobalCIDRs: get("global_cidr")}
}

func runtimeFromUnstructured(m map[string]any, out any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, out)
}

// KnownClusters lists the cluster IDs of every Submariner Cluster object
// (the broker syncs one per cluster of the set). IDs that are not valid
// DNS-1123 labels are skipped and logged.
func (w *SubmarinerWatcher) KnownClusters() []string {
	if w == nil {
		return nil
	}
	var out []string
	for _, u := range list(w.clusters, w.cfg.Namespace) {
		id := SubmarinerClusterFrom(u).ClusterID
		if msgs := validation.IsDNS1123Label(id); len(msgs) > 0 {
			w.log.Debug("Submariner Cluster object has an invalid cluster ID; ignored", "object", u.GetName(), "cluster_id", id, "err", strings.Join(msgs, "; "))
			continue
		}
		out = append(out, id)
	}
	return out
}

// SubmarinerNetworks turns Submariner Cluster objects into trusted network
// knowledge for pod-IP ownership (enforce.CheckRemoteAddr). Invalid CIDRs
// are skipped and returned as errors; several objects of one cluster ID
// are merged.
func SubmarinerNetworks(cs []SubmarinerCluster) (enforce.Networks, []error) {
	var parts []enforce.Networks
	var errs []error
	for _, c := range cs {
		var n enforce.ClusterNetworks
		var e1, e2, e3 []error
		n.PodCIDRs, e1 = enforce.ParseCIDRs(c.PodCIDRs)
		n.ServiceCIDRs, e2 = enforce.ParseCIDRs(c.ServiceCIDRs)
		n.GlobalCIDRs, e3 = enforce.ParseCIDRs(c.GlobalCIDRs)
		for _, e := range append(append(e1, e2...), e3...) {
			errs = append(errs, fmt.Errorf("parsing Submariner Cluster %s: %w", c.ClusterID, e))
		}
		n.Sources = []string{"submariner"}
		parts = append(parts, enforce.Networks{c.ClusterID: n})
	}
	return enforce.MergeNetworks(parts...), errs
}
