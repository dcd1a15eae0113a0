// Package reach keeps a cross-cluster reachability matrix (Kano-style, one
// layer per port class) over plain NetworkPolicies and updates it
// incrementally: a pod change touches only that pod's row and column, a
// policy change only the rows and columns of the pods it selects (before
// and after). On top of the matrix it finds conflicts: half-open flows,
// redundant (shadowed) rules, rules and policies selecting nothing, and
// isolated pods.
//
// Each cluster's NetworkPolicies are evaluated in that cluster only:
// selectors select pods of the same cluster, and pods of other clusters are
// reached through ipBlocks (which is how coastguard renders remote peers).
// Label selectors are evaluated by apimachinery; an inverted label index
// only narrows the candidates. Named ports never match a numeric port class
// here (the verdict command resolves them exactly).
//
// The package is pure: no goroutines, no clock, no I/O. Not safe for
// concurrent use.
package reach

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Pod is a pod of one cluster.
type Pod struct {
	Cluster, Namespace, Name string
	Labels                   map[string]string
	IP                       netip.Addr // invalid: the pod has no IP (not reachable by ipBlock)
}

// Key is "cluster/namespace/name".
func (p *Pod) Key() string { return p.Cluster + "/" + p.Namespace + "/" + p.Name }

// Policy is one NetworkPolicy of a cluster. Owner names what it belongs to
// (for example "mcnp eu-1/web/allow-api" or "networkpolicy us-1/web/deny");
// IngressGroups[i] / EgressGroups[i], when set, name rule i for reports
// (rules with the same group are judged together).
type Policy struct {
	Cluster       string
	Owner         string
	NetworkPolicy *networkingv1.NetworkPolicy
	IngressGroups []string
	EgressGroups  []string
}

// Probe is a port class: traffic to Port over Protocol. Port 0 stands for
// "a port no rule names".
type Probe struct {
	Protocol corev1.Protocol
	Port     int32
}

func (p Probe) String() string {
	if p.Port == 0 {
		return "other/" + string(p.Protocol)
	}
	return fmt.Sprintf("%d/%s", p.Port, p.Protocol)
}

type podState struct {
	Pod
	slot   int
	labels labels.Set
	lkeys  []string // index keys "k=v"
}

type peer struct {
	nsSel  labels.Selector // nil: the policy's namespace
	podSel labels.Selector // nil: all pods
	cidr   *netip.Prefix
	except []netip.Prefix
}

type rule struct {
	pol      *policyState
	egress   bool
	index    int
	group    string
	ports    []networkingv1.NetworkPolicyPort
	allPeers bool
	peers    []peer
	bits     bitset // pods the peers select (all alive when allPeers)
	hasIP    bool   // has an ipBlock peer (may select addresses outside pods)
}

type policyState struct {
	key         string
	owner       string
	cluster, ns string
	podSel      labels.Selector
	ingressIso  bool
	egressIso   bool
	targets     bitset
	rules       []*rule
	err         error
}

type layer struct {
	egress  []bitset // egress[s]: destinations s's egress admits
	inAllow []bitset // inAllow[s]: destinations whose ingress admits s
}

// Engine is the incremental reachability matrix.
type Engine struct {
	pods     []*podState // by slot; nil = free
	byKey    map[string]*podState
	free     []int
	words    int
	alive    bitset
	nsPods   map[string]bitset // "cluster/ns" -> pods
	nsLabels map[string]labels.Set
	index    map[string]bitset // "k=v" -> pods (any cluster)
	byIP     map[netip.Addr][]int

	policies map[string]*policyState
	byNS     map[string][]*policyState // "cluster/ns" -> policies
	ingIso   bitset                    // pods isolated for ingress
	egrIso   bitset

	probes []Probe
	layers []*layer
	bulk   bool // Load: defer isolation and layers to Rebuild
}

// New returns an empty engine.
func New() *Engine {
	return &Engine{byKey: map[string]*podState{}, nsPods: map[string]bitset{}, nsLabels: map[string]labels.Set{},
		index: map[string]bitset{}, byIP: map[netip.Addr][]int{}, policies: map[string]*policyState{},
		byNS: map[string][]*policyState{}}
}

func nsKey(cluster, ns string) string { return cluster + "/" + ns }

// SetNamespace sets a namespace's labels (kubernetes.io/metadata.name is
// added). Policies whose namespaceSelectors may change are re-evaluated.
func (e *Engine) SetNamespace(cluster, name string, l map[string]string) {
	set := labels.Set{}
	for k, v := range l {
		set[k] = v
	}
	set[corev1.LabelMetadataName] = name
	k := nsKey(cluster, name)
	if old, ok := e.nsLabels[k]; ok && labels.Equals(old, set) {
		return
	}
	e.nsLabels[k] = set
	var affected []string
	for key, p := range e.policies {
		if p.cluster != cluster {
			continue
		}
		for _, r := range p.rules {
			if slices.ContainsFunc(r.peers, func(pr peer) bool { return pr.nsSel != nil }) {
				affected = append(affected, key)
				break
			}
		}
	}
	slices.Sort(affected)
	for _, key := range affected {
		e.refreshPolicy(key)
	}
}

func (e *Engine) growTo(slots int) {
	words := (slots + 63) / 64
	if words <= e.words {
		return
	}
	words = max(words, e.words*2, 1)
	e.words = words
	e.alive = e.alive.grow(words)
	e.ingIso = e.ingIso.grow(words)
	e.egrIso = e.egrIso.grow(words)
	for k, b := range e.nsPods {
		e.nsPods[k] = b.grow(words)
	}
	for k, b := range e.index {
		e.index[k] = b.grow(words)
	}
	for _, p := range e.policies {
		p.targets = p.targets.grow(words)
		for _, r := range p.rules {
			r.bits = r.bits.grow(words)
		}
	}
	for _, l := range e.layers {
		for i := range l.egress {
			l.egress[i] = l.egress[i].grow(words)
			l.inAllow[i] = l.inAllow[i].grow(words)
		}
	}
}

// SetPod adds or updates a pod; only its row and column are recomputed.
func (e *Engine) SetPod(p Pod) {
	if old, ok := e.byKey[p.Key()]; ok {
		if labels.Equals(old.labels, labels.Set(p.Labels)) && old.IP == p.IP {
			return
		}
		e.RemovePod(p.Cluster, p.Namespace, p.Name)
	}
	slot := e.allocSlot()
	ps := &podState{Pod: p, slot: slot, labels: labels.Set{}}
	for k, v := range p.Labels {
		ps.labels[k] = v
		ps.lkeys = append(ps.lkeys, k+"="+v)
	}
	e.pods[slot] = ps
	e.byKey[p.Key()] = ps
	e.alive.set(slot)
	nk := nsKey(p.Cluster, p.Namespace)
	if e.nsPods[nk] == nil {
		e.nsPods[nk] = newBitset(e.words * 64)
	}
	e.nsPods[nk].set(slot)
	for _, lk := range ps.lkeys {
		if e.index[lk] == nil {
			e.index[lk] = newBitset(e.words * 64)
		}
		e.index[lk].set(slot)
	}
	if p.IP.IsValid() {
		e.byIP[p.IP] = append(e.byIP[p.IP], slot)
	}
	e.joinPolicies(nk, ps)
	for qi := range e.layers {
		e.computeRow(qi, slot)
		e.computeColumn(qi, slot)
	}
}

// allocSlot returns a free pod slot, growing every matrix by one when
// there is none.
func (e *Engine) allocSlot() int {
	if n := len(e.free); n > 0 {
		slot := e.free[n-1]
		e.free = e.free[:n-1]
		return slot
	}
	slot := len(e.pods)
	e.pods = append(e.pods, nil)
	e.growTo(len(e.pods))
	for _, l := range e.layers {
		l.egress = append(l.egress, newBitset(e.words*64))
		l.inAllow = append(l.inAllow, newBitset(e.words*64))
	}
	return slot
}

// joinPolicies records a new pod in the targets of the policies of its
// namespace nk (and the isolation sets) and in the peers of every rule.
func (e *Engine) joinPolicies(nk string, ps *podState) {
	for _, pol := range e.byNS[nk] {
		if pol.err == nil && pol.podSel.Matches(ps.labels) {
			pol.targets.set(ps.slot)
			if pol.ingressIso {
				e.ingIso.set(ps.slot)
			}
			if pol.egressIso {
				e.egrIso.set(ps.slot)
			}
		}
	}
	for _, pol := range e.policies {
		for _, r := range pol.rules {
			if e.ruleSelects(r, ps) {
				r.bits.set(ps.slot)
			}
		}
	}
}

// RemovePod removes a pod; its row and column are cleared.
func (e *Engine) RemovePod(cluster, namespace, name string) {
	ps, ok := e.byKey[cluster+"/"+namespace+"/"+name]
	if !ok {
		return
	}
	s := ps.slot
	delete(e.byKey, ps.Key())
	e.pods[s] = nil
	e.free = append(e.free, s)
	e.alive.clear(s)
	e.ingIso.clear(s)
	e.egrIso.clear(s)
	e.nsPods[nsKey(cluster, namespace)].clear(s)
	for _, lk := range ps.lkeys {
		e.index[lk].clear(s)
	}
	if ps.IP.IsValid() {
		e.byIP[ps.IP] = slices.DeleteFunc(e.byIP[ps.IP], func(x int) bool { return x == s })
		if len(e.byIP[ps.IP]) == 0 {
			delete(e.byIP, ps.IP)
		}
	}
	for _, pol := range e.byNS[nsKey(cluster, namespace)] {
		pol.targets.clear(s)
	}
	for _, pol := range e.policies {
		for _, r := range pol.rules {
			r.bits.clear(s)
		}
	}
	for _, l := range e.layers {
		l.egress[s].reset()
		l.inAllow[s].reset()
		e.alive.each(func(x int) {
			l.egress[x].clear(s)
			l.inAllow[x].clear(s)
		})
	}
}

func selectorOf(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}

func compilePeers(np []networkingv1.NetworkPolicyPeer) ([]peer, error) {
	var out []peer
	for _, p := range np {
		var pr peer
		var err error
		if p.IPBlock != nil {
			c, err := netip.ParsePrefix(p.IPBlock.CIDR)
			if err != nil {
				return nil, fmt.Errorf("ipBlock %q: %w", p.IPBlock.CIDR, err)
			}
			c = c.Masked()
			pr.cidr = &c
			for _, ex := range p.IPBlock.Except {
				x, err := netip.ParsePrefix(ex)
				if err != nil {
					return nil, fmt.Errorf("ipBlock except %q: %w", ex, err)
				}
				pr.except = append(pr.except, x.Masked())
			}
			out = append(out, pr)
			continue
		}
		if pr.nsSel, err = selectorOf(p.NamespaceSelector); err != nil {
			return nil, err
		}
		if pr.podSel, err = selectorOf(p.PodSelector); err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	return out, nil
}

// SetPolicy adds or replaces the NetworkPolicy stored under key; the rows
// and columns of the pods it selects before and after are recomputed.
func (e *Engine) SetPolicy(key string, p Policy) error {
	np := p.NetworkPolicy
	ps := &policyState{key: key, owner: p.Owner, cluster: p.Cluster, ns: np.Namespace,
		targets: newBitset(e.words * 64)}
	if ps.owner == "" {
		ps.owner = "networkpolicy " + p.Cluster + "/" + np.Namespace + "/" + np.Name
	}
	types := np.Spec.PolicyTypes
	if len(types) == 0 {
		types = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) > 0 {
			types = append(types, networkingv1.PolicyTypeEgress)
		}
	}
	ps.ingressIso = slices.Contains(types, networkingv1.PolicyTypeIngress)
	ps.egressIso = slices.Contains(types, networkingv1.PolicyTypeEgress)
	var err error
	if ps.podSel, err = metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil {
		ps.err = err
	}
	name := p.Cluster + "/" + np.Namespace + "/" + np.Name
	addRule := func(egress bool, i int, ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer, groups []string) {
		r := &rule{pol: ps, egress: egress, index: i, ports: ports, allPeers: len(peers) == 0, bits: newBitset(e.words * 64)}
		dir := "ingress"
		if egress {
			dir = "egress"
		}
		r.group = fmt.Sprintf("%s %s[%d]", name, dir, i)
		if i < len(groups) && groups[i] != "" {
			r.group = groups[i]
		}
		if r.peers, err = compilePeers(peers); err != nil && ps.err == nil {
			ps.err = err
		}
		for _, pr := range r.peers {
			r.hasIP = r.hasIP || pr.cidr != nil
		}
		ps.rules = append(ps.rules, r)
	}
	if ps.ingressIso {
		for i, r := range np.Spec.Ingress {
			addRule(false, i, r.Ports, r.From, p.IngressGroups)
		}
	}
	if ps.egressIso {
		for i, r := range np.Spec.Egress {
			addRule(true, i, r.Ports, r.To, p.EgressGroups)
		}
	}
	if ps.err != nil {
		// fail closed: an unusable policy selects nothing and allows nothing
		ps.rules = nil
	}
	e.install(ps)
	return ps.err
}

// RemovePolicy removes the policy stored under key.
func (e *Engine) RemovePolicy(key string) {
	old := e.policies[key]
	if old == nil {
		return
	}
	nk := nsKey(old.cluster, old.ns)
	e.byNS[nk] = slices.DeleteFunc(e.byNS[nk], func(x *policyState) bool { return x == old })
	delete(e.policies, key)
	e.retarget(old.targets)
}

func (e *Engine) refreshPolicy(key string) {
	ps := e.policies[key]
	for _, r := range ps.rules {
		e.fillRule(r)
	}
	e.retarget(ps.targets)
}

func (e *Engine) install(ps *policyState) {
	affected := newBitset(e.words * 64)
	if old := e.policies[ps.key]; old != nil {
		affected.or(old.targets)
		nk := nsKey(old.cluster, old.ns)
		e.byNS[nk] = slices.DeleteFunc(e.byNS[nk], func(x *policyState) bool { return x == old })
	}
	e.policies[ps.key] = ps
	nk := nsKey(ps.cluster, ps.ns)
	e.byNS[nk] = append(e.byNS[nk], ps)
	if ps.err == nil {
		if scope := e.nsPods[nk]; scope != nil {
			ps.targets.copyFrom(e.matchPods(ps.podSel, scope))
		}
	}
	for _, r := range ps.rules {
		e.fillRule(r)
	}
	affected.or(ps.targets)
	newProbe := false
	for _, r := range ps.rules {
		for _, q := range probesOf(r.ports) {
			if !slices.Contains(e.probes, q) {
				e.probes = append(e.probes, q)
				e.layers = append(e.layers, nil)
				newProbe = true
			}
		}
	}
	if len(e.probes) == 0 {
		e.probes = []Probe{{Protocol: corev1.ProtocolTCP}}
		e.layers = []*layer{nil}
		newProbe = true
	}
	if e.bulk {
		return
	}
	e.retarget(affected)
	if newProbe {
		for qi, l := range e.layers {
			if l == nil {
				e.buildLayer(qi)
			}
		}
	}
}

// retarget recomputes the isolation bits, egress rows and ingress columns
// of the pods in set.
func (e *Engine) retarget(set bitset) {
	if e.bulk {
		return
	}
	set.each(func(t int) {
		if e.pods[t] == nil {
			return
		}
		ing, egr := false, false
		for _, p := range e.byNS[nsKey(e.pods[t].Cluster, e.pods[t].Namespace)] {
			if p.targets.has(t) {
				ing = ing || p.ingressIso
				egr = egr || p.egressIso
			}
		}
		if ing {
			e.ingIso.set(t)
		} else {
			e.ingIso.clear(t)
		}
		if egr {
			e.egrIso.set(t)
		} else {
			e.egrIso.clear(t)
		}
	})
	for qi, l := range e.layers {
		if l == nil {
			continue
		}
		set.each(func(t int) {
			if e.pods[t] == nil {
				return
			}
			e.computeEgressRow(qi, t)
			e.alive.each(func(s int) { l.inAllow[s].clear(t) })
			e.computeIngressColumn(qi, t)
		})
	}
}

func (e *Engine) fillRule(r *rule) {
	r.bits.reset()
	if r.pol.err != nil {
		return
	}
	if r.allPeers {
		r.bits.copyFrom(e.alive)
		return
	}
	for _, pr := range r.peers {
		switch {
		case pr.cidr != nil:
			if pr.cidr.IsSingleIP() {
				for _, s := range e.byIP[pr.cidr.Addr()] {
					if !excluded(pr.except, pr.cidr.Addr()) {
						r.bits.set(s)
					}
				}
				continue
			}
			e.alive.each(func(s int) {
				if ip := e.pods[s].IP; ip.IsValid() && pr.cidr.Contains(ip) && !excluded(pr.except, ip) {
					r.bits.set(s)
				}
			})
		case pr.nsSel == nil:
			if scope := e.nsPods[nsKey(r.pol.cluster, r.pol.ns)]; scope != nil {
				r.bits.or(e.matchPods(pr.podSel, scope))
			}
		default:
			prefix := r.pol.cluster + "/"
			for k, nl := range e.nsLabels {
				if strings.HasPrefix(k, prefix) && pr.nsSel.Matches(nl) {
					if scope := e.nsPods[k]; scope != nil {
						r.bits.or(e.matchPods(pr.podSel, scope))
					}
				}
			}
		}
	}
}

func excluded(ex []netip.Prefix, ip netip.Addr) bool {
	for _, x := range ex {
		if x.Contains(ip) {
			return true
		}
	}
	return false
}

// matchPods returns the pods of scope that sel selects (nil sel: all). The
// label index narrows the candidates to the pods carrying one of the values
// of an equality requirement; apimachinery decides.
func (e *Engine) matchPods(sel labels.Selector, scope bitset) bitset {
	out := newBitset(e.words * 64)
	if sel == nil || sel.Empty() {
		out.copyFrom(scope)
		out.and(e.alive)
		return out
	}
	cand := newBitset(e.words * 64)
	narrowed := false
	if reqs, ok := sel.Requirements(); ok {
		for _, req := range reqs {
			switch req.Operator() {
			case selection.Equals, selection.DoubleEquals, selection.In:
				for _, v := range req.Values().UnsortedList() {
					if b := e.index[req.Key()+"="+v]; b != nil {
						cand.or(b)
					}
				}
				narrowed = true
			}
			if narrowed {
				break
			}
		}
	}
	if !narrowed {
		cand.copyFrom(e.alive)
	}
	cand.and(scope)
	cand.each(func(s int) {
		if sel.Matches(e.pods[s].labels) {
			out.set(s)
		}
	})
	return out
}

// ruleSelects reports whether r's peers select the single pod ps.
func (e *Engine) ruleSelects(r *rule, ps *podState) bool {
	if r.pol.err != nil {
		return false
	}
	if r.allPeers {
		return true
	}
	for _, pr := range r.peers {
		switch {
		case pr.cidr != nil:
			if ps.IP.IsValid() && pr.cidr.Contains(ps.IP) && !excluded(pr.except, ps.IP) {
				return true
			}
		case ps.Cluster != r.pol.cluster:
		case pr.nsSel == nil:
			if ps.Namespace == r.pol.ns && (pr.podSel == nil || pr.podSel.Matches(ps.labels)) {
				return true
			}
		default:
			nl, ok := e.nsLabels[nsKey(ps.Cluster, ps.Namespace)]
			if ok && pr.nsSel.Matches(nl) && (pr.podSel == nil || pr.podSel.Matches(ps.labels)) {
				return true
			}
		}
	}
	return false
}

func protoOf(p *corev1.Protocol) corev1.Protocol {
	if p == nil || *p == "" {
		return corev1.ProtocolTCP
	}
	return *p
}

// probesOf lists the port classes a rule's ports name.
func probesOf(ports []networkingv1.NetworkPolicyPort) []Probe {
	var out []Probe
	for _, p := range ports {
		q := Probe{Protocol: protoOf(p.Protocol)}
		if p.Port != nil && p.Port.Type == 0 {
			q.Port = p.Port.IntVal
		}
		out = append(out, q)
		if q.Port != 0 {
			out = append(out, Probe{Protocol: q.Protocol})
		}
	}
	return out
}

// matches reports whether a rule's ports admit probe q.
func (r *rule) matches(q Probe) bool {
	if len(r.ports) == 0 {
		return true
	}
	for _, p := range r.ports {
		if protoOf(p.Protocol) != q.Protocol {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type != 0: // named: resolved per pod, not by port class
		case q.Port == 0:
		case p.EndPort != nil:
			if q.Port >= p.Port.IntVal && q.Port <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == q.Port:
			return true
		}
	}
	return false
}

// buildLayer computes one port class from scratch.
func (e *Engine) buildLayer(qi int) {
	l := &layer{egress: make([]bitset, len(e.pods)), inAllow: make([]bitset, len(e.pods))}
	for i := range e.pods {
		l.egress[i], l.inAllow[i] = newBitset(e.words*64), newBitset(e.words*64)
	}
	e.layers[qi] = l
	q := e.probes[qi]
	notIngIso := e.alive.clone()
	notIngIso.andNot(e.ingIso)
	e.alive.each(func(s int) {
		if !e.egrIso.has(s) {
			l.egress[s].copyFrom(e.alive)
		}
		l.inAllow[s].copyFrom(notIngIso)
	})
	for _, p := range e.policies {
		for _, r := range p.rules {
			if !r.matches(q) {
				continue
			}
			if r.egress {
				p.targets.each(func(s int) { l.egress[s].or(r.bits) })
			} else {
				r.bits.each(func(s int) { l.inAllow[s].or(p.targets) })
			}
		}
	}
}

func (b bitset) clone() bitset { return append(bitset(nil), b...) }

// computeRow recomputes pod s's egress row and inAllow row in layer qi.
func (e *Engine) computeRow(qi, s int) {
	e.computeEgressRow(qi, s)
	l, q := e.layers[qi], e.probes[qi]
	row := l.inAllow[s]
	row.copyFrom(e.alive)
	row.andNot(e.ingIso)
	for _, p := range e.policies {
		for _, r := range p.rules {
			if !r.egress && r.bits.has(s) && r.matches(q) {
				row.or(p.targets)
			}
		}
	}
}

func (e *Engine) computeEgressRow(qi, s int) {
	l, q := e.layers[qi], e.probes[qi]
	row := l.egress[s]
	row.reset()
	if !e.egrIso.has(s) {
		row.copyFrom(e.alive)
		return
	}
	ps := e.pods[s]
	for _, p := range e.byNS[nsKey(ps.Cluster, ps.Namespace)] {
		if !p.targets.has(s) {
			continue
		}
		for _, r := range p.rules {
			if r.egress && r.matches(q) {
				row.or(r.bits)
			}
		}
	}
}

// computeColumn sets pod t's bit in every egress and inAllow row of layer
// qi (t is new: its bits are clear everywhere).
func (e *Engine) computeColumn(qi, t int) {
	l, q := e.layers[qi], e.probes[qi]
	e.alive.each(func(s int) {
		if !e.egrIso.has(s) {
			l.egress[s].set(t)
		}
	})
	for _, p := range e.policies {
		for _, r := range p.rules {
			if r.egress && r.bits.has(t) && r.matches(q) {
				p.targets.each(func(s int) { l.egress[s].set(t) })
			}
		}
	}
	e.computeIngressColumn(qi, t)
}

// computeIngressColumn sets t's bit in inAllow[s] for every s t's ingress
// admits (the caller cleared the column).
func (e *Engine) computeIngressColumn(qi, t int) {
	l, q := e.layers[qi], e.probes[qi]
	if !e.ingIso.has(t) {
		e.alive.each(func(s int) { l.inAllow[s].set(t) })
		return
	}
	ps := e.pods[t]
	for _, p := range e.byNS[nsKey(ps.Cluster, ps.Namespace)] {
		if !p.targets.has(t) {
			continue
		}
		for _, r := range p.rules {
			if !r.egress && r.matches(q) {
				r.bits.each(func(s int) { l.inAllow[s].set(t) })
			}
		}
	}
}
