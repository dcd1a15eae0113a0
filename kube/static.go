package kube

import (
	"errors"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamiclister"
	"k8s.io/client-go/tools/cache"
)

// StaticObjects are one cluster's Kubernetes objects, as a static
// inventory reads them: what the daemon's informers would cache.
type StaticObjects struct {
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
	// Services are replicated only when a ServiceExport of the same
	// namespace/name is among ServiceExports.
	Services       []*corev1.Service
	ServiceExports []*unstructured.Unstructured
	// Policies are the MultiClusterNetworkPolicies.
	Policies          []*unstructured.Unstructured
	ClusterProperties []*unstructured.Unstructured
	// Submariner's objects (submariner.io/v1): the Cluster objects of
	// every cluster (the broker syncs them; the one of this cluster's ID
	// describes it), ClusterGlobalEgressIPs, GlobalEgressIPs and
	// GlobalIngressIPs. All of them are read, whatever their namespace.
	SubmarinerClusters     []*unstructured.Unstructured
	ClusterGlobalEgressIPs []*unstructured.Unstructured
	GlobalEgressIPs        []*unstructured.Unstructured
	GlobalIngressIPs       []*unstructured.Unstructured
}

// NewStaticInventory is an Inventory of cluster clusterID over in-memory
// listers filled with objs, for reading, not writing: its Entries (or
// Desired) are the entries the cluster's daemon would write for these
// objects, made through the same kind table (kindSources), with the
// cluster's Submariner information, pod egress IPs and Service global IPs
// derived as the daemon's SubmarinerWatcher derives them. It starts no
// informer and has no writer (Start, RunWriter, FullSync and the
// *Changed methods are not for it). logger (nil: slog.Default()) gets the
// warnings the daemon would log.
func NewStaticInventory(clusterID string, objs StaticObjects, logger *slog.Logger) (*Inventory, error) {
	if clusterID == "" {
		return nil, errors.New("static inventory: cluster ID is required")
	}
	if logger == nil {
		logger = slog.Default()
	}
	m, err := newInventoryMetrics(nil)
	if err != nil {
		return nil, err
	}
	w := &SubmarinerWatcher{
		cfg:           SubmarinerConfig{ClusterID: clusterID}, // no namespace: every given object
		log:           logger.With("component", "submariner"),
		clusters:      staticLister(SubmarinerClusterResource, unstructuredObjects(objs.SubmarinerClusters)),
		clusterEgress: staticLister(ClusterGlobalEgressIPResource, unstructuredObjects(objs.ClusterGlobalEgressIPs)),
		egress:        staticLister(GlobalEgressIPResource, unstructuredObjects(objs.GlobalEgressIPs)),
		ingress:       staticLister(GlobalIngressIPResource, unstructuredObjects(objs.GlobalIngressIPs)),
	}
	inv := &Inventory{
		cfg: InventoryConfig{
			ClusterID: clusterID, PodFilter: podRelevant, Logger: logger,
			ClusterInfo: w.Info, PodEgressIPs: w.PodEgressIPsFunc(), ServiceGlobalIPs: w.ServiceGlobalIPsFunc(),
		},
		log: logger.With("component", "inventory"), metrics: m, lastWritten: Snapshot{},
		props:   staticLister(ClusterPropertyResource, unstructuredObjects(objs.ClusterProperties)),
		exports: staticLister(ServiceExportResource, unstructuredObjects(objs.ServiceExports)),
	}
	for _, kind := range InventoryKinds {
		src := kindSources[kind]
		if src.bind == nil {
			continue
		}
		idx, err := staticIndexer(src.static(&objs))
		if err != nil {
			return nil, err
		}
		src.bind(inv, idx)
	}
	return inv, nil
}

// staticIndexer is an indexer as an informer keeps one (namespace index),
// holding objs.
func staticIndexer(objs []runtime.Object) (cache.Indexer, error) {
	idx := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			return nil, err
		}
	}
	return idx, nil
}

// staticLister is the dynamic informer's lister of gvr over an in-memory
// indexer holding objs. (Objects of the given kind cannot fail to key.)
func staticLister(gvr schema.GroupVersionResource, objs []runtime.Object) cache.GenericLister {
	idx, _ := staticIndexer(objs)
	return dynamicLister(idx, gvr)
}

// dynamicLister is what dynamicinformer's Lister is over idx.
func dynamicLister(idx cache.Indexer, gvr schema.GroupVersionResource) cache.GenericLister {
	return dynamiclister.NewRuntimeObjectShim(dynamiclister.New(idx, gvr))
}

// unstructuredObjects copies objs without managedFields, as the informers'
// transform caches them.
func unstructuredObjects(objs []*unstructured.Unstructured) []runtime.Object {
	out := make([]runtime.Object, 0, len(objs))
	for _, u := range objs {
		c := u.DeepCopy()
		_, _ = stripManagedFields(c) // cannot fail on an object
		out = append(out, c)
	}
	return out
}

func staticNamespaces(o *StaticObjects) []runtime.Object {
	out := make([]runtime.Object, 0, len(o.Namespaces))
	for _, ns := range o.Namespaces {
		out = append(out, ns)
	}
	return out
}

// staticPods are the pods as the pod informer's transform (TransformPod)
// caches them.
func staticPods(o *StaticObjects) []runtime.Object {
	out := make([]runtime.Object, 0, len(o.Pods))
	for _, p := range o.Pods {
		out = append(out, stripPod(p))
	}
	return out
}

func staticPolicies(o *StaticObjects) []runtime.Object { return unstructuredObjects(o.Policies) }

func staticServices(o *StaticObjects) []runtime.Object {
	out := make([]runtime.Object, 0, len(o.Services))
	for _, s := range o.Services {
		out = append(out, s)
	}
	return out
}
