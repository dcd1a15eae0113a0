package enforce

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
)

// Degraded reasons carried in Result.Degraded (and from there into the
// MCNP's Degraded condition). When several apply, the most severe one is
// the reason and Result.DegradedDetails lists them all.
const (
	// ReasonGlobalnetNoEgressIPs: a Globalnet cluster's selected pods have
	// no allocated global address usable in that direction; they were left
	// out (never widened).
	ReasonGlobalnetNoEgressIPs = "GlobalnetNoEgressIPs"
	// ReasonGlobalnetPeersDropped: --globalnet-policy=drop left out pods
	// that only have coarse (cluster-wide) global addresses.
	ReasonGlobalnetPeersDropped = "GlobalnetPeersDropped"
	// ReasonOverlappingPodCIDRs: a remote peer's cluster has no Globalnet
	// and its pod CIDRs overlap another such cluster's: a /32 may name a
	// different pod there.
	ReasonOverlappingPodCIDRs = "OverlappingPodCIDRs"
	// ReasonPodIPOutsideClusterCIDR: a remote peer's address lies outside
	// its cluster's pod CIDRs (global CIDRs with Globalnet) as this cluster
	// knows them independently of gossip; it was left out (ownership.go).
	ReasonPodIPOutsideClusterCIDR = "PodIPOutsideClusterCIDR"
	// ReasonGlobalnetCoarseIdentity: some remote peers are rendered by
	// addresses every pod of their cluster shares (the cluster-wide
	// egress IPs, or the global CIDR for egress rules).
	ReasonGlobalnetCoarseIdentity = "GlobalnetCoarseIdentity"
)

// GlobalnetPolicy says what to do with remote pods of Globalnet clusters
// whose only usable global addresses are shared by the whole cluster.
type GlobalnetPolicy uint8

const (
	// GlobalnetCoarse renders the shared addresses and reports
	// GlobalnetCoarseIdentity (the default).
	GlobalnetCoarse GlobalnetPolicy = iota
	// GlobalnetDrop leaves such pods out (fail closed) and reports
	// GlobalnetPeersDropped.
	GlobalnetDrop
)

// ParseGlobalnetPolicy parses "coarse" (or "") and "drop".
func ParseGlobalnetPolicy(s string) (GlobalnetPolicy, error) {
	switch s {
	case "", "coarse":
		return GlobalnetCoarse, nil
	case "drop":
		return GlobalnetDrop, nil
	}
	return GlobalnetCoarse, fmt.Errorf("globalnet policy %q: must be coarse or drop", s)
}

func (p GlobalnetPolicy) String() string {
	if p == GlobalnetDrop {
		return "drop"
	}
	return "coarse"
}

// SetGlobalnetPolicy sets how coarse Globalnet peers are rendered. It
// changes the output of every policy: recompute all of them afterwards.
func (inv *Inventory) SetGlobalnetPolicy(p GlobalnetPolicy) { inv.globalnet = p }

// GlobalnetPolicy returns the policy set by SetGlobalnetPolicy.
func (inv *Inventory) GlobalnetPolicy() GlobalnetPolicy { return inv.globalnet }

// clusterView is how one cluster's pods are addressed, derived once per
// evaluation batch.
type clusterView struct {
	globalnet     bool
	podCIDRs      []netip.Prefix
	globalCIDRs   []netip.Prefix
	clusterEgress []netip.Prefix
	nsEgress      map[string][]netip.Prefix
	// overlapsWith lists the other non-Globalnet clusters whose pod CIDRs
	// overlap this one's (only set when this cluster has no Globalnet).
	overlapsWith []string
	// trusted are the cluster's networks as known independently of
	// gossip (nil: unknown); every rendered address must lie inside them.
	trusted *ClusterNetworks
}

// parseAddrs parses IPs ("10.0.0.1" -> /32) and CIDRs; invalid entries are
// skipped (the inventory writer validated them; never panic on bad input).
func parseAddrs(in []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range in {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap().WithZone("")
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}

func overlapping(a, b []netip.Prefix) bool {
	for _, x := range a {
		for _, y := range b {
			if x.Overlaps(y) {
				return true
			}
		}
	}
	return false
}

func newClusterViews(inv *Inventory) map[string]*clusterView {
	views := make(map[string]*clusterView, len(inv.clusters))
	for id, cs := range inv.clusters {
		c := &cs.cluster
		v := &clusterView{
			globalnet:     c.Globalnet,
			podCIDRs:      parseAddrs(c.PodCIDRs),
			globalCIDRs:   parseAddrs(c.GlobalCIDRs),
			clusterEgress: parseAddrs(c.ClusterEgressIPs),
			trusted:       inv.networksOf(id),
		}
		if len(c.NamespaceEgressIPs) > 0 {
			v.nsEgress = make(map[string][]netip.Prefix, len(c.NamespaceEgressIPs))
			for ns, ips := range c.NamespaceEgressIPs {
				if p := parseAddrs(ips); len(p) > 0 {
					v.nsEgress[ns] = p
				}
			}
		}
		views[id] = v
	}
	ids := inv.sortedClusters()
	for i, a := range ids {
		va := views[a]
		if va.globalnet || len(va.podCIDRs) == 0 {
			continue
		}
		for _, b := range ids[i+1:] {
			vb := views[b]
			if vb.globalnet || len(vb.podCIDRs) == 0 {
				continue
			}
			if overlapping(va.podCIDRs, vb.podCIDRs) {
				va.overlapsWith = append(va.overlapsWith, b)
				vb.overlapsWith = append(vb.overlapsWith, a)
			}
		}
	}
	return views
}

func (ec *evalCache) view(inv *Inventory, id string) *clusterView {
	if ec.views == nil {
		ec.views = newClusterViews(inv)
	}
	if v := ec.views[id]; v != nil {
		return v
	}
	return &clusterView{trusted: inv.networksOf(id)}
}

// local returns the enforcing cluster's own trusted networks (nil when
// unknown).
func (ec *evalCache) local(inv *Inventory) *ClusterNetworks {
	if !ec.localSet {
		ec.localNets, ec.localSet = inv.localNetworksOf(ec.enforcing), true
	}
	return ec.localNets
}

// owned renders address a of a pod of cluster c if the ownership check
// allows it, else records why not.
func (b *remoteBuilder) owned(c string, v *clusterView, global bool, a netip.Prefix, pod *podEntry, shared bool) bool {
	if r := CheckRemoteAddr(b.ec.local(b.inv), v.trusted, global, a); r != DropNone {
		b.set.problems.add(r.degradedReason(), c)
		return false
	}
	b.put(a, pod, shared)
	return true
}

// renderedAddr is one remote address and the pods it stands for: exactly
// one pod for a plain pod IP, every pod sharing it for a global address.
type renderedAddr struct {
	pods   []*podEntry
	shared bool
}

// mergeRendered combines two entries for the same address. Two plain pods
// claiming one IP: the smallest cluster/namespace/name wins, so the result
// does not depend on map order. Entries are never modified (sets are
// cached and shared).
func mergeRendered(prev, next *renderedAddr) *renderedAddr {
	if prev == nil {
		return next
	}
	if !prev.shared && !next.shared {
		if comparePodKeys(prev.pods[0], next.pods[0]) <= 0 {
			return prev
		}
		return next
	}
	pods := append(slices.Clone(prev.pods), next.pods...)
	slices.SortFunc(pods, comparePodKeys)
	return &renderedAddr{pods: slices.Compact(pods), shared: true}
}

// resolvePorts resolves named ports against every pod behind the address
// (the union: traffic to a shared address may reach any of them).
func (ra *renderedAddr) resolvePorts(ports []networkingv1.NetworkPolicyPort) []networkingv1.NetworkPolicyPort {
	if len(ra.pods) == 1 {
		return resolvePorts(ports, ra.pods[0].ports())
	}
	var out []networkingv1.NetworkPolicyPort
	for _, p := range ra.pods {
		out = append(out, resolvePorts(ports, p.ports())...)
	}
	slices.SortFunc(out, comparePorts)
	return slices.CompactFunc(out, func(a, b networkingv1.NetworkPolicyPort) bool { return comparePorts(a, b) == 0 })
}

// problems collects what made a rendering inexact, per reason the
// clusters concerned.
type problems map[string]map[string]struct{}

func (p *problems) add(reason, cluster string) {
	if *p == nil {
		*p = problems{}
	}
	s := (*p)[reason]
	if s == nil {
		s = map[string]struct{}{}
		(*p)[reason] = s
	}
	s[cluster] = struct{}{}
}

func (p *problems) merge(o *problems) {
	for r, cs := range *o {
		for c := range cs {
			p.add(r, c)
		}
	}
}

// reasonOrder is by severity: peers left out first, then wrong-pod risks,
// then coarse identity.
var reasonOrder = []string{
	ReasonServicePeerNotExported,
	ReasonServicePeerNoSelector,
	ReasonPodCIDRsUnknown,
	ReasonPodIPInLocalCIDR,
	ReasonPodIPReserved,
	ReasonPodIPOutsideClusterCIDR,
	ReasonGlobalnetNoEgressIPs,
	ReasonGlobalnetPeersDropped,
	ReasonOverlappingPodCIDRs,
	ReasonServiceIPNotOwned,
	reasonServiceGlobalIPNotOwned,
	reasonServiceNoGlobalIP,
	ReasonServicePartiallyAdmitted,
	ReasonGlobalnetCoarseIdentity,
}

// reasonHint explains the ownership reasons in Degraded details (the
// condition message names the clusters and says what happened).
var reasonHint = map[string]string{
	ReasonPodCIDRsUnknown:         " (pod CIDRs unknown here; their pods are left out)",
	ReasonPodIPInLocalCIDR:        " (pod IPs inside this cluster's own CIDRs left out)",
	ReasonPodIPReserved:           " (loopback, link-local, unspecified or multicast pod IPs left out)",
	ReasonPodIPOutsideClusterCIDR: " (pod IPs outside their cluster's CIDRs left out)",
	ReasonServiceIPNotOwned:       " (Service addresses outside their cluster's service CIDRs left out)",
	reasonServiceGlobalIPNotOwned: " (Service global ingress IPs outside their cluster's global CIDRs left out)",
	reasonServiceNoGlobalIP: " (Services of Globalnet clusters without a global ingress IP: " +
		"their addresses are not admitted)",
	ReasonServicePartiallyAdmitted: " (Services of which the egress rule admits only some backends: " +
		"their addresses are not admitted)",
	ReasonServicePeerNotExported: " (service peers naming a Service that no selected cluster exports: " +
		"they select nothing)",
	ReasonServicePeerNoSelector: " (exported Services without a selector: their backends are unknown, " +
		"the service peer selects none of them)",
}

// summary returns the most severe reason and one detail line per reason.
func (p problems) summary() (string, []string) {
	if len(p) == 0 {
		return "", nil
	}
	var reason string
	var details []string
	for _, r := range reasonOrder {
		cs := p[r]
		if len(cs) == 0 {
			continue
		}
		if reason == "" {
			reason = r
		}
		details = append(details, r+": "+strings.Join(slices.Sorted(maps.Keys(cs)), ",")+reasonHint[r])
	}
	return reason, details
}

// evalAcc accumulates over the rules of one policy evaluation.
type evalAcc struct {
	seen     map[netip.Prefix]struct{}
	problems problems
	budget   *budgetState // nil: unbounded
}

// remoteBuilder fills a remoteSet with the addresses remote pods are
// rendered by.
type remoteBuilder struct {
	inv    *Inventory
	ec     *evalCache
	egress bool
	set    *remoteSet
}

func (b *remoteBuilder) put(a netip.Prefix, pod *podEntry, shared bool) {
	b.set.addrs[a] = mergeRendered(b.set.addrs[a], &renderedAddr{pods: []*podEntry{pod}, shared: shared})
}

// add renders one eligible, selected pod of remote cluster c.
//
// Without Globalnet, the pod's own IPs (/32, /128). With Globalnet,
// Submariner source-NATs the pod's cross-cluster traffic, so:
//   - ingress (the pod is the source): its per-pod egress IPs, else its
//     namespace's, else the cluster-wide ones (coarse);
//   - egress (the pod is the destination): it is reached only through
//     global ingress IPs, all inside the cluster's global CIDRs (coarse);
//     the pod is also recorded as selected, so that the global ingress IPs
//     of Services whose backends the rule selects entirely are admitted
//     exactly (services.go).
//
// Coarse addresses are rendered or, with GlobalnetDrop, left out; either
// way the set records why.
func (b *remoteBuilder) add(c string, pod *podEntry) {
	v := b.ec.view(b.inv, c)
	if !v.globalnet {
		if len(v.overlapsWith) > 0 {
			b.set.problems.add(ReasonOverlappingPodCIDRs, c)
		}
		for a := range pod.addrs() {
			b.owned(c, v, false, netip.PrefixFrom(a, a.BitLen()), pod, false)
		}
		return
	}
	var exact, coarse []netip.Prefix
	if b.egress {
		// Its exported Services' global ingress IPs are exact: the rule
		// selects this pod, whatever its coarse address (services.go).
		b.set.selectGlobalnet(pod)
		coarse = v.globalCIDRs
	} else if own := pod.egress(); len(own) > 0 {
		exact = own
	} else if ns := v.nsEgress[pod.ns().name]; len(ns) > 0 {
		exact = ns
	} else {
		coarse = v.clusterEgress
	}
	switch {
	case len(exact) > 0:
		for _, a := range exact {
			b.owned(c, v, true, a, pod, true)
		}
	case len(coarse) == 0:
		b.set.problems.add(ReasonGlobalnetNoEgressIPs, c)
	case b.inv.globalnet == GlobalnetDrop:
		b.set.problems.add(ReasonGlobalnetPeersDropped, c)
	default:
		rendered := false
		for _, a := range coarse {
			rendered = b.owned(c, v, true, a, pod, true) || rendered
		}
		if rendered {
			b.set.problems.add(ReasonGlobalnetCoarseIdentity, c)
		}
	}
}

// Finding is one cluster-set sanity problem found in the inventory.
type Finding struct {
	// Check is "overlapping_pod_cidrs" or "pod_ip_outside_cidr".
	Check    string
	Clusters []string // the clusters concerned, sorted
	Message  string
}

// Findings runs the inventory-wide sanity checks: pod CIDRs overlapping
// between clusters without Globalnet, and pods whose IP lies outside their
// cluster's advertised pod CIDRs (one finding per cluster, with a count).
// The output is sorted and deterministic.
func Findings(inv *Inventory) []Finding {
	views := newClusterViews(inv)
	var out []Finding
	ids := inv.sortedClusters()
	for _, a := range ids {
		for _, b := range views[a].overlapsWith {
			if a < b {
				out = append(out, Finding{Check: "overlapping_pod_cidrs", Clusters: []string{a, b},
					Message: fmt.Sprintf("clusters %s and %s have overlapping pod CIDRs and no Globalnet: a remote pod IP may name a local pod", a, b)})
			}
		}
	}
	for _, id := range ids {
		v := views[id]
		if v.globalnet || len(v.podCIDRs) == 0 {
			continue
		}
		n, example := 0, ""
		for _, nsName := range slices.Sorted(maps.Keys(inv.clusters[id].namespaces)) {
			ns := inv.clusters[id].namespaces[nsName]
			for _, pod := range slices.SortedFunc(ns.pods.all(), func(a, b *podEntry) int { return strings.Compare(a.name, b.name) }) {
				podName := pod.name
				if !pod.eligible() {
					continue
				}
				for a := range pod.addrs() {
					if !slices.ContainsFunc(v.podCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
						if n == 0 {
							example = fmt.Sprintf("%s/%s (%s)", nsName, podName, a)
						}
						n++
						break
					}
				}
			}
		}
		if n > 0 {
			out = append(out, Finding{Check: "pod_ip_outside_cidr", Clusters: []string{id},
				Message: fmt.Sprintf("cluster %s: %d pod(s) with an IP outside the advertised pod CIDRs %v, e.g. %s", id, n, inv.clusters[id].cluster.PodCIDRs, example)})
		}
	}
	return out
}
