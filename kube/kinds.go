package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// kindSource is the Kubernetes source of one replicated kind: the informer
// that watches it and the converter from the cached object to the kind's
// crdt value (the converters are the exported *ToValue functions, which
// `coastguardd render` uses too).
type kindSource struct {
	// watch sets up the kind's informer on the inventory's factories; nil
	// when the kind has no informer of its own (the cluster entry,
	// rewritten on ClusterProperty and Submariner changes).
	watch func(inv *Inventory) (cache.SharedIndexInformer, error)
	// bind keeps the kind's lister over an indexer: the informer's, or a
	// static inventory's in-memory one.
	bind func(inv *Inventory, idx cache.Indexer)
	// static is the kind's objects among a static inventory's (static.go).
	static func(o *StaticObjects) []runtime.Object
	// names lists the entry names of every object in the cache.
	names func(inv *Inventory) ([]string, error)
	// value is the encoded value of the entry called name, from the cache;
	// present=false means the object is gone (or filtered out) and its
	// entry should be a tombstone.
	value func(inv *Inventory, name string) (value []byte, present bool, err error)
}

// kindSources is the kube layer of the kind registry: how each kind crdt
// declares is read from Kubernetes. Kinds that other components write are
// in notSourced instead. TestKindSourcesComplete checks both against
// crdt.Kinds().
var kindSources = map[crdt.Kind]kindSource{
	crdt.KindCluster:   {names: func(*Inventory) ([]string, error) { return []string{""}, nil }, value: clusterEntry},
	crdt.KindNamespace: {watch: watchNamespaces, bind: bindNamespaces, static: staticNamespaces, names: namespaceNames, value: namespaceEntry},
	crdt.KindPod:       {watch: watchPods, bind: bindPods, static: staticPods, names: podNames, value: podEntry},
	crdt.KindPolicy:    {watch: watchPolicies, bind: bindPolicies, static: staticPolicies, names: policyNames, value: policyEntry},
	crdt.KindService:   {watch: watchServices, bind: bindServices, static: staticServices, names: serviceNames, value: serviceEntry},
}

// notSourced lists the kinds no Kubernetes object is the source of, and
// who writes them.
var notSourced = map[crdt.Kind]string{
	crdt.KindReport: "written by the enforcing daemon (daemon/reports.go)",
}

// InventoryKinds are the kinds the inventory writes for this cluster, in
// crdt order. Other kinds (reports) belong to other writers and are never
// touched by Diff.
var InventoryKinds = sourcedKinds()

func sourcedKinds() []crdt.Kind {
	var out []crdt.Kind
	for _, s := range crdt.Kinds() {
		if _, ok := kindSources[s.Kind]; ok {
			out = append(out, s.Kind)
		}
	}
	return out
}

func encodeEntry(v any) ([]byte, bool, error) {
	b, err := crdt.EncodeValue(v)
	return b, err == nil, err
}

func clusterEntry(inv *Inventory, _ string) ([]byte, bool, error) {
	v, errs := inv.clusterValue()
	for _, e := range errs {
		inv.log.Warn("cluster label skipped", "err", e)
	}
	return encodeEntry(&v)
}

func watchNamespaces(inv *Inventory) (cache.SharedIndexInformer, error) {
	return inv.factory.Core().V1().Namespaces().Informer(), nil
}

func bindNamespaces(inv *Inventory, idx cache.Indexer) {
	inv.namespaces = corelisters.NewNamespaceLister(idx)
}

func namespaceNames(inv *Inventory) ([]string, error) {
	nss, err := inv.namespaces.List(labels.Everything())
	out := make([]string, 0, len(nss))
	for _, ns := range nss {
		out = append(out, ns.Name)
	}
	return out, err
}

func namespaceEntry(inv *Inventory, name string) ([]byte, bool, error) {
	ns, err := inv.namespaces.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v := namespaceToValue(ns)
	return encodeEntry(&v)
}

func watchPods(inv *Inventory) (cache.SharedIndexInformer, error) {
	inf := inv.factory.Core().V1().Pods()
	if err := inf.Informer().SetTransform(TransformPod); err != nil {
		return nil, fmt.Errorf("pod transform: %w", err)
	}
	return inf.Informer(), nil
}

func bindPods(inv *Inventory, idx cache.Indexer) { inv.pods = corelisters.NewPodLister(idx) }

func podNames(inv *Inventory) ([]string, error) {
	pods, err := inv.pods.List(labels.Everything())
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, PodName(p.Namespace, p.Name))
	}
	return out, err
}

func podEntry(inv *Inventory, name string) ([]byte, bool, error) {
	ns, n, err := cache.SplitMetaNamespaceKey(name)
	if err != nil {
		return nil, false, err
	}
	p, err := inv.pods.Pods(ns).Get(n)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, present, err := podEntryValue(p, inv.cfg.PodFilter, inv.cfg.PodEgressIPs)
	if err != nil || !present {
		return nil, false, err
	}
	return encodeEntry(&v)
}

func watchPolicies(inv *Inventory) (cache.SharedIndexInformer, error) {
	inf := inv.dynFactory.ForResource(MCNPResource)
	if err := inf.Informer().SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("MCNP transform: %w", err)
	}
	return inf.Informer(), nil
}

func bindPolicies(inv *Inventory, idx cache.Indexer) { inv.mcnps = dynamicLister(idx, MCNPResource) }

func policyNames(inv *Inventory) ([]string, error) {
	pols, err := inv.mcnps.List(labels.Everything())
	out := make([]string, 0, len(pols))
	for _, o := range pols {
		if k, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			out = append(out, k)
		}
	}
	return out, err
}

func policyEntry(inv *Inventory, name string) ([]byte, bool, error) {
	obj, err := inv.mcnps.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, false, fmt.Errorf("policy %s: unexpected cache type %T", name, obj)
	}
	v, err := policyToValue(u)
	if err == nil {
		var b []byte
		if b, err = crdt.EncodeValue(&v); err == nil {
			return b, true, nil
		}
	}
	if inv.cfg.Recorder != nil {
		inv.cfg.Recorder.Eventf(u, corev1.EventTypeWarning, "InvalidPolicy", "not replicated to the cluster set: %v", err)
	}
	return nil, false, err
}
