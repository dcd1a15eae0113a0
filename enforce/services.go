package enforce

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Exported Services (docs/SEMANTICS.md "Services").
//
// A pod that connects to another cluster's exported Service by its
// ClusterIP sends packets whose destination is that ClusterIP: kube-proxy
// of the exporting cluster picks a backend only after the packet crossed
// the cable. An egress rule that admits the backends as pods therefore
// also needs the ClusterIP. The exactness rule: the address is admitted on
// a service port only when the rule admits EVERY backend of the Service
// on that port's target port; if it admits only some, no address rule is
// generated (the load balancer could pick a denied backend) and the policy
// is Degraded with ReasonServicePartiallyAdmitted naming the Service.

// Degraded reasons of the service address rules.
const (
	// ReasonServicePartiallyAdmitted: an egress rule admits some but not
	// all backends of an exported Service; its address is not admitted.
	ReasonServicePartiallyAdmitted = "ServiceBackendsPartiallyAdmitted"
	// ReasonServiceIPNotOwned: an exported Service's address is not inside
	// its cluster's service CIDRs as this cluster knows them (or they are
	// unknown, or it lies in this cluster's own ranges): not rendered.
	ReasonServiceIPNotOwned = "ServiceIPOutsideServiceCIDR"
	// reasonServiceGlobalIPNotOwned: a Globalnet cluster's exported
	// Service claims a global ingress IP outside that cluster's global
	// CIDRs as this cluster knows them (or they are unknown, or it lies in
	// this cluster's own ranges): not rendered.
	reasonServiceGlobalIPNotOwned = "ServiceGlobalIPOutsideGlobalCIDR"
	// reasonServiceNoGlobalIP: a Globalnet cluster's exported Service
	// whose backends an egress rule admits has no global ingress IP (yet):
	// clients cannot reach it across the cable, nothing is rendered.
	reasonServiceNoGlobalIP = "ServiceGlobalIPNotAllocated"
)

// ServicePort is a port of an exported Service.
type ServicePort struct {
	Name string
	Port int32
	// TargetPort is the numeric target port; 0 when TargetPortName names
	// a container port of the backends.
	TargetPort     int32
	TargetPortName string
	Protocol       corev1.Protocol // TCP when empty
}

// Service is an exported Service of one cluster.
type Service struct {
	Namespace  string
	Name       string
	ClusterIPs []string
	Ports      []ServicePort
	// Selector picks the backends among the pods of Namespace; a Service
	// without a selector has no backends coastguard can see.
	Selector map[string]string
	Headless bool
	// GlobalIPs are the Service's Globalnet global ingress IPs: how
	// clients of other clusters reach it when its cluster has Globalnet.
	GlobalIPs []string
	// PublishNotReady: spec.publishNotReadyAddresses, every selected pod
	// is an endpoint whether it is ready or not.
	PublishNotReady bool
}

type serviceState struct {
	svc   Service
	sel   labels.Selector // nil: no selector
	addrs []netip.Prefix  // parsed cluster IPs
	// global are the parsed global ingress IPs (Globalnet).
	global []netip.Prefix
}

// serves reports whether kube-proxy of the Service's cluster may send the
// Service's traffic to pod: it is ready, or the Service publishes
// not-ready addresses.
func (st *serviceState) serves(pod *podEntry) bool {
	return st.svc.PublishNotReady || pod.ready()
}

// SetService adds or replaces an exported Service of a cluster.
func (inv *Inventory) SetService(cluster string, s Service) {
	c := inv.cluster(cluster, true)
	if c.services == nil {
		c.services = map[string]map[string]*serviceState{}
	}
	byName := c.services[s.Namespace]
	if byName == nil {
		byName = map[string]*serviceState{}
		c.services[s.Namespace] = byName
	}
	st := &serviceState{svc: s}
	st.svc.ClusterIPs = slices.Clone(s.ClusterIPs)
	st.svc.Ports = slices.Clone(s.Ports)
	st.svc.Selector = maps.Clone(s.Selector)
	st.svc.GlobalIPs = slices.Clone(s.GlobalIPs)
	if len(s.Selector) > 0 {
		st.sel = labels.SelectorFromSet(labels.Set(st.svc.Selector))
	}
	if !s.Headless {
		st.addrs = parseAddrs(s.ClusterIPs)
		st.global = hostAddrs(s.GlobalIPs)
	}
	byName[s.Name] = st
}

// RemoveService removes an exported Service.
func (inv *Inventory) RemoveService(cluster, namespace, name string) {
	c := inv.cluster(cluster, false)
	if c == nil || c.services[namespace] == nil {
		return
	}
	delete(c.services[namespace], name)
	if len(c.services[namespace]) == 0 {
		delete(c.services, namespace)
	}
}

// servicesSelectAny reports whether some exported Service of cluster/namespace
// selects one of the label sets (nil sets: conservatively true when the
// namespace has a Service).
func (inv *Inventory) servicesSelectAny(cluster, namespace string, sets []labels.Labels) bool {
	c := inv.clusters[cluster]
	if c == nil {
		return false
	}
	for _, st := range c.services[namespace] {
		if st.sel != nil && anyMatches(st.sel, sets) {
			return true
		}
	}
	return false
}

// backendPort returns the port a backend pod serves a service port on,
// false when the pod does not serve it (a named targetPort it lacks).
func backendPort(sp ServicePort, pod *podEntry) (int32, bool) {
	if sp.TargetPortName == "" {
		return sp.TargetPort, sp.TargetPort > 0
	}
	proto := protoOr(sp.Protocol)
	for _, p := range pod.ports() {
		if p.Name == sp.TargetPortName && protoOr(p.Protocol) == proto && p.Port > 0 {
			return p.Port, true
		}
	}
	return 0, false
}

func protoOr(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// portAdmits reports whether a rule's port list admits (proto, port) on a
// destination pod with the given container ports (named rule ports are
// resolved against them, as the destination's CNI would).
func portAdmits(ports []networkingv1.NetworkPolicyPort, proto corev1.Protocol, port int32, podPorts []Port) bool {
	return PortAdmits(ports, proto, port, func(name string) bool {
		for _, cp := range podPorts {
			if cp.Name == name && protoOr(cp.Protocol) == proto && cp.Port == port {
				return true
			}
		}
		return false
	})
}

// PortAdmits reports whether a NetworkPolicy rule's port list admits
// (proto, port); named reports whether a named rule port is the
// destination's name for that port. No ports admit every port.
func PortAdmits(ports []networkingv1.NetworkPolicyPort, proto corev1.Protocol, port int32, named func(name string) bool) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if named(p.Port.StrVal) {
				return true
			}
		case p.EndPort != nil:
			if port >= p.Port.IntVal && port <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == port:
			return true
		}
	}
	return false
}

// admittedPods returns, by "cluster\x00namespace", the remote pods a rule
// renders by their own IPs (every address rendered for that pod), for the
// service exactness check. Shared (Globalnet) addresses never count.
func admittedPods(remote map[netip.Prefix]*renderedAddr, addrs []netip.Prefix) map[string]map[*podEntry]bool {
	out := map[string]map[*podEntry]bool{}
	for _, a := range addrs {
		ra := remote[a]
		if ra.shared || len(ra.pods) != 1 {
			continue
		}
		pod := ra.pods[0]
		all := true
		for pa := range pod.addrs() {
			if r := remote[netip.PrefixFrom(pa, pa.BitLen())]; r == nil || r.shared || r.pods[0] != pod {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		k := pod.ns().cluster.id + "\x00" + pod.ns().name
		if out[k] == nil {
			out[k] = map[*podEntry]bool{}
		}
		out[k][pod] = true
	}
	return out
}

// admittedBackends returns, by "cluster\x00namespace", the remote pods an
// egress rule admits for the exactness rule: those rendered by their own
// IPs (admittedPods) and the selected pods of Globalnet clusters, whose
// Services are reached by their global ingress IPs (remoteSet.gnSelected).
func admittedBackends(sets []*remoteSet, remote map[netip.Prefix]*renderedAddr, addrs []netip.Prefix) map[string]map[*podEntry]bool {
	out := admittedPods(remote, addrs)
	for _, rs := range sets {
		for k, pods := range rs.gnSelected {
			if out[k] == nil {
				out[k] = map[*podEntry]bool{}
			}
			for p := range pods {
				out[k][p] = true
			}
		}
	}
	return out
}

// serviceDecision is what the exactness rule decides for one Service and
// one egress rule: the service ports whose address is admitted, and
// whether some port was admitted only for some backends.
type serviceDecision struct {
	ports   []networkingv1.NetworkPolicyPort
	partial bool
}

// backends returns the pods of ns that st selects, cached for the
// evaluation batch (the inventory does not change during it).
func (ec *evalCache) backends(st *serviceState, ns *namespaceState) []*podEntry {
	if b, ok := ec.svcBackends[st]; ok {
		return b
	}
	var out []*podEntry
	if ns != nil {
		for pod := range ns.pods.all() {
			if st.sel.Matches(pod.labels) {
				out = append(out, pod)
			}
		}
	}
	if ec.svcBackends == nil {
		ec.svcBackends = map[*serviceState][]*podEntry{}
	}
	ec.svcBackends[st] = out
	return out
}

// decideService applies the exactness rule to one Service, whose
// backends are given, for one egress rule. Only backends the Service's
// load balancer may pick count (st.serves: ready, or published while not
// ready): a not-ready backend neither blocks the address nor admits it.
func decideService(st *serviceState, backends []*podEntry, admitted map[*podEntry]bool, rulePorts []networkingv1.NetworkPolicyPort) serviceDecision {
	var d serviceDecision
	for _, sp := range st.svc.Ports {
		proto := protoOr(sp.Protocol)
		n, ok := 0, 0
		for _, pod := range backends {
			target, serves := backendPort(sp, pod)
			if !serves || !st.serves(pod) {
				continue
			}
			n++
			if pod.eligible() && admitted[pod] && portAdmits(rulePorts, proto, target, pod.ports()) {
				ok++
			}
		}
		switch {
		case ok == 0:
		case ok < n:
			d.partial = true
		default:
			pr := proto
			port := intstr.FromInt32(sp.Port)
			d.ports = append(d.ports, networkingv1.NetworkPolicyPort{Protocol: &pr, Port: &port})
		}
	}
	return d
}

// serviceGroups collects the address rules of one egress rule, grouped
// by identical port lists in order of first appearance.
type serviceGroups struct {
	groups map[string]*outRule
	order  []string
}

func (g *serviceGroups) add(ports []networkingv1.NetworkPolicyPort, a netip.Prefix) {
	pk := portsKey(ports)
	r := g.groups[pk]
	if r == nil {
		if g.groups == nil {
			g.groups = map[string]*outRule{}
		}
		r = &outRule{ports: ports}
		g.groups[pk] = r
		g.order = append(g.order, pk)
	}
	r.peers = appendIPBlock(r.peers, &r.sizes, a)
}

func (g *serviceGroups) rules() []outRule {
	out := make([]outRule, 0, len(g.order))
	for _, pk := range g.order {
		out = append(out, *g.groups[pk])
	}
	return out
}

// serviceRules returns the address rules of one egress rule: for every
// exported Service of a remote cluster that backs some admitted pod, its
// addresses on the service ports whose backends the rule admits
// entirely (see the exactness rule above). admitted holds, by
// "cluster\x00namespace", the pods the rule admits (admittedBackends).
// Problems are recorded in acc.
func serviceRules(inv *Inventory, ec *evalCache, r *compiledRule, admitted map[string]map[*podEntry]bool, acc *evalAcc) []outRule {
	if len(admitted) == 0 {
		return nil
	}
	var g serviceGroups
	for _, k := range slices.Sorted(maps.Keys(admitted)) {
		cid, nsName, _ := strings.Cut(k, "\x00")
		c := inv.clusters[cid]
		if c == nil || c.services[nsName] == nil {
			continue
		}
		ns := c.namespaces[nsName]
		for _, name := range slices.Sorted(maps.Keys(c.services[nsName])) {
			st := c.services[nsName][name]
			if st.sel == nil || st.svc.Headless || !selectsSome(st.sel, admitted[k]) {
				continue
			}
			id := cid + "/" + nsName + "/" + name
			d := decideService(st, ec.backends(st, ns), admitted[k], r.ports)
			if d.partial {
				acc.problems.add(ReasonServicePartiallyAdmitted, id)
			}
			if len(d.ports) == 0 {
				continue
			}
			for _, a := range ec.serviceAddrs(inv, cid, st, id, acc) {
				g.add(d.ports, a)
				acc.seen[a] = struct{}{}
			}
		}
	}
	return g.rules()
}

// serviceAddrs returns the addresses under which clients of the enforcing
// cluster reach Service st of cluster cid, each checked for ownership:
// its ClusterIPs, or its global ingress IPs when cid has Globalnet (its
// gateway translates them to the Service; its ClusterIPs are not routable
// across the cable there). Problems are recorded in acc under id.
func (ec *evalCache) serviceAddrs(inv *Inventory, cid string, st *serviceState, id string, acc *evalAcc) []netip.Prefix {
	owner := inv.networksOf(cid)
	check, addrs, reason := CheckServiceAddr, st.addrs, ReasonServiceIPNotOwned
	if ec.view(inv, cid).globalnet {
		check, addrs, reason = checkServiceGlobalAddr, st.global, reasonServiceGlobalIPNotOwned
		if len(addrs) == 0 {
			acc.problems.add(reasonServiceNoGlobalIP, id)
			return nil
		}
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if check(ec.local(inv), owner, a) != DropNone {
			acc.problems.add(reason, id)
			continue
		}
		out = append(out, a)
	}
	return out
}

func selectsSome(sel labels.Selector, pods map[*podEntry]bool) bool {
	for p := range pods {
		if sel.Matches(p.labels) {
			return true
		}
	}
	return false
}

// CheckServiceAddr decides whether the address p of an exported Service
// of the cluster owner may become an ipBlock in the enforcing cluster
// (local): the owner's service CIDRs, as this cluster knows them
// independently of gossip, must be known and contain p; p must not be
// reserved nor overlap the enforcing cluster's own ranges.
func CheckServiceAddr(local, owner *ClusterNetworks, p netip.Prefix) DropReason {
	if owner == nil || len(owner.ServiceCIDRs) == 0 {
		return DropCIDRsUnknown
	}
	o := ClusterNetworks{PodCIDRs: owner.ServiceCIDRs}
	return CheckRemoteAddr(local, &o, false, p)
}

// checkServiceGlobalAddr decides whether the global ingress IP p of an
// exported Service of the Globalnet cluster owner may become an ipBlock in
// the enforcing cluster (local): the owner's global CIDRs, as this
// cluster knows them independently of gossip, must be known and contain
// p; p must not be reserved nor overlap the enforcing cluster's own
// ranges (the rules of CheckRemoteAddr for a global address).
func checkServiceGlobalAddr(local, owner *ClusterNetworks, p netip.Prefix) DropReason {
	if owner == nil || len(owner.GlobalCIDRs) == 0 {
		return DropCIDRsUnknown
	}
	return CheckRemoteAddr(local, owner, true, p)
}

// hostAddrs parses single IP addresses (a Service address is one host);
// prefixes and invalid entries are skipped, so a claimed range can never
// widen an address rule.
func hostAddrs(in []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range in {
		if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap().WithZone("")
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}
