package enforce

import (
	"cmp"
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// Splitting limits: a generated NetworkPolicy holds at most MaxIPBlocks
// ipBlock peers and about MaxPolicyBytes of JSON; larger policies are split
// into parts that share podSelector and policyTypes (NetworkPolicies are
// additive, so the union of the parts allows exactly what one would).
const (
	MaxIPBlocks    = 1000
	MaxPolicyBytes = 512 << 10
)

// Result is the outcome of translating one policy for one enforcing cluster.
type Result struct {
	// Selected is true when the enforcing cluster is one of the policy's
	// enforcing clusters (spec.clusterSelector).
	Selected bool
	// SkippedNoNamespace is true when the cluster is selected but has no
	// namespace of the policy's name; nothing is generated then.
	SkippedNoNamespace bool
	// Error is set for an invalid policy; nothing is generated then.
	Error string
	// NetworkPolicies are the generated objects, in part order.
	NetworkPolicies []networkingv1.NetworkPolicy
	// RemotePeers counts distinct remote addresses rendered as ipBlocks
	// (pod IPs, or Globalnet egress IPs/CIDRs).
	RemotePeers int
	// Degraded is a reason (see the Reason* constants) when the policy is
	// enforced but not exactly as written, e.g. GlobalnetCoarseIdentity;
	// empty otherwise. Details lists every problem found.
	Degraded        string
	DegradedDetails []string
	// Overrun is set when a budgeted evaluation (EvaluateBudget) stopped
	// early; NetworkPolicies is then isolation only.
	Overrun *Overrun
}

type compiledPolicy struct {
	ref        PolicyRef
	policy     Policy
	err        error
	clusterSel labels.Selector // nil: origin only
	// isolateOnly: the policy is invalid (err) but its clusterSelector and
	// podSelector are usable; it generates isolation without rules.
	isolateOnly bool
	types       []networkingv1.PolicyType
	ingress     []compiledRule
	egress      []compiledRule
}

type compiledRule struct {
	ports    []networkingv1.NetworkPolicyPort
	hasNamed bool
	allPeers bool // from/to empty: every peer
	peers    []compiledPeer
}

type indexReq struct {
	key    string
	values []string
}

// indexable extracts the requirements a label index can answer.
func indexable(sel labels.Selector) []indexReq {
	if sel == nil {
		return nil
	}
	reqs, ok := sel.Requirements()
	if !ok {
		return nil
	}
	var out []indexReq
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			out = append(out, indexReq{key: r.Key(), values: r.Values().List()})
		}
	}
	return out
}

type compiledPeer struct {
	ipBlock    *networkingv1.IPBlock
	clusterSel labels.Selector // nil: the enforcing cluster only
	nsSel      labels.Selector // nil: the policy's namespace
	podSel     labels.Selector // nil: every pod
	// podIndex lists the equality/In requirements of podSel usable with
	// the namespace label index.
	podIndex []indexReq
	native   networkingv1.NetworkPolicyPeer
	// nativeKey identifies native (de-duplication); key identifies the
	// whole selector peer (evalCache).
	nativeKey string
	key       string
	size      int
	// svc is set for a service peer (servicepeer.go): clusterSel is then
	// service.clusterSelector, nsSel and podSel are nil and unused, and
	// native is computed per evaluation from the local Service.
	svc *servicePeerRef
}

// forPeers calls fn for every compiled peer of every rule.
func (cp *compiledPolicy) forPeers(fn func(*compiledPeer)) {
	for _, rules := range [][]compiledRule{cp.ingress, cp.egress} {
		for i := range rules {
			for j := range rules[i].peers {
				fn(&rules[i].peers[j])
			}
		}
	}
}

func compilePolicy(p Policy) *compiledPolicy {
	cp := &compiledPolicy{ref: p.Ref()}
	cp.policy = p
	cp.policy.Spec = *p.Spec.DeepCopy()
	spec := &cp.policy.Spec
	errs := apiv1.ValidateSpec(spec, field.NewPath("spec"))
	for _, f := range p.Unknown {
		errs = append(errs, field.Forbidden(field.NewPath("spec").Child(f),
			"not known to this coastguard build (the origin's is newer): it may narrow what the policy admits, so the policy's pods are only isolated here until this cluster's coastguard is upgraded"))
	}
	if len(errs) > 0 {
		cp.err = errs.ToAggregate()
		// Fail closed: when the enforcing clusters and the selected pods
		// are still well defined, isolate those pods (policyTypes, no
		// rules) rather than leave them open.
		sel, err1 := selector(spec.ClusterSelector)
		_, err2 := metav1.LabelSelectorAsSelector(&spec.PodSelector)
		if err1 == nil && err2 == nil {
			cp.clusterSel = sel
			cp.types = effectiveTypes(spec)
			cp.isolateOnly = true
		}
		return cp
	}
	var err error
	fail := func(e error) *compiledPolicy {
		cp.err = e
		return cp
	}
	if cp.clusterSel, err = selector(spec.ClusterSelector); err != nil {
		return fail(err)
	}
	cp.types = effectiveTypes(spec)
	for _, r := range spec.Ingress {
		cr, err := compileRule(p.Namespace, r.Ports, r.From)
		if err != nil {
			return fail(err)
		}
		cp.ingress = append(cp.ingress, cr)
	}
	for _, r := range spec.Egress {
		cr, err := compileRule(p.Namespace, r.Ports, r.To)
		if err != nil {
			return fail(err)
		}
		cp.egress = append(cp.egress, cr)
	}
	return cp
}

// effectiveTypes applies NetworkPolicy defaulting: Ingress always, Egress
// when egress rules exist; explicit types are kept (deduplicated, ordered).
func effectiveTypes(spec *apiv1.MultiClusterNetworkPolicySpec) []networkingv1.PolicyType {
	in, eg := false, false
	if len(spec.PolicyTypes) == 0 {
		in, eg = true, len(spec.Egress) > 0
	}
	for _, t := range spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			in = true
		case networkingv1.PolicyTypeEgress:
			eg = true
		}
	}
	var out []networkingv1.PolicyType
	if in {
		out = append(out, networkingv1.PolicyTypeIngress)
	}
	if eg {
		out = append(out, networkingv1.PolicyTypeEgress)
	}
	return out
}

func compileRule(policyNS string, ports []networkingv1.NetworkPolicyPort, peers []apiv1.MultiClusterNetworkPolicyPeer) (compiledRule, error) {
	cr := compiledRule{allPeers: len(peers) == 0}
	for _, p := range ports {
		cr.ports = append(cr.ports, *p.DeepCopy())
		if p.Port != nil && p.Port.Type == intstr.String {
			cr.hasNamed = true
		}
	}
	for i := range peers {
		p := &peers[i]
		var c compiledPeer
		if p.IPBlock != nil {
			c.ipBlock = p.IPBlock.DeepCopy()
			c.size = ipBlockSize(c.ipBlock)
			cr.peers = append(cr.peers, c)
			continue
		}
		if p.Service != nil {
			if err := compileServicePeer(&c, policyNS, p.Service); err != nil {
				return cr, err
			}
			cr.peers = append(cr.peers, c)
			continue
		}
		var err error
		if c.clusterSel, err = selector(p.ClusterSelector); err != nil {
			return cr, err
		}
		if c.nsSel, err = selector(p.NamespaceSelector); err != nil {
			return cr, err
		}
		if c.podSel, err = selector(p.PodSelector); err != nil {
			return cr, err
		}
		c.podIndex = indexable(c.podSel)
		// The native form for the enforcing cluster: NetworkPolicy's own
		// namespace/pod dimensions. A peer with only clusterSelector means
		// every pod of the policy's namespace: podSelector {}.
		c.native = networkingv1.NetworkPolicyPeer{
			NamespaceSelector: p.NamespaceSelector.DeepCopy(),
			PodSelector:       p.PodSelector.DeepCopy(),
		}
		if c.native.NamespaceSelector == nil && c.native.PodSelector == nil {
			c.native.PodSelector = &metav1.LabelSelector{}
		}
		b, _ := json.Marshal(c.native)
		c.size = len(b) + 8
		c.nativeKey = string(b)
		k, _ := json.Marshal([]*metav1.LabelSelector{p.ClusterSelector, p.NamespaceSelector, p.PodSelector})
		c.key = string(k)
		cr.peers = append(cr.peers, c)
	}
	return cr, nil
}

func ipBlockSize(b *networkingv1.IPBlock) int {
	n := 32 + len(b.CIDR)
	for _, e := range b.Except {
		n += len(e) + 3
	}
	return n
}

// enforcedAt reports whether the policy is enforced in cluster c.
func (cp *compiledPolicy) enforcedAt(inv *Inventory, c string) bool {
	return inv.selects(cp.clusterSel, cp.ref.Origin, c)
}

// peerClusters calls fn for each cluster the peer's cluster dimension
// selects, in sorted order.
func (p *compiledPeer) peerClusters(inv *Inventory, enforcing string, fn func(string)) {
	if p.clusterSel == nil {
		fn(enforcing)
		return
	}
	ids := inv.sortedClusters()
	seenEnforcing := false
	for _, id := range ids {
		if id == enforcing {
			seenEnforcing = true
		}
		if inv.clusterMatches(p.clusterSel, id) {
			fn(id)
		}
	}
	// The enforcing cluster is a member even before the inventory knows it.
	if !seenEnforcing && inv.clusterMatches(p.clusterSel, enforcing) {
		fn(enforcing)
	}
}

// collectRemote adds the eligible pods the peer selects in remote cluster
// r (namespace and pod dimensions evaluated against r's own labels), keyed
// by IP. Should two pods claim one IP, the smallest cluster/namespace/name
// wins, so the result does not depend on map order.
func (p *compiledPeer) collectRemote(inv *Inventory, r, policyNS string, out *remoteBuilder) {
	c := inv.clusters[r]
	if c == nil {
		return
	}
	add := func(pod *podEntry) {
		if !pod.eligible() {
			return
		}
		if p.podSel != nil && !p.podSel.Matches(pod.labels) {
			return
		}
		out.add(r, pod)
	}
	visit := func(ns *namespaceState) {
		// Use the most selective indexable requirement, if any: every
		// matching pod carries one of its values for its key.
		best, bestN := -1, ns.pods.Len()
		for i, r := range p.podIndex {
			if !inv.indexed(r.key) {
				continue
			}
			n := 0
			for _, v := range r.values {
				n += len(ns.index[r.key][v])
			}
			if n < bestN {
				best, bestN = i, n
			}
		}
		if best < 0 {
			for pod := range ns.pods.all() {
				add(pod)
			}
			return
		}
		r := p.podIndex[best]
		for _, v := range r.values {
			for pod := range ns.index[r.key][v] {
				add(pod)
			}
		}
	}
	if p.nsSel == nil {
		if ns := c.namespaces[policyNS]; ns != nil {
			visit(ns)
		}
		return
	}
	for _, ns := range c.namespaces {
		if ns.present && p.nsSel.Matches(ns.labels) {
			visit(ns)
		}
	}
}

// outRule is a translated rule before packing into parts.
type outRule struct {
	ports    []networkingv1.NetworkPolicyPort
	allPeers bool
	peers    []networkingv1.NetworkPolicyPeer
	sizes    []int
}

// remoteSet is what one selector peer selects, for one enforcing cluster,
// policy namespace and direction: whether the enforcing cluster is a peer
// cluster (native peer), the eligible remote pods by rendered address (see
// globalnet.go) and what made the rendering inexact.
type remoteSet struct {
	hasLocal bool
	// native replaces the peer's static native form when set (a service
	// peer: the local Service's selector).
	native   *networkingv1.NetworkPolicyPeer
	nativeID string
	addrs    map[netip.Prefix]*renderedAddr
	sorted   []netip.Prefix
	problems problems
	// gnSelected: the selected pods of Globalnet clusters in an egress
	// rule, by "cluster\x00namespace" (they have no address of their own
	// there; services.go admits their Services' global ingress IPs).
	gnSelected map[string]map[*podEntry]bool
}

func (rs *remoteSet) selectGlobalnet(pod *podEntry) {
	k := pod.ns().cluster.id + "\x00" + pod.ns().name
	if rs.gnSelected == nil {
		rs.gnSelected = map[string]map[*podEntry]bool{}
	}
	if rs.gnSelected[k] == nil {
		rs.gnSelected[k] = map[*podEntry]bool{}
	}
	rs.gnSelected[k][pod] = true
}

// evalCache shares remoteSets between the policies of one evaluation batch
// (policies commonly repeat peers such as "frontends of every cluster").
// It is valid only while the inventory does not change.
type evalCache struct {
	enforcing string
	sets      map[string]*remoteSet
	views     map[string]*clusterView // per cluster addressing, lazily built
	// localNets: the enforcing cluster's trusted networks (ownership.go)
	localNets *ClusterNetworks
	localSet  bool
	// svcBackends caches the backends of exported Services (services.go)
	svcBackends map[*serviceState][]*podEntry
}

func newEvalCache(enforcing string) *evalCache {
	return &evalCache{enforcing: enforcing, sets: map[string]*remoteSet{}}
}

// remote returns what peer p selects; nil when computing it takes the
// budget (nil: none) over.
func (ec *evalCache) remote(inv *Inventory, p *compiledPeer, policyNS string, egress bool, bs *budgetState) *remoteSet {
	dir := "i"
	if egress {
		dir = "e"
	}
	key := dir + policyNS + "\x00" + p.key
	if rs := ec.sets[key]; rs != nil {
		return rs
	}
	if !bs.collect(0) {
		return nil
	}
	rs := &remoteSet{addrs: map[netip.Prefix]*renderedAddr{}}
	b := &remoteBuilder{inv: inv, ec: ec, egress: egress, set: rs}
	if p.svc != nil {
		ec.collectServicePeer(inv, p, policyNS, b)
	} else {
		p.peerClusters(inv, ec.enforcing, func(c string) {
			if c == ec.enforcing {
				rs.hasLocal = true
				return
			}
			p.collectRemote(inv, c, policyNS, b)
		})
	}
	rs.sorted = make([]netip.Prefix, 0, len(rs.addrs))
	for a := range rs.addrs {
		rs.sorted = append(rs.sorted, a)
	}
	slices.SortFunc(rs.sorted, netip.Prefix.Compare)
	ec.sets[key] = rs
	if !bs.collect(len(rs.sorted)) {
		return nil
	}
	return rs
}

// translateRule turns one compiled rule into zero or more output rules.
// Never widen: a rule whose peers all translate to nothing is dropped.
func translateRule(inv *Inventory, ec *evalCache, policyNS string, r *compiledRule, egress bool, acc *evalAcc) []outRule {
	if r.allPeers {
		return []outRule{{ports: clonePorts(r.ports), allPeers: true}}
	}
	base, sets, ok := rulePeers(inv, ec, policyNS, r, egress, acc)
	if !ok {
		return nil // over budget
	}
	addrs, remote := unionRemote(sets)
	for _, a := range addrs {
		acc.seen[a] = struct{}{}
	}
	var svc []outRule
	if egress {
		// Exported Services whose backends the rule admits: their
		// addresses too (services.go, the exactness rule).
		svc = serviceRules(inv, ec, r, admittedBackends(sets, remote, addrs), acc)
	}

	if !egress || !r.hasNamed {
		// Ports pass through: in ingress the destination is the local
		// selected pod, so its CNI resolves named ports itself.
		if !acc.budget.charge(len(addrs), len(addrs)*(minBlockJSON+minCIDRLen)) {
			return nil
		}
		for _, a := range addrs {
			base.peers = appendIPBlock(base.peers, &base.sizes, a)
		}
		if len(base.peers) == 0 {
			return svc
		}
		return append([]outRule{base}, svc...)
	}
	return append(namedPortRules(r, base, addrs, remote), svc...)
}

// rulePeers translates the rule's ipBlocks and local (native) peers into
// the base rule and returns the remote sets of its other peers; false when
// computing one takes the budget over.
func rulePeers(inv *Inventory, ec *evalCache, policyNS string, r *compiledRule, egress bool, acc *evalAcc) (outRule, []*remoteSet, bool) {
	base := outRule{ports: clonePorts(r.ports)}
	var sets []*remoteSet
	nativeSeen := map[string]bool{}
	for i := range r.peers {
		p := &r.peers[i]
		if p.ipBlock != nil {
			base.peers = append(base.peers, networkingv1.NetworkPolicyPeer{IPBlock: p.ipBlock.DeepCopy()})
			base.sizes = append(base.sizes, p.size)
			continue
		}
		rs := ec.remote(inv, p, policyNS, egress, acc.budget)
		if rs == nil {
			return base, nil, false
		}
		acc.problems.merge(&rs.problems)
		native, nativeKey, size := &p.native, p.nativeKey, p.size
		if rs.native != nil {
			native, nativeKey, size = rs.native, rs.nativeID, len(rs.nativeID)+8
		}
		if rs.hasLocal && !nativeSeen[nativeKey] {
			nativeSeen[nativeKey] = true
			base.peers = append(base.peers, *native.DeepCopy())
			base.sizes = append(base.sizes, size)
		}
		if len(rs.sorted) > 0 || len(rs.gnSelected) > 0 {
			sets = append(sets, rs)
		}
	}
	return base, sets, true
}

// unionRemote is the union of the peers' remote pods, sorted by address.
// Cached sets are shared: read them, never modify them.
func unionRemote(sets []*remoteSet) ([]netip.Prefix, map[netip.Prefix]*renderedAddr) {
	switch len(sets) {
	case 0:
		return nil, nil
	case 1:
		return sets[0].sorted, sets[0].addrs
	}
	remote := map[netip.Prefix]*renderedAddr{}
	for _, rs := range sets {
		for a, ra := range rs.addrs {
			remote[a] = mergeRendered(remote[a], ra)
		}
	}
	addrs := make([]netip.Prefix, 0, len(remote))
	for a := range remote {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Prefix.Compare)
	return addrs, remote
}

// namedPortRules is an egress rule with named ports: local peers (native)
// and ipBlocks keep the rule as written (base); remote pods get their named
// ports expanded to their own numeric ports, grouped by identical resolved
// port lists.
func namedPortRules(r *compiledRule, base outRule, addrs []netip.Prefix, remote map[netip.Prefix]*renderedAddr) []outRule {
	var out []outRule
	if len(base.peers) > 0 {
		out = append(out, base)
	}
	type group struct {
		ports []networkingv1.NetworkPolicyPort
		rule  outRule
	}
	groups := map[string]*group{}
	var keys []string
	for _, a := range addrs {
		ports := remote[a].resolvePorts(r.ports)
		if len(ports) == 0 {
			// Nothing of the rule's ports exists on this pod; an empty
			// port list would mean "all ports", so the pod is left out.
			continue
		}
		k := portsKey(ports)
		g := groups[k]
		if g == nil {
			g = &group{ports: ports}
			groups[k] = g
			keys = append(keys, k)
		}
		g.rule.peers = appendIPBlock(g.rule.peers, &g.rule.sizes, a)
	}
	// Groups are in order of their lowest address (addrs is sorted).
	for _, k := range keys {
		g := groups[k]
		g.rule.ports = g.ports
		out = append(out, g.rule)
	}
	return out
}

func appendIPBlock(peers []networkingv1.NetworkPolicyPeer, sizes *[]int, a netip.Prefix) []networkingv1.NetworkPolicyPeer {
	b := &networkingv1.IPBlock{CIDR: a.Masked().String()}
	*sizes = append(*sizes, ipBlockSize(b))
	return append(peers, networkingv1.NetworkPolicyPeer{IPBlock: b})
}

// resolvePorts expands named ports against a destination pod's container
// ports (matching name and protocol, TCP by default). Numeric entries pass
// through. The result is sorted and deduplicated.
func resolvePorts(ports []networkingv1.NetworkPolicyPort, podPorts []Port) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for _, p := range ports {
		if p.Port == nil || p.Port.Type != intstr.String {
			out = append(out, *p.DeepCopy())
			continue
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		for _, cp := range podPorts {
			cproto := cp.Protocol
			if cproto == "" {
				cproto = corev1.ProtocolTCP
			}
			if cp.Name == p.Port.StrVal && cproto == proto && cp.Port > 0 {
				pr := proto
				port := intstr.FromInt32(cp.Port)
				out = append(out, networkingv1.NetworkPolicyPort{Protocol: &pr, Port: &port})
			}
		}
	}
	slices.SortFunc(out, comparePorts)
	return slices.CompactFunc(out, func(a, b networkingv1.NetworkPolicyPort) bool { return comparePorts(a, b) == 0 })
}

// portsKey is a compact identity of a resolved port list.
func portsKey(ports []networkingv1.NetworkPolicyPort) string {
	var b strings.Builder
	for _, p := range ports {
		if p.Protocol != nil {
			b.WriteString(string(*p.Protocol))
		}
		b.WriteByte(':')
		if p.Port != nil {
			b.WriteString(p.Port.String())
		}
		b.WriteByte('-')
		if p.EndPort != nil {
			b.WriteString(strconv.Itoa(int(*p.EndPort)))
		}
		b.WriteByte(',')
	}
	return b.String()
}

func comparePorts(a, b networkingv1.NetworkPolicyPort) int {
	pa, pb := "TCP", "TCP"
	if a.Protocol != nil {
		pa = string(*a.Protocol)
	}
	if b.Protocol != nil {
		pb = string(*b.Protocol)
	}
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	portKey := func(p *intstr.IntOrString) (int, int32, string) {
		if p == nil {
			return 0, 0, ""
		}
		if p.Type == intstr.String {
			return 2, 0, p.StrVal
		}
		return 1, p.IntVal, ""
	}
	ak, ai, as := portKey(a.Port)
	bk, bi, bs := portKey(b.Port)
	if c := cmp.Compare(ak, bk); c != 0 {
		return c
	}
	if c := cmp.Compare(ai, bi); c != 0 {
		return c
	}
	if c := strings.Compare(as, bs); c != 0 {
		return c
	}
	ea, eb := int32(-1), int32(-1)
	if a.EndPort != nil {
		ea = *a.EndPort
	}
	if b.EndPort != nil {
		eb = *b.EndPort
	}
	return cmp.Compare(ea, eb)
}

func clonePorts(ports []networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort {
	if len(ports) == 0 {
		return nil
	}
	out := make([]networkingv1.NetworkPolicyPort, len(ports))
	for i := range ports {
		out[i] = *ports[i].DeepCopy()
	}
	return out
}

// part is one generated NetworkPolicy under construction.
type part struct {
	ingress []networkingv1.NetworkPolicyIngressRule
	egress  []networkingv1.NetworkPolicyEgressRule
	blocks  int
	size    int
}

const (
	partOverhead = 1024 // metadata, podSelector, policyTypes
	ruleOverhead = 64
)

// pack distributes translated rules over as few parts as the limits allow.
// Rule order is kept; a rule too large for one part is split into several
// rules with the same ports.
func pack(podSelSize int, ingress, egress []outRule) []*part {
	cur := &part{size: partOverhead + podSelSize}
	parts := []*part{cur}
	newPart := func() {
		cur = &part{size: partOverhead + podSelSize}
		parts = append(parts, cur)
	}
	add := func(r outRule, isEgress bool) {
		portsSize := 0
		if len(r.ports) > 0 {
			b, _ := json.Marshal(r.ports)
			portsSize = len(b)
		}
		emit := func(peers []networkingv1.NetworkPolicyPeer) {
			if isEgress {
				cur.egress = append(cur.egress, networkingv1.NetworkPolicyEgressRule{Ports: clonePorts(r.ports), To: peers})
			} else {
				cur.ingress = append(cur.ingress, networkingv1.NetworkPolicyIngressRule{Ports: clonePorts(r.ports), From: peers})
			}
		}
		if r.allPeers {
			if cur.size+ruleOverhead+portsSize > MaxPolicyBytes && (len(cur.ingress)+len(cur.egress)) > 0 {
				newPart()
			}
			cur.size += ruleOverhead + portsSize
			emit(nil)
			return
		}
		i := 0
		for i < len(r.peers) {
			if cur.size+ruleOverhead+portsSize+r.sizes[i] > MaxPolicyBytes || (r.peers[i].IPBlock != nil && cur.blocks >= MaxIPBlocks) {
				if len(cur.ingress)+len(cur.egress) > 0 {
					newPart()
				}
			}
			cur.size += ruleOverhead + portsSize
			j := i
			for j < len(r.peers) {
				isBlock := r.peers[j].IPBlock != nil
				if j > i && (cur.size+r.sizes[j] > MaxPolicyBytes || (isBlock && cur.blocks >= MaxIPBlocks)) {
					break
				}
				cur.size += r.sizes[j]
				if isBlock {
					cur.blocks++
				}
				j++
			}
			emit(r.peers[i:j:j])
			i = j
		}
	}
	for _, r := range ingress {
		add(r, false)
	}
	for _, r := range egress {
		add(r, true)
	}
	return parts
}

// translateRules translates the policy's ingress and egress rules, stopping
// at the first rule that takes the budget over.
func translateRules(inv *Inventory, ec *evalCache, cp *compiledPolicy, acc *evalAcc) (ingress, egress []outRule) {
	for _, dir := range []struct {
		t     networkingv1.PolicyType
		rules []compiledRule
		out   *[]outRule
	}{{networkingv1.PolicyTypeIngress, cp.ingress, &ingress}, {networkingv1.PolicyTypeEgress, cp.egress, &egress}} {
		if !slices.Contains(cp.types, dir.t) {
			continue
		}
		isEgress := dir.t == networkingv1.PolicyTypeEgress
		for i := range dir.rules {
			out := translateRule(inv, ec, cp.ref.Namespace, &dir.rules[i], isEgress, acc)
			if acc.budget != nil && (acc.budget.over != nil || isEgress && dir.rules[i].hasNamed && !acc.budget.chargeRules(out)) {
				return nil, nil
			}
			*dir.out = append(*dir.out, out...)
		}
	}
	return ingress, egress
}

// Evaluate translates one policy for an enforcing cluster and reports what
// happened. A policy unknown to the inventory yields the zero Result.
func Evaluate(enforcing string, inv *Inventory, ref PolicyRef) Result {
	cp := inv.policies[ref]
	if cp == nil {
		return Result{}
	}
	return evaluate(inv, newEvalCache(enforcing), cp)
}

// EvaluateAll evaluates several policies for one enforcing cluster in one
// batch, sharing the work of peers the policies have in common. Use it to
// recompute the policies Affected by a change. Results are in refs order;
// unknown refs yield the zero Result.
func EvaluateAll(enforcing string, inv *Inventory, refs []PolicyRef) []Result {
	ec := newEvalCache(enforcing)
	out := make([]Result, len(refs))
	for i, ref := range refs {
		if cp := inv.policies[ref]; cp != nil {
			out[i] = evaluate(inv, ec, cp)
		}
	}
	return out
}

// Translate returns every NetworkPolicy the enforcing cluster must hold,
// sorted by name. The output is deterministic: identical inventories give
// identical (byte for byte, once serialised) output.
func Translate(enforcing string, inv *Inventory) []networkingv1.NetworkPolicy {
	var out []networkingv1.NetworkPolicy
	for _, res := range EvaluateAll(enforcing, inv, inv.sortedPolicies()) {
		out = append(out, res.NetworkPolicies...)
	}
	slices.SortFunc(out, func(a, b networkingv1.NetworkPolicy) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func evaluate(inv *Inventory, ec *evalCache, cp *compiledPolicy) Result {
	return evaluateIn(inv, ec, cp, nil)
}

// evaluateIn evaluates within a budget (nil: none).
func evaluateIn(inv *Inventory, ec *evalCache, cp *compiledPolicy, bs *budgetState) Result {
	enforcing := ec.enforcing
	var res Result
	if cp.err != nil {
		res.Error = cp.err.Error()
		if !cp.isolateOnly {
			// Where it should be enforced is unknown: nothing to do.
			return res
		}
		if !cp.enforcedAt(inv, enforcing) {
			return res
		}
		res.Selected = true
		if !inv.HasNamespace(enforcing, cp.ref.Namespace) {
			res.SkippedNoNamespace = true
			return res
		}
		podSel, _ := json.Marshal(cp.policy.Spec.PodSelector)
		res.NetworkPolicies = []networkingv1.NetworkPolicy{buildNetworkPolicy(cp, 0, 1, &part{size: len(podSel)})}
		return res
	}
	if !cp.enforcedAt(inv, enforcing) {
		return res
	}
	res.Selected = true
	if !inv.HasNamespace(enforcing, cp.ref.Namespace) {
		res.SkippedNoNamespace = true
		return res
	}
	acc := &evalAcc{seen: map[netip.Prefix]struct{}{}, budget: bs}
	ingress, egress := translateRules(inv, ec, cp, acc)
	if bs != nil && bs.over != nil {
		return overBudget(cp, bs.over)
	}
	res.RemotePeers = len(acc.seen)
	res.Degraded, res.DegradedDetails = acc.problems.summary()
	podSel, _ := json.Marshal(cp.policy.Spec.PodSelector)
	parts := pack(len(podSel), ingress, egress)
	for i, pt := range parts {
		res.NetworkPolicies = append(res.NetworkPolicies, buildNetworkPolicy(cp, i, len(parts), pt))
	}
	return res
}
