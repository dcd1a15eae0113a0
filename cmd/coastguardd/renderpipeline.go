package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// render's ingestion is the daemon's: the objects of every cluster
// directory go through the kube converters the inventory uses into the
// replicated entries that cluster would write, those entries into one
// crdt.State, and the state through the daemon's Mirror into the
// enforce.Inventory both translate from.

// located is an object read from a file, with where it was read (for
// errors found when it is converted).
type located[T any] struct {
	where string
	obj   T
}

// clusterObjects is what one cluster directory holds, as Kubernetes
// objects (already checked for what render reports with a file location).
type clusterObjects struct {
	namespaces []*corev1.Namespace
	pods       []located[*corev1.Pod]
	policies   []located[*unstructured.Unstructured]
	props      []kube.ClusterProperty
	// Submariner objects: Cluster (of every cluster: the broker syncs
	// them), ClusterGlobalEgressIP and GlobalEgressIP.
	subClusters   []*unstructured.Unstructured
	clusterEgress []*unstructured.Unstructured
	egress        []*unstructured.Unstructured
	egressIPs     []kube.GlobalEgressIP
	hasOwn        bool // the cluster's own Submariner Cluster object was read
}

// known lists every Submariner Cluster object of the directory: the
// trusted CIDRs this cluster checks remote pod IPs against.
func (o *clusterObjects) known() []kube.SubmarinerCluster {
	out := make([]kube.SubmarinerCluster, 0, len(o.subClusters))
	for _, u := range o.subClusters {
		out = append(out, kube.SubmarinerClusterFrom(u))
	}
	return out
}

// entrySetter encodes one entry's value into the cluster's snapshot.
type entrySetter func(kind crdt.Kind, name string, v any) error

// renderEntries is render's layer of the kind registry: for every kind the
// daemon's inventory writes (kube.InventoryKinds), how render makes that
// kind's entries from a cluster's objects, with the inventory's own
// converters. TestRenderKindsComplete checks it against kube.
var renderEntries = map[crdt.Kind]func(id string, o *clusterObjects, set entrySetter) []error{
	crdt.KindCluster:   clusterEntry,
	crdt.KindNamespace: namespaceEntries,
	crdt.KindPod:       podEntries,
	crdt.KindPolicy:    policyEntries,
}

// clusterEntries converts one cluster's objects into the entries its
// daemon's inventory would write.
func clusterEntries(id string, o *clusterObjects) (kube.Snapshot, []error) {
	snap := kube.Snapshot{}
	var errs []error
	set := func(kind crdt.Kind, name string, v any) error {
		b, err := kube.EncodeCanonical(v)
		if err == nil {
			snap.Set(kind, name, b)
		}
		return err
	}
	for _, kind := range kube.InventoryKinds {
		entries, ok := renderEntries[kind]
		if !ok {
			errs = append(errs, fmt.Errorf("render cannot make %v entries", kind))
			continue
		}
		errs = append(errs, entries(id, o, set)...)
	}
	return snap, errs
}

// clusterEntry is the cluster's own entry: its ClusterProperty labels and
// what its Submariner objects say (kube.SubmarinerInfo, as the watcher).
func clusterEntry(id string, o *clusterObjects, set entrySetter) []error {
	info, errs := kube.SubmarinerInfo(id, kube.ClusterInfo{}, o.subClusters, o.clusterEgress, o.egress)
	cv, cerrs := kube.ClusterValueFrom(id, o.props, info)
	errs = append(errs, cerrs...)
	if err := set(crdt.KindCluster, "", &cv); err != nil {
		errs = append(errs, fmt.Errorf("cluster %s: %w", id, err))
	}
	return errs
}

func namespaceEntries(_ string, o *clusterObjects, set entrySetter) []error {
	var errs []error
	for _, ns := range o.namespaces {
		v := kube.NamespaceToValue(ns)
		if err := set(crdt.KindNamespace, ns.Name, &v); err != nil {
			errs = append(errs, fmt.Errorf("namespace %s: %w", ns.Name, err))
		}
	}
	return errs
}

// podEntries converts pods as the inventory does: its pod filter, and the
// Globalnet egress IPs of the cluster's per-pod GlobalEgressIPs.
func podEntries(_ string, o *clusterObjects, set entrySetter) []error {
	var errs []error
	egress := func(ns string, lbls map[string]string) []string { return kube.PodEgressIPsFrom(o.egressIPs, ns, lbls) }
	for _, p := range o.pods {
		v, present, err := kube.PodEntryValue(p.obj, kube.PodRelevant, egress)
		if err == nil && present {
			err = set(crdt.KindPod, kube.PodName(p.obj.Namespace, p.obj.Name), &v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: Pod %s: %w", p.where, objName(p.obj.Namespace, p.obj.Name), err))
		}
	}
	return errs
}

func policyEntries(_ string, o *clusterObjects, set entrySetter) []error {
	var errs []error
	for _, u := range o.policies {
		v, err := kube.PolicyToValue(u.obj)
		if err == nil {
			err = set(crdt.KindPolicy, kube.PodName(u.obj.GetNamespace(), u.obj.GetName()), &v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: MultiClusterNetworkPolicy %s: %w", u.where, objName(u.obj.GetNamespace(), u.obj.GetName()), err))
		}
	}
	return errs
}

// replicate writes each cluster's entries as that cluster (epoch 1) and
// merges them into one observer state, as gossip would.
func replicate(entries map[string]kube.Snapshot) (*crdt.State, error) {
	st := crdt.NewState("")
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		w := crdt.NewState(id)
		if err := w.SetEpoch(1); err != nil {
			return nil, err
		}
		for _, spec := range crdt.Kinds() {
			names := slices.Sorted(maps.Keys(entries[id][spec.Kind]))
			for _, n := range names {
				d, _, err := w.Write(spec.Kind, n, entries[id][spec.Kind][n], false, 0)
				if err != nil {
					return nil, fmt.Errorf("cluster %s: %v %s: %w", id, spec.Kind, n, err)
				}
				if _, err := st.Apply(d); err != nil {
					return nil, fmt.Errorf("cluster %s: %v %s: %w", id, spec.Kind, n, err)
				}
			}
		}
	}
	return st, nil
}

// mirrorOf feeds a state through the daemon's Mirror; any entry it cannot
// decode is an error.
func mirrorOf(st *crdt.State) (*enforce.Inventory, error) {
	m := daemon.NewMirror("")
	if errs := m.Load(st); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m.Inventory(), nil
}

// ingest turns every cluster's objects into the enforce.Inventory the
// daemons would converge on.
func ingest(clusters []string, objs map[string]*clusterObjects) (*enforce.Inventory, error) {
	entries := map[string]kube.Snapshot{}
	var errs []error
	for _, id := range clusters {
		snap, e := clusterEntries(id, objs[id])
		errs = append(errs, e...)
		entries[id] = snap
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	st, err := replicate(entries)
	if err != nil {
		return nil, err
	}
	return mirrorOf(st)
}
