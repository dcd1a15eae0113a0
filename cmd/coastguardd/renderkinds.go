package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	mcsv1alpha1 "github.com/coastguard-mcnp/coastguard/api/mcs/v1alpha1"
	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// clusterObjects is what one cluster directory holds, as Kubernetes
// objects (already checked for what render reports with a file location):
// the objects a static inventory of the cluster reads.
type clusterObjects struct {
	objs kube.StaticObjects
	// where each object of an entry was read (for errors found when it
	// is converted).
	where  map[kube.InventoryKey]string
	hasOwn bool // the cluster's own Submariner Cluster object was read
}

// located records where the object of an entry was read.
func (o *clusterObjects) located(kind crdt.Kind, ns, name, where string) {
	if o.where == nil {
		o.where = map[kube.InventoryKey]string{}
	}
	o.where[kube.InventoryKey{Kind: kind, Name: kube.PodName(ns, name)}] = where
}

// known lists every Submariner Cluster object of the directory: the
// trusted CIDRs this cluster checks remote pod IPs against.
func (o *clusterObjects) known() []kube.SubmarinerCluster {
	out := make([]kube.SubmarinerCluster, 0, len(o.objs.SubmarinerClusters))
	for _, u := range o.objs.SubmarinerClusters {
		out = append(out, kube.SubmarinerClusterFrom(u))
	}
	return out
}

// renderReader reads one Kubernetes kind from render's input files into
// the cluster's objects, with the checks that need a file location.
type renderReader struct {
	apiVersion string
	// foreign: another apiVersion of this kind is someone else's kind
	// (warned about and ignored) rather than an unsupported version of
	// ours (an error).
	foreign bool
	read    func(l *renderLoader, cluster, where string, raw []byte)
}

// renderReaders are the Kubernetes kinds render reads, by kind.
var renderReaders = map[string]renderReader{
	"Namespace":                         {apiVersion: "v1", read: (*renderLoader).readNamespace},
	"Pod":                               {apiVersion: "v1", read: (*renderLoader).readPod},
	"NetworkPolicy":                     {apiVersion: "networking.k8s.io/v1", read: (*renderLoader).readNetworkPolicy},
	apiv1.KindMultiClusterNetworkPolicy: {apiVersion: apiv1.SchemeGroupVersion.String(), read: (*renderLoader).readMCNP},
	mcsv1alpha1.Kind:                    {apiVersion: mcsv1alpha1.APIVersion, read: (*renderLoader).readClusterProperty},
	"Cluster":                           {apiVersion: "submariner.io/v1", foreign: true, read: submarinerReader("Cluster")},
	"ClusterGlobalEgressIP":             {apiVersion: "submariner.io/v1", foreign: true, read: submarinerReader("ClusterGlobalEgressIP")},
	"GlobalEgressIP":                    {apiVersion: "submariner.io/v1", foreign: true, read: submarinerReader("GlobalEgressIP")},
	"GlobalIngressIP":                   {apiVersion: "submariner.io/v1", foreign: true, read: submarinerReader("GlobalIngressIP")},
	"Service":                           {apiVersion: "v1", read: (*renderLoader).readService},
	"ServiceExport":                     {apiVersion: kube.ServiceExportResource.GroupVersion().String(), read: (*renderLoader).readServiceExport},
}

// readService reads a Service (replicated only when exported).
func (l *renderLoader) readService(cluster, where string, raw []byte) {
	var s corev1.Service
	if err := json.Unmarshal(raw, &s); err != nil {
		l.fail(where, "Service", err)
		return
	}
	if s.Namespace == "" {
		s.Namespace = metav1.NamespaceDefault
	}
	what := "Service " + objName(s.Namespace, s.Name)
	if s.Name == "" {
		l.fail(where, what, errors.New("metadata.name: Required value"))
		return
	}
	if !l.validLabels(where, what, s.Spec.Selector) || !l.unique(cluster, where, "Service", s.Namespace, s.Name) {
		return
	}
	o := l.objs[cluster]
	o.objs.Services = append(o.objs.Services, &s)
	o.located(crdt.KindService, s.Namespace, s.Name, where)
}

// readServiceExport reads a ServiceExport: it marks the Service of the
// same namespace/name as exported.
func (l *renderLoader) readServiceExport(cluster, where string, raw []byte) {
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(raw); err != nil {
		l.fail(where, "ServiceExport", err)
		return
	}
	if u.GetNamespace() == "" {
		u.SetNamespace(metav1.NamespaceDefault)
	}
	what := "ServiceExport " + objName(u.GetNamespace(), u.GetName())
	if u.GetName() == "" {
		l.fail(where, what, errors.New("metadata.name: Required value"))
		return
	}
	if !l.unique(cluster, where, "ServiceExport", u.GetNamespace(), u.GetName()) {
		return
	}
	l.objs[cluster].objs.ServiceExports = append(l.objs[cluster].objs.ServiceExports, &u)
}

func submarinerReader(kind string) func(*renderLoader, string, string, []byte) {
	return func(l *renderLoader, cluster, where string, raw []byte) { l.loadSubmariner(cluster, where, kind, raw) }
}

// readNamespace reads a Namespace.
func (l *renderLoader) readNamespace(cluster, where string, raw []byte) {
	var ns corev1.Namespace
	if err := json.Unmarshal(raw, &ns); err != nil {
		l.fail(where, "Namespace", err)
		return
	}
	if msgs := validation.IsDNS1123Label(ns.Name); len(msgs) > 0 {
		l.fail(where, "Namespace "+ns.Name, fmt.Errorf("metadata.name: %s", strings.Join(msgs, "; ")))
		return
	}
	if !l.validLabels(where, "Namespace "+ns.Name, ns.Labels) || !l.unique(cluster, where, "Namespace", "", ns.Name) {
		return
	}
	l.objs[cluster].objs.Namespaces = append(l.objs[cluster].objs.Namespaces, &ns)
}

// readPod reads a Pod (converted later, with the Globalnet egress IPs of its cluster).
func (l *renderLoader) readPod(cluster, where string, raw []byte) {
	var p corev1.Pod
	if err := json.Unmarshal(raw, &p); err != nil {
		l.fail(where, "Pod", err)
		return
	}
	if p.Namespace == "" {
		p.Namespace = metav1.NamespaceDefault
	}
	what := "Pod " + objName(p.Namespace, p.Name)
	if p.Name == "" {
		l.fail(where, what, errors.New("metadata.name: Required value"))
		return
	}
	if !l.validLabels(where, what, p.Labels) || !l.unique(cluster, where, "Pod", p.Namespace, p.Name) {
		return
	}
	o := l.objs[cluster]
	o.objs.Pods = append(o.objs.Pods, &p)
	o.located(crdt.KindPod, p.Namespace, p.Name, where)
}

// readNetworkPolicy reads a user-authored NetworkPolicy: it coexists with the generated ones
// (policies are additive) and is not re-emitted; only duplicates are errors.
func (l *renderLoader) readNetworkPolicy(cluster, where string, raw []byte) {
	var np networkingv1.NetworkPolicy
	if err := json.Unmarshal(raw, &np); err != nil {
		l.fail(where, "NetworkPolicy", err)
		return
	}
	if np.Namespace == "" {
		np.Namespace = metav1.NamespaceDefault
	}
	// User-authored: coexists with the generated ones (policies are
	// additive); not re-emitted.
	l.unique(cluster, where, "NetworkPolicy", np.Namespace, np.Name)
}

// readMCNP reads a MultiClusterNetworkPolicy, strictly typed and validated.
func (l *renderLoader) readMCNP(cluster, where string, raw []byte) {
	var m apiv1.MultiClusterNetworkPolicy
	if err := strictUnmarshal(raw, &m); err != nil {
		l.fail(where, "MultiClusterNetworkPolicy", err)
		return
	}
	if m.Namespace == "" {
		m.Namespace = metav1.NamespaceDefault
	}
	what := "MultiClusterNetworkPolicy " + objName(m.Namespace, m.Name)
	if err := apiv1.Validate(&m); err != nil {
		l.fail(where, what, err)
		return
	}
	if !l.unique(cluster, where, apiv1.KindMultiClusterNetworkPolicy, m.Namespace, m.Name) {
		return
	}
	// Translatable? (The daemon replicates such a policy and reports
	// the error in its status; render refuses it.)
	if err := enforce.NewInventory().SetPolicy(enforce.Policy{
		Origin: cluster, Namespace: m.Namespace, Name: m.Name, Spec: m.Spec,
	}); err != nil {
		l.fail(where, what, err)
		return
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(raw); err != nil {
		l.fail(where, what, err)
		return
	}
	u.SetNamespace(m.Namespace)
	o := l.objs[cluster]
	o.objs.Policies = append(o.objs.Policies, &u)
	o.located(crdt.KindPolicy, m.Namespace, m.Name, where)
}

// readClusterProperty reads a ClusterProperty (a cluster label).
func (l *renderLoader) readClusterProperty(cluster, where string, raw []byte) {
	var cp mcsv1alpha1.ClusterProperty
	if err := strictUnmarshal(raw, &cp); err != nil {
		l.fail(where, "ClusterProperty", err)
		return
	}
	what := "ClusterProperty " + cp.Name
	if msgs := validation.IsQualifiedName(cp.Name); len(msgs) > 0 {
		l.fail(where, what, fmt.Errorf("metadata.name must be usable as a label key: %s", strings.Join(msgs, "; ")))
		return
	}
	if msgs := validation.IsValidLabelValue(cp.Spec.Value); len(msgs) > 0 {
		l.fail(where, what, fmt.Errorf("spec.value must be usable as a label value: %s", strings.Join(msgs, "; ")))
		return
	}
	if cp.Name == mcsv1alpha1.ClusterIDLabel && cp.Spec.Value != cluster {
		l.fail(where, what, fmt.Errorf("spec.value %q contradicts the cluster ID %q given by the directory name", cp.Spec.Value, cluster))
		return
	}
	if !l.unique(cluster, where, mcsv1alpha1.Kind, "", cp.Name) {
		return
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(raw); err != nil {
		l.fail(where, what, err)
		return
	}
	l.objs[cluster].objs.ClusterProperties = append(l.objs[cluster].objs.ClusterProperties, &u)
}

// loadSubmariner reads a Submariner object the way the daemon's watcher
// does (kube.SubmarinerClusterFrom, kube.AllocatedIPs,
// kube.GlobalEgressIPFrom), so render and the daemon agree.
// loadSubmarinerCluster takes a Submariner Cluster object of cluster's
// files: every one is what this cluster knows of that cluster's CIDRs
// (broker-synced); its own one also describes it.
func (l *renderLoader) loadSubmarinerCluster(cluster, where, what string, u *unstructured.Unstructured) {
	sub := l.objs[cluster]
	c := kube.SubmarinerClusterFrom(u)
	for _, cidrs := range [][]string{c.PodCIDRs, c.ServiceCIDRs, c.GlobalCIDRs} {
		if _, errs := enforce.ParseCIDRs(cidrs); len(errs) > 0 {
			l.fail(where, what, errs[0])
			return
		}
	}
	if c.ClusterID == cluster && sub.hasOwn {
		l.fail(where, what, fmt.Errorf("a second Submariner Cluster for %s", cluster))
		return
	}
	sub.hasOwn = sub.hasOwn || c.ClusterID == cluster
	sub.objs.SubmarinerClusters = append(sub.objs.SubmarinerClusters, u)
}

func (l *renderLoader) loadSubmariner(cluster, where, kind string, raw []byte) {
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(raw); err != nil {
		l.fail(where, kind, err)
		return
	}
	if u.GetNamespace() == "" {
		u.SetNamespace(metav1.NamespaceDefault)
	}
	what := kind + " " + objName(u.GetNamespace(), u.GetName())
	if u.GetName() == "" {
		l.fail(where, what, errors.New("metadata.name: Required value"))
		return
	}
	if !l.unique(cluster, where, kind, u.GetNamespace(), u.GetName()) {
		return
	}
	sub := l.objs[cluster]
	switch kind {
	case "Cluster":
		l.loadSubmarinerCluster(cluster, where, what, &u)
	case "ClusterGlobalEgressIP":
		if _, bad := kube.AllocatedIPs(&u); len(bad) > 0 {
			l.fail(where, what, fmt.Errorf("status.allocatedIPs: %q is not an IP address", bad[0]))
			return
		}
		sub.objs.ClusterGlobalEgressIPs = append(sub.objs.ClusterGlobalEgressIPs, &u)
	case "GlobalEgressIP":
		if _, bad := kube.AllocatedIPs(&u); len(bad) > 0 {
			l.fail(where, what, fmt.Errorf("status.allocatedIPs: %q is not an IP address", bad[0]))
			return
		}
		if _, err := kube.GlobalEgressIPFrom(&u); err != nil {
			l.fail(where, what, err)
			return
		}
		sub.objs.GlobalEgressIPs = append(sub.objs.GlobalEgressIPs, &u)
	case "GlobalIngressIP":
		ref, _, _ := unstructured.NestedString(u.Object, "spec", "serviceRef", "name")
		if _, err := kube.ServiceGlobalIPsFrom([]*unstructured.Unstructured{&u}, u.GetNamespace(), ref); err != nil {
			l.fail(where, what, err)
			return
		}
		sub.objs.GlobalIngressIPs = append(sub.objs.GlobalIngressIPs, &u)
	}
}
