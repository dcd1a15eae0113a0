// Package kube holds coastguard's Kubernetes adapters: informers that turn
// local pods, namespaces, MultiClusterNetworkPolicies and ClusterProperties
// into this cluster's CRDT writes, leader election tied to the writer epoch,
// the NetworkPolicy applier, MCNP status aggregation and the debounced
// enforcer trigger.
//
// Everything that decides something (value conversion, Diff,
// Aggregate, the debounce deadline) is a pure function and tested as such;
// the controllers around them follow the informer -> workqueue -> reconcile
// pattern and need nothing but a real (or fake) clientset.
package kube

import (
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// ClusterIDLabel is the label every cluster carries with its own ID.
const ClusterIDLabel = enforce.ClusterIDLabel

// Resources coastguard watches besides core ones.
var (
	MCNPResource            = schema.GroupVersionResource{Group: "networking.submariner.io", Version: "v1", Resource: "multiclusternetworkpolicies"}
	ClusterPropertyResource = schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1alpha1", Resource: "clusterproperties"}
)

// PodName is the CRDT entry name of a pod or any namespaced object.
func PodName(namespace, name string) string { return namespace + "/" + name }

// TransformPod is a cache.TransformFunc for the pod informer: it keeps only
// what PodToValue reads (name, namespace, uid, resourceVersion, labels, pod
// IPs, phase, the Ready condition's status, hostNetwork and container ports) so a large cluster's pod cache
// stays small. Non-pod objects pass through unchanged; tombstones are
// transformed inside.
func TransformPod(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return stripPod(o), nil
	case cache.DeletedFinalStateUnknown:
		if p, ok := o.Obj.(*corev1.Pod); ok {
			o.Obj = stripPod(p)
		}
		return o, nil
	}
	return obj, nil
}

func stripPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            p.Name,
			Namespace:       p.Namespace,
			UID:             p.UID,
			ResourceVersion: p.ResourceVersion,
			Labels:          p.Labels,
		},
		Spec: corev1.PodSpec{HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{
			Phase:  p.Status.Phase,
			PodIP:  p.Status.PodIP,
			PodIPs: p.Status.PodIPs,
		},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	for _, c := range p.Spec.Containers {
		if len(c.Ports) == 0 {
			continue
		}
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
	}
	for _, c := range p.Spec.InitContainers {
		if len(c.Ports) == 0 || !restartable(&c) {
			continue
		}
		out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy})
	}
	return out
}

// restartable reports whether an init container is a sidecar (restartable
// init container, restartPolicy: Always).
func restartable(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// ServingPorts lists the container ports named ports resolve against, as
// upstream Kubernetes resolves them (podutil.FindPort): those of
// spec.containers, then those of restartable init containers (sidecars).
// Ordinary init containers have finished before the pod serves and are
// left out.
func ServingPorts(p *corev1.Pod) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, c := range p.Spec.Containers {
		out = append(out, c.Ports...)
	}
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; restartable(c) {
			out = append(out, c.Ports...)
		}
	}
	return out
}

// PodToValue converts a pod into its replicated value. The pod's IPs come
// from status.podIPs (primary first), falling back to status.podIP; an
// address that is not an IP is an error (the daemon and `coastguardd
// render` both convert with this function, so they refuse the same pods).
// EgressIPs (Globalnet) are the caller's to fill in.
func PodToValue(p *corev1.Pod) (crdt.PodValue, error) {
	v := crdt.PodValue{
		Labels:      copyLabels(p.Labels),
		Phase:       string(p.Status.Phase),
		HostNetwork: p.Spec.HostNetwork,
		NotReady:    notReady(p),
	}
	for _, ip := range p.Status.PodIPs {
		if ip.IP != "" {
			v.IPs = append(v.IPs, ip.IP)
		}
	}
	if len(v.IPs) == 0 && p.Status.PodIP != "" {
		v.IPs = []string{p.Status.PodIP}
	}
	for _, ip := range v.IPs {
		if msgs := validation.IsValidIP(nil, ip); len(msgs) > 0 {
			return v, fmt.Errorf("status.podIPs: %q is not an IP address", ip)
		}
	}
	for _, port := range ServingPorts(p) {
		proto := string(port.Protocol)
		if proto == string(corev1.ProtocolTCP) {
			proto = "" // TCP is the default; keep values small
		}
		v.Ports = append(v.Ports, crdt.NamedPort{Name: port.Name, Port: port.ContainerPort, Protocol: proto})
	}
	return v, nil
}

// notReady reports whether the pod says it is not ready: a Ready
// condition whose status is not True. The EndpointSlice controller makes
// such a pod a not-ready endpoint, to which kube-proxy sends no service
// traffic. A pod without a Ready condition is not reported not ready:
// counting it as a backend is the stricter reading of the exactness rule.
func notReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status != corev1.ConditionTrue
		}
	}
	return false
}

// podEntryValue is the replicated value of a pod as the inventory writes it:
// present=false when filter (nil: podRelevant) leaves the pod out, else
// PodToValue with the pod's Globalnet egress IPs from egress (may be nil).
func podEntryValue(p *corev1.Pod, filter func(*corev1.Pod) bool, egress func(namespace string, labels map[string]string) []string) (v crdt.PodValue, present bool, err error) {
	if filter == nil {
		filter = podRelevant
	}
	if !filter(p) {
		return v, false, nil
	}
	if v, err = PodToValue(p); err != nil {
		return v, false, err
	}
	if egress != nil {
		v.EgressIPs = egress(p.Namespace, p.Labels)
	}
	return v, true, nil
}

// namespaceToValue converts a namespace into its replicated value.
func namespaceToValue(ns *corev1.Namespace) crdt.NamespaceValue {
	return crdt.NamespaceValue{Labels: copyLabels(ns.Labels)}
}

// policyToValue converts a MultiClusterNetworkPolicy (as served by the
// apiserver, decoded into unstructured form) into its replicated value.
// Spec is the JSON of .spec; encoding/json sorts map keys, so equal specs give
// equal bytes. A policy without a spec object is an error, never an empty
// (and so maximally broad) policy.
func policyToValue(u *unstructured.Unstructured) (crdt.PolicyValue, error) {
	raw, ok := u.Object["spec"]
	if !ok || raw == nil {
		return crdt.PolicyValue{}, fmt.Errorf("multiclusternetworkpolicy %s/%s has no spec", u.GetNamespace(), u.GetName())
	}
	if _, isMap := raw.(map[string]any); !isMap {
		return crdt.PolicyValue{}, fmt.Errorf("multiclusternetworkpolicy %s/%s: spec is %T, not an object", u.GetNamespace(), u.GetName(), raw)
	}
	spec, err := json.Marshal(raw)
	if err != nil {
		return crdt.PolicyValue{}, fmt.Errorf("multiclusternetworkpolicy %s/%s: encode spec: %w", u.GetNamespace(), u.GetName(), err)
	}
	return crdt.PolicyValue{UID: string(u.GetUID()), Generation: u.GetGeneration(), Spec: spec}, nil
}

// clusterProperty is one about.k8s.io ClusterProperty: its name is the
// property (used as a label key), spec.value its value.
type clusterProperty struct {
	Name  string
	Value string
}

// clusterPropertyFrom reads a ClusterProperty from its unstructured form.
func clusterPropertyFrom(u *unstructured.Unstructured) (clusterProperty, error) {
	v, found, err := unstructured.NestedString(u.Object, "spec", "value")
	if err != nil {
		return clusterProperty{}, fmt.Errorf("clusterproperty %s: %w", u.GetName(), err)
	}
	if !found {
		return clusterProperty{}, fmt.Errorf("clusterproperty %s has no spec.value", u.GetName())
	}
	return clusterProperty{Name: u.GetName(), Value: v}, nil
}

// ClusterInfo is what the daemon knows about its cluster's network besides
// ClusterProperties (from Submariner's Cluster/Endpoint and Globalnet).
type ClusterInfo struct {
	PodCIDRs           []string
	ServiceCIDRs       []string
	GlobalCIDRs        []string
	Globalnet          bool
	ClusterEgressIPs   []string
	NamespaceEgressIPs map[string][]string
	GossipName         string
}

// clusterValueFrom builds this cluster's KindCluster value. Labels are
// cluster.clusterset.k8s.io=<clusterID> plus one label per ClusterProperty
// whose name is a valid label key and whose value is a valid label value;
// properties that cannot be labels are returned as errors (the value is
// still usable). A property named cluster.clusterset.k8s.io never overrides
// the cluster ID.
func clusterValueFrom(clusterID string, props []clusterProperty, info ClusterInfo) (crdt.ClusterValue, []error) {
	var errs []error
	labels := map[string]string{ClusterIDLabel: clusterID}
	if msgs := validation.IsValidLabelValue(clusterID); len(msgs) > 0 || clusterID == "" {
		errs = append(errs, fmt.Errorf("cluster ID %q is not a valid label value: %v", clusterID, msgs))
	}
	sorted := append([]clusterProperty(nil), props...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, p := range sorted {
		if p.Name == ClusterIDLabel {
			if p.Value != clusterID {
				errs = append(errs, fmt.Errorf("clusterproperty %s=%q disagrees with cluster ID %q; using the cluster ID", p.Name, p.Value, clusterID))
			}
			continue
		}
		if msgs := validation.IsQualifiedName(p.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("clusterproperty %q: name is not a valid label key: %v", p.Name, msgs))
			continue
		}
		if msgs := validation.IsValidLabelValue(p.Value); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("clusterproperty %q: value is not a valid label value: %v", p.Name, msgs))
			continue
		}
		labels[p.Name] = p.Value
	}
	v := crdt.ClusterValue{
		Labels:           labels,
		PodCIDRs:         append([]string(nil), info.PodCIDRs...),
		ServiceCIDRs:     append([]string(nil), info.ServiceCIDRs...),
		GlobalCIDRs:      append([]string(nil), info.GlobalCIDRs...),
		Globalnet:        info.Globalnet,
		ClusterEgressIPs: append([]string(nil), info.ClusterEgressIPs...),
		GossipName:       info.GossipName,
	}
	if len(info.NamespaceEgressIPs) > 0 {
		v.NamespaceEgressIPs = make(map[string][]string, len(info.NamespaceEgressIPs))
		for ns, ips := range info.NamespaceEgressIPs {
			v.NamespaceEgressIPs[ns] = append([]string(nil), ips...)
		}
	}
	return v, errs
}

func copyLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// stripManagedFields is a cache.TransformFunc dropping metadata.managedFields
// (often the largest part of a small object) from cached objects.
func stripManagedFields(obj any) (any, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		if a, err := meta.Accessor(t.Obj); err == nil {
			a.SetManagedFields(nil)
		}
		return t, nil
	}
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}
