// Package enforce translates MultiClusterNetworkPolicies plus the inventory
// of every cluster (cluster labels, namespaces, pods) into the plain
// networking.k8s.io/v1 NetworkPolicies one enforcing cluster must apply.
//
// The package is pure: no goroutines, no clock, no network, no client-go.
// The daemon keeps an Inventory up to date from replicated state and calls
// Evaluate for the policies Affected by each change; `coastguardd
// render` builds an Inventory from files and calls Translate. Both therefore
// run exactly the same code. The semantics are written down in
// docs/SEMANTICS.md.
package enforce

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	mcsv1alpha1 "github.com/coastguard-mcnp/coastguard/api/mcs/v1alpha1"
	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// ClusterIDLabel is carried by every cluster; its value is the cluster ID.
const ClusterIDLabel = mcsv1alpha1.ClusterIDLabel

// NamespaceNameLabel is set by the apiserver on every namespace; the
// inventory adds it too so remote namespaceSelectors behave like local ones.
const NamespaceNameLabel = corev1.LabelMetadataName

// Cluster is one member of the cluster set.
type Cluster struct {
	ID string
	// Labels from ClusterProperty objects. The inventory always sets
	// cluster.clusterset.k8s.io=<ID>, overriding any other value.
	Labels map[string]string
	// LabelsUnknown: the cluster's labels have not arrived (or its cluster
	// entry was deleted); only its ID label is known. Such a cluster
	// matches only a clusterSelector that names its ID (see
	// clusterMatches), never {} nor a NotIn/DoesNotExist selector.
	LabelsUnknown bool

	// PodCIDRs are the cluster's advertised pod CIDRs (Submariner's
	// Cluster object); used by the sanity checks (overlaps, pods outside).
	PodCIDRs []string
	// Globalnet: Submariner source-NATs the cluster's cross-cluster
	// traffic; its pods are rendered by their global addresses (see
	// globalnet.go and docs/SEMANTICS.md "Globalnet").
	Globalnet          bool
	GlobalCIDRs        []string
	ClusterEgressIPs   []string
	NamespaceEgressIPs map[string][]string
}

// Namespace is a namespace of one cluster.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Port is a container port of a pod.
type Port struct {
	Name     string
	Port     int32
	Protocol corev1.Protocol // TCP when empty
}

// Pod holds what policy translation needs to know about a pod.
type Pod struct {
	Namespace   string
	Name        string
	Labels      map[string]string
	IPs         []string
	Phase       corev1.PodPhase
	HostNetwork bool
	Ports       []Port
	// EgressIPs are the pod's Globalnet egress IPs when a GlobalEgressIP
	// with a podSelector selects it.
	EgressIPs []string
	// NotReady: the pod's Ready condition is not True, so it is no
	// endpoint of its Services (unless they publish not-ready addresses).
	// It stays a peer by its own IP (docs/SEMANTICS.md "Readiness").
	NotReady bool
}

// Eligible reports whether the pod can be a peer: it has an IP, is not
// hostNetwork and has not terminated (Succeeded or Failed).
func (p *Pod) Eligible() bool {
	return len(p.IPs) > 0 && !p.HostNetwork &&
		p.Phase != corev1.PodSucceeded && p.Phase != corev1.PodFailed
}

// PolicyRef identifies a MultiClusterNetworkPolicy in the cluster set.
type PolicyRef struct {
	Origin    string // cluster where the MCNP was created
	Namespace string
	Name      string
}

// String is the reference's wire and API form "origin/namespace/name": the
// name of its report entries (crdt), the AnnotationOrigin of its generated
// objects, and log output. Inside the program a reference stays typed.
func (r PolicyRef) String() string { return r.Origin + "/" + r.Namespace + "/" + r.Name }

// ParsePolicyRef is the inverse of String, for the boundaries where a
// reference arrives as text (a report entry's name, an AnnotationOrigin).
// It refuses text without two slashes (the name is the rest).
func ParsePolicyRef(s string) (PolicyRef, bool) {
	p := strings.SplitN(s, "/", 3)
	if len(p) != 3 {
		return PolicyRef{}, false
	}
	return PolicyRef{Origin: p[0], Namespace: p[1], Name: p[2]}, true
}

// Compare orders refs by origin, namespace, name.
func (r PolicyRef) Compare(o PolicyRef) int {
	if r.Origin != o.Origin {
		return cmpStr(r.Origin, o.Origin)
	}
	if r.Namespace != o.Namespace {
		return cmpStr(r.Namespace, o.Namespace)
	}
	return cmpStr(r.Name, o.Name)
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Policy is a MultiClusterNetworkPolicy together with its origin cluster.
type Policy struct {
	Origin     string
	Namespace  string
	Name       string
	UID        string
	Generation int64
	Spec       apiv1.MultiClusterNetworkPolicySpec
	// Unknown lists the spec fields (paths) the origin wrote that this
	// build does not know (apiv1.DecodeSpec): the policy is then invalid
	// here and only isolates its pods, since a field it cannot read may
	// narrow what the policy admits (docs/SEMANTICS.md, "Fields this
	// build does not know").
	Unknown []string
}

// Ref returns the policy's reference.
func (p *Policy) Ref() PolicyRef {
	return PolicyRef{Origin: p.Origin, Namespace: p.Namespace, Name: p.Name}
}

// Inventory is the multi-cluster view the translator works on: clusters
// with their labels, namespaces and pods (indexed per cluster and
// namespace), and policies with pre-compiled selectors. It is not safe for
// concurrent use.
type Inventory struct {
	clusters map[string]*clusterState
	// pinned: labels the enforcing cluster trusts for other clusters
	// (SetPinnedLabels); they replace what those clusters claim.
	pinned   map[string]labels.Set
	policies map[PolicyRef]*compiledPolicy
	// Reverse index for Affected: policies with a peer that can select
	// remote pods (explicit clusterSelector), by policy namespace when the
	// peer has no namespaceSelector, and all those with one.
	remoteSameNS map[string]map[PolicyRef]struct{}
	remoteNSSel  map[PolicyRef]struct{}
	// svcPeers: by Service namespace, the policies with a service peer
	// naming a Service of that namespace (servicepeer.go).
	svcPeers map[string]map[PolicyRef]struct{}
	// globalnet says how pods of Globalnet clusters that only have the
	// cluster-wide egress IPs are rendered (SetGlobalnetPolicy).
	globalnet GlobalnetPolicy
	// networks is the trusted (not gossiped) network knowledge the pod-IP
	// ownership check uses (SetNetworks, ownership.go).
	networks Networks
	// localNetworks is networks as given, before CheckNetworks (the
	// enforcing cluster's own ranges are taken from it).
	localNetworks Networks
	// netProblems are the trusted ranges CheckNetworks refused.
	netProblems []NetworkProblem
	// intern shares label sets, label keys and port lists between pods;
	// indexKeys counts, per label key, the policy peers that can use its
	// posting lists (compact.go).
	intern    *interner
	indexKeys map[string]int
	nsSerial  uint64 // last namespaceState.id handed out
	// sorted caches, rebuilt lazily
	clusterIDs []string
	policyRefs []PolicyRef
}

type clusterState struct {
	inv   *Inventory
	id    string
	known bool // SetCluster was called (vs implied by a pod/namespace)
	// labelsKnown: SetCluster was called with labels that are known
	// (Cluster.LabelsUnknown false).
	labelsKnown bool
	cluster     Cluster
	labels      labels.Set
	namespaces  map[string]*namespaceState
	// services are the cluster's exported Services, by namespace and name
	// (services.go).
	services map[string]map[string]*serviceState
}

type namespaceState struct {
	id      uint64 // unique in the inventory (podAux intern keys)
	cluster *clusterState
	name    string
	present bool // the Namespace object exists
	labels  labels.Set
	pods    podTable
	// index: label key -> value -> pods, so equality/In selectors visit
	// only candidate pods instead of the whole namespace. Only the keys in
	// Inventory.indexKeys (used by some policy's pod selector) are indexed.
	index map[string]map[string]map[*podEntry]struct{}
}

func (ns *namespaceState) indexPodKey(e *podEntry, k, v string) {
	byVal := ns.index[k]
	if byVal == nil {
		byVal = map[string]map[*podEntry]struct{}{}
		ns.index[k] = byVal
	}
	set := byVal[v]
	if set == nil {
		set = map[*podEntry]struct{}{}
		byVal[v] = set
	}
	set[e] = struct{}{}
}

func (ns *namespaceState) indexPod(inv *Inventory, e *podEntry) {
	for i, v := range e.labels.vals() {
		if k := e.labels.shape.keys[i]; inv.indexKeys[k] > 0 {
			ns.indexPodKey(e, k, v)
		}
	}
}

func (ns *namespaceState) unindexPod(e *podEntry) {
	if len(ns.index) == 0 {
		return
	}
	for i, v := range e.labels.vals() {
		k := e.labels.shape.keys[i]
		byVal := ns.index[k]
		if set := byVal[v]; set != nil {
			delete(set, e)
			if len(set) == 0 {
				delete(byVal, v)
				if len(byVal) == 0 {
					delete(ns.index, k)
				}
			}
		}
	}
}

// indexed reports whether key's posting lists are maintained.
func (inv *Inventory) indexed(key string) bool { return inv.indexKeys[key] > 0 }

// addIndexKeys registers the label keys a policy's pod selectors can look
// up; a key indexed for the first time is built over every namespace.
func (inv *Inventory) addIndexKeys(cp *compiledPolicy) {
	cp.forPeers(func(p *compiledPeer) {
		for _, r := range p.podIndex {
			inv.indexKeys[r.key]++
			if inv.indexKeys[r.key] == 1 {
				inv.buildIndex(r.key)
			}
		}
	})
}

func (inv *Inventory) removeIndexKeys(cp *compiledPolicy) {
	cp.forPeers(func(p *compiledPeer) {
		for _, r := range p.podIndex {
			inv.indexKeys[r.key]--
			if inv.indexKeys[r.key] <= 0 {
				delete(inv.indexKeys, r.key)
				for _, c := range inv.clusters {
					for _, ns := range c.namespaces {
						delete(ns.index, r.key)
					}
				}
			}
		}
	})
}

func (inv *Inventory) buildIndex(key string) {
	for _, c := range inv.clusters {
		for _, ns := range c.namespaces {
			for e := range ns.pods.all() {
				if i := e.labels.find(key); i >= 0 {
					ns.indexPodKey(e, key, e.labels.val(i))
				}
			}
		}
	}
}

// NewInventory returns an empty inventory.
func NewInventory() *Inventory {
	return &Inventory{
		clusters:     map[string]*clusterState{},
		policies:     map[PolicyRef]*compiledPolicy{},
		remoteSameNS: map[string]map[PolicyRef]struct{}{},
		remoteNSSel:  map[PolicyRef]struct{}{},
		svcPeers:     map[string]map[PolicyRef]struct{}{},
		intern:       newInterner(),
		indexKeys:    map[string]int{},
	}
}

func (inv *Inventory) cluster(id string, create bool) *clusterState {
	c := inv.clusters[id]
	if c == nil && create {
		c = &clusterState{
			inv:        inv,
			id:         id,
			labels:     labels.Set{ClusterIDLabel: id},
			namespaces: map[string]*namespaceState{},
		}
		c.cluster.ID = id
		inv.clusters[id] = c
		inv.clusterIDs = nil
	}
	return c
}

func (c *clusterState) namespace(name string, create bool) *namespaceState {
	ns := c.namespaces[name]
	if ns == nil && create {
		c.inv.nsSerial++
		ns = &namespaceState{id: c.inv.nsSerial, cluster: c, name: name, index: map[string]map[string]map[*podEntry]struct{}{}}
		c.namespaces[name] = ns
	}
	return ns
}

func (c *clusterState) dropIfEmpty(name string) {
	if ns := c.namespaces[name]; ns != nil && !ns.present && ns.pods.Len() == 0 {
		delete(c.namespaces, name)
	}
}

// SetCluster adds or replaces a cluster's description and labels.
func (inv *Inventory) SetCluster(c Cluster) {
	cs := inv.cluster(c.ID, true)
	cs.known = true
	cs.labelsKnown = !c.LabelsUnknown
	cs.cluster = c
	cs.cluster.Labels = maps.Clone(c.Labels)
	cs.cluster.PodCIDRs = slices.Clone(c.PodCIDRs)
	cs.cluster.GlobalCIDRs = slices.Clone(c.GlobalCIDRs)
	cs.cluster.ClusterEgressIPs = slices.Clone(c.ClusterEgressIPs)
	cs.cluster.NamespaceEgressIPs = maps.Clone(c.NamespaceEgressIPs)
	cs.labels = labels.Set{}
	for k, v := range c.Labels {
		cs.labels[k] = v
	}
	cs.labels[ClusterIDLabel] = c.ID
}

// RemoveCluster forgets a cluster: its labels, namespaces, pods and every
// policy it originated.
func (inv *Inventory) RemoveCluster(id string) {
	inv.RemoveClusterKeepPolicies(id)
	for ref := range inv.policies {
		if ref.Origin == id {
			inv.unindexPolicy(ref)
			delete(inv.policies, ref)
			inv.policyRefs = nil
		}
	}
}

// RemoveClusterKeepPolicies forgets a cluster's labels, namespaces and pods
// but keeps the policies it originated (a lost origin's policies stay
// enforced from their last-known state; docs/SEMANTICS.md).
func (inv *Inventory) RemoveClusterKeepPolicies(id string) {
	if c, ok := inv.clusters[id]; ok {
		for _, ns := range c.namespaces {
			for e := range ns.pods.all() {
				inv.intern.releaseLabels(e.labels)
				inv.intern.releaseAux(e.aux)
			}
		}
		delete(inv.clusters, id)
		inv.clusterIDs = nil
	}
}

// SetNamespace adds or replaces a namespace of a cluster. The label
// kubernetes.io/metadata.name=<name> is always present, as on a real
// apiserver.
//
// It returns the namespace's labels before the change (nil: it was not
// present), for the change's Affected.
func (inv *Inventory) SetNamespace(cluster string, ns Namespace) (old labels.Labels) {
	st := inv.cluster(cluster, true).namespace(ns.Name, true)
	if st.present {
		old = st.labels
	}
	st.present = true
	st.labels = labels.Set{}
	for k, v := range ns.Labels {
		st.labels[k] = v
	}
	st.labels[NamespaceNameLabel] = ns.Name
	return old
}

// RemoveNamespace removes a namespace object. Pods still recorded in it are
// kept until they are removed themselves. It returns the namespace's labels
// before (nil: it was not present).
func (inv *Inventory) RemoveNamespace(cluster, name string) (old labels.Labels) {
	c := inv.cluster(cluster, false)
	if c == nil {
		return nil
	}
	if ns := c.namespaces[name]; ns != nil {
		if ns.present {
			old = ns.labels
		}
		ns.present = false
		ns.labels = nil
		c.dropIfEmpty(name)
	}
	return old
}

// SetPod adds or replaces a pod. The inventory keeps its own compact copy:
// labels and ports are interned, addresses parsed (compact.go). It returns
// the pod's labels before the change (nil: a new pod), read-only.
func (inv *Inventory) SetPod(cluster string, p Pod) (old labels.Labels) {
	ns := inv.cluster(cluster, true).namespace(p.Namespace, true)
	prev := ns.pods.get(p.Name)
	name := p.Name
	if prev != nil {
		name, old = prev.name, prev.labels
	}
	var addrs []netip.Addr
	for _, ip := range p.IPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			addrs = append(addrs, a.Unmap().WithZone(""))
		}
	}
	var egress []netip.Prefix
	if len(p.EgressIPs) > 0 {
		egress = parseAddrs(p.EgressIPs)
	}
	e := &podEntry{name: name, labels: inv.intern.labels(p.Labels)}
	var more []netip.Addr
	var family uint8
	if len(addrs) > 0 && p.Eligible() {
		family, more = e.setAddr(addrs[0]), addrs[1:]
	}
	e.aux = inv.intern.podAux(ns, podFlags{family: family, notReady: p.NotReady}, p.Ports, more, egress)
	if prev != nil {
		inv.dropPod(ns, prev)
	}
	ns.pods.put(e, prev)
	ns.indexPod(inv, e)
	return old
}

// dropPod unindexes a pod and releases its interned parts.
func (inv *Inventory) dropPod(ns *namespaceState, e *podEntry) {
	ns.unindexPod(e)
	inv.intern.releaseLabels(e.labels)
	inv.intern.releaseAux(e.aux)
}

// RemovePod removes a pod and returns its labels (nil: there was none),
// read-only.
func (inv *Inventory) RemovePod(cluster, namespace, name string) (old labels.Labels) {
	c := inv.cluster(cluster, false)
	if c == nil {
		return nil
	}
	if ns := c.namespaces[namespace]; ns != nil {
		if prev := ns.pods.get(name); prev != nil {
			old = prev.labels
			inv.dropPod(ns, prev)
			ns.pods.remove(prev)
		}
		c.dropIfEmpty(namespace)
	}
	return old
}

// SetPolicy adds or replaces a policy. An invalid policy (see
// apiv1.ValidateSpec) is still recorded, so that every enforcing cluster
// reports the same error for it (Result.Error), and it fails closed: if its
// clusterSelector and podSelector are usable it generates isolation only
// (policyTypes, no rules), else nothing. The error is also returned.
func (inv *Inventory) SetPolicy(p Policy) error {
	if p.Origin == "" || p.Namespace == "" || p.Name == "" {
		return fmt.Errorf("policy %q: origin, namespace and name are required", p.Ref())
	}
	cp := compilePolicy(p)
	if _, ok := inv.policies[cp.ref]; !ok {
		inv.policyRefs = nil
	}
	inv.unindexPolicy(cp.ref)
	inv.policies[cp.ref] = cp
	inv.indexPolicy(cp)
	if cp.err != nil {
		return fmt.Errorf("policy %s: %w", cp.ref, cp.err)
	}
	return nil
}

// RemovePolicy removes a policy.
func (inv *Inventory) RemovePolicy(ref PolicyRef) {
	if _, ok := inv.policies[ref]; ok {
		inv.unindexPolicy(ref)
		delete(inv.policies, ref)
		inv.policyRefs = nil
	}
}

func (inv *Inventory) indexPolicy(cp *compiledPolicy) {
	inv.addIndexKeys(cp)
	if cp.err != nil {
		return
	}
	inv.indexServicePeers(cp)
	cp.anyPeer(func(p *compiledPeer) bool {
		if p.ipBlock != nil || p.svc != nil || p.clusterSel == nil {
			return false
		}
		if p.nsSel != nil {
			inv.remoteNSSel[cp.ref] = struct{}{}
			return false
		}
		set := inv.remoteSameNS[cp.ref.Namespace]
		if set == nil {
			set = map[PolicyRef]struct{}{}
			inv.remoteSameNS[cp.ref.Namespace] = set
		}
		set[cp.ref] = struct{}{}
		return false
	})
}

func (inv *Inventory) unindexPolicy(ref PolicyRef) {
	if old := inv.policies[ref]; old != nil {
		inv.removeIndexKeys(old)
		inv.unindexServicePeers(old)
	}
	delete(inv.remoteNSSel, ref)
	if set := inv.remoteSameNS[ref.Namespace]; set != nil {
		delete(set, ref)
		if len(set) == 0 {
			delete(inv.remoteSameNS, ref.Namespace)
		}
	}
}

// Policy returns a recorded policy.
func (inv *Inventory) Policy(ref PolicyRef) (Policy, bool) {
	cp, ok := inv.policies[ref]
	if !ok {
		return Policy{}, false
	}
	return cp.policy, true
}

// Clusters returns the IDs of every cluster known to the inventory, sorted.
func (inv *Inventory) Clusters() []string {
	if inv.clusterIDs == nil {
		inv.clusterIDs = slices.Sorted(maps.Keys(inv.clusters))
	}
	return slices.Clone(inv.clusterIDs)
}

func (inv *Inventory) sortedClusters() []string {
	if inv.clusterIDs == nil {
		inv.clusterIDs = slices.Sorted(maps.Keys(inv.clusters))
	}
	return inv.clusterIDs
}

// Policies returns the refs of every recorded policy, sorted.
func (inv *Inventory) Policies() []PolicyRef {
	return slices.Clone(inv.sortedPolicies())
}

func (inv *Inventory) sortedPolicies() []PolicyRef {
	if inv.policyRefs == nil {
		inv.policyRefs = slices.SortedFunc(maps.Keys(inv.policies), PolicyRef.Compare)
	}
	return inv.policyRefs
}

// HasNamespace reports whether the Namespace object exists in a cluster.
func (inv *Inventory) HasNamespace(cluster, name string) bool {
	c := inv.cluster(cluster, false)
	if c == nil {
		return false
	}
	ns := c.namespaces[name]
	return ns != nil && ns.present
}

// clusterLabels returns the labels of a cluster, including clusters the
// inventory has never heard of (only their ID label then), and whether
// they are known (SetCluster with known labels).
func (inv *Inventory) clusterLabels(id string) (labels.Set, bool) {
	if p, ok := inv.pinned[id]; ok {
		return p, true
	}
	if c := inv.clusters[id]; c != nil {
		return c.labels, c.labelsKnown
	}
	return labels.Set{ClusterIDLabel: id}, false
}

// SetPinnedLabels pins the labels of other clusters (cluster ID ->
// labels), as the enforcing cluster trusts them: a pinned cluster is seen
// with exactly these labels (and its ID label) by every clusterSelector,
// whatever its own cluster entry claims. nil pins nothing.
func (inv *Inventory) SetPinnedLabels(pinned map[string]map[string]string) {
	inv.pinned = nil
	for id, ls := range pinned {
		if inv.pinned == nil {
			inv.pinned = map[string]labels.Set{}
		}
		set := labels.Set{}
		for k, v := range ls {
			set[k] = v
		}
		set[ClusterIDLabel] = id
		inv.pinned[id] = set
	}
}

// ClusterLabels returns a copy of the labels of cluster id (its ID label
// at least) and whether they are known.
func (inv *Inventory) ClusterLabels(id string) (labels.Set, bool) {
	set, known := inv.clusterLabels(id)
	return labels.Merge(labels.Set{}, set), known
}

// NamespaceLabels returns a copy of the labels of namespace ns of cluster
// id, and whether that Namespace exists.
func (inv *Inventory) NamespaceLabels(id, ns string) (labels.Set, bool) {
	c := inv.clusters[id]
	if c == nil {
		return nil, false
	}
	st := c.namespaces[ns]
	if st == nil || !st.present {
		return nil, false
	}
	return labels.Merge(labels.Set{}, st.labels), true
}

// ClusterLabelsKnown reports whether the labels of cluster id are known.
func (inv *Inventory) ClusterLabelsKnown(id string) bool {
	_, ok := inv.clusterLabels(id)
	return ok
}

// clusterMatches reports whether a (non-nil) clusterSelector selects
// cluster id. A cluster whose labels are unknown matches nothing, in the
// positive or the negative sense, except a selector that names its ID: one
// with an In/= requirement on cluster.clusterset.k8s.io listing id (and
// that apimachinery matches against the ID label alone).
func (inv *Inventory) clusterMatches(sel labels.Selector, id string) bool {
	set, known := inv.clusterLabels(id)
	if known {
		return sel.Matches(set)
	}
	return namesClusterID(sel, id) && sel.Matches(labels.Set{ClusterIDLabel: id})
}

// namesClusterID reports whether sel has a requirement that pins the
// cluster ID label to a set of values including id.
func namesClusterID(sel labels.Selector, id string) bool {
	reqs, selectable := sel.Requirements()
	if !selectable {
		return false
	}
	for _, r := range reqs {
		if r.Key() != ClusterIDLabel {
			continue
		}
		switch r.Operator() {
		case selection.In, selection.Equals, selection.DoubleEquals:
			if r.Values().Has(id) {
				return true
			}
		}
	}
	return false
}

// selector compiles a label selector; nil stays nil (meaning "absent").
func selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}
