package enforce

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod-IP ownership (docs/SEMANTICS.md "Pod-IP ownership").
//
// A remote address becomes an ipBlock only if it lies inside the address
// ranges its cluster owns, as the enforcing cluster knows them
// independently of gossip (Submariner's broker-synced Cluster objects, or
// operator configuration). What a cluster advertises about itself in
// gossip is never trusted for this. The check is CheckRemoteAddr: a pure,
// deterministic function; the knowledge is passed in as data
// (Inventory.SetNetworks).

// Degraded reasons for remote addresses left out by the ownership check.
const (
	// ReasonPodCIDRsUnknown: the enforcing cluster knows no pod CIDRs (or,
	// with Globalnet, no global CIDRs) for a remote cluster: its pods are
	// left out.
	ReasonPodCIDRsUnknown = "PodCIDRsUnknown"
	// ReasonPodIPInLocalCIDR: a remote address lies inside the enforcing
	// cluster's own pod, service or global CIDRs: left out.
	ReasonPodIPInLocalCIDR = "PodIPInLocalCIDR"
	// ReasonPodIPReserved: a remote address is loopback, link-local,
	// unspecified, multicast or IPv4-mapped: left out.
	ReasonPodIPReserved = "PodIPReservedAddress"
)

// DropReason says why a remote address is not rendered; it is the
// "reason" label of coastguard_pod_ips_dropped. Empty means allowed.
type DropReason string

const (
	// DropNone means the address is allowed.
	DropNone DropReason = ""
	// DropCIDRsUnknown means the owner's CIDRs are unknown here.
	DropCIDRsUnknown DropReason = "cidrs_unknown"
	// DropReserved means a loopback, link-local, unspecified, multicast or
	// IPv4-mapped IPv6 address.
	DropReserved DropReason = "reserved_address"
	// DropOutsideCIDRs means the address is not inside the owner's CIDRs.
	DropOutsideCIDRs DropReason = "outside_owner_cidrs"
	// DropLocalCIDR means the address is inside the enforcing cluster's own
	// CIDRs.
	DropLocalCIDR DropReason = "inside_local_cidrs"
)

// DropReasons lists every non-empty DropReason (metric label values).
var DropReasons = []DropReason{DropCIDRsUnknown, DropReserved, DropOutsideCIDRs, DropLocalCIDR}

// degradedReason maps a DropReason to the MCNP Degraded reason.
func (r DropReason) degradedReason() string {
	switch r {
	case DropCIDRsUnknown:
		return ReasonPodCIDRsUnknown
	case DropReserved:
		return ReasonPodIPReserved
	case DropOutsideCIDRs:
		return ReasonPodIPOutsideClusterCIDR
	case DropLocalCIDR:
		return ReasonPodIPInLocalCIDR
	}
	return ""
}

// ClusterNetworks is what the enforcing cluster knows, independently of
// gossip, about the address ranges of one cluster.
type ClusterNetworks struct {
	PodCIDRs     []netip.Prefix
	ServiceCIDRs []netip.Prefix
	GlobalCIDRs  []netip.Prefix
	// Sources names where this came from ("submariner", "config"), for
	// logs; it does not affect the check.
	Sources []string
}

// Networks is the trusted network knowledge, by cluster ID.
type Networks map[string]ClusterNetworks

func (n ClusterNetworks) clone() ClusterNetworks {
	return ClusterNetworks{PodCIDRs: slices.Clone(n.PodCIDRs), ServiceCIDRs: slices.Clone(n.ServiceCIDRs),
		GlobalCIDRs: slices.Clone(n.GlobalCIDRs), Sources: slices.Clone(n.Sources)}
}

// Equal reports whether two network descriptions are identical.
func (n ClusterNetworks) Equal(o ClusterNetworks) bool {
	return slices.Equal(n.PodCIDRs, o.PodCIDRs) && slices.Equal(n.ServiceCIDRs, o.ServiceCIDRs) &&
		slices.Equal(n.GlobalCIDRs, o.GlobalCIDRs) && slices.Equal(n.Sources, o.Sources)
}

// Equal reports whether two Networks are identical.
func (n Networks) Equal(o Networks) bool {
	return maps.EqualFunc(n, o, ClusterNetworks.Equal)
}

// Clone returns a deep copy.
func (n Networks) Clone() Networks {
	if n == nil {
		return nil
	}
	out := make(Networks, len(n))
	for id, c := range n {
		out[id] = c.clone()
	}
	return out
}

// SetNetworks sets the trusted network knowledge the ownership check uses
// (a copy is kept). Until it is called every remote address is dropped as
// DropCIDRsUnknown. It changes the output of every policy: recompute all
// of them afterwards. Ranges CheckNetworks refuses are left out
// (NetworkProblems lists them).
func (inv *Inventory) SetNetworks(n Networks) {
	inv.localNetworks = n.Clone()
	inv.networks, inv.netProblems = CheckNetworks(inv.localNetworks)
}

// NetworkProblems lists the trusted ranges SetNetworks refused.
func (inv *Inventory) NetworkProblems() []NetworkProblem { return slices.Clone(inv.netProblems) }

// Networks returns a copy of the trusted network knowledge as given to
// SetNetworks (NetworkProblems lists what the ownership check leaves out).
func (inv *Inventory) Networks() Networks { return inv.localNetworks.Clone() }

// reservedPrefixes are never rendered: loopback, link-local, unspecified,
// multicast, and IPv4-mapped IPv6 (rendered addresses are unmapped).
var reservedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("0.0.0.0/32"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("::ffff:0:0/96"),
}

// IsReserved reports whether p overlaps a loopback, link-local,
// unspecified, multicast or IPv4-mapped range.
func IsReserved(p netip.Prefix) bool {
	if p.IsSingleIP() {
		a := p.Addr()
		return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast() || a.Is4In6()
	}
	for _, r := range reservedPrefixes {
		if r.Overlaps(p) {
			return true
		}
	}
	return false
}

// within reports whether p lies entirely inside one of set.
func within(set []netip.Prefix, p netip.Prefix) bool {
	for _, q := range set {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func overlapsAny(set []netip.Prefix, p netip.Prefix) bool {
	if p.IsSingleIP() {
		a := p.Addr()
		for _, q := range set {
			if q.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, q := range set {
		if q.Overlaps(p) {
			return true
		}
	}
	return false
}

// CheckRemoteAddr decides whether a remote address p (a pod IP as a /32 or
// /128, or with Globalnet a global egress IP or CIDR) of the cluster owner
// may become an ipBlock in the enforcing cluster, whose own networks are
// local. owner is nil when the owner's networks are unknown; local may be
// nil (then the local check has nothing to compare with). global selects
// which of the owner's ranges p must lie in: GlobalCIDRs for Globalnet
// addresses, PodCIDRs otherwise. It returns DropNone when p is allowed.
//
// The rules, in order: the owner's ranges must be known; p must not
// overlap a reserved range; p must lie entirely inside one of the owner's
// ranges; p must not overlap the enforcing cluster's own pod, service or
// global CIDRs.
func CheckRemoteAddr(local, owner *ClusterNetworks, global bool, p netip.Prefix) DropReason {
	var own []netip.Prefix
	if owner != nil {
		own = owner.PodCIDRs
		if global {
			own = owner.GlobalCIDRs
		}
	}
	if len(own) == 0 {
		return DropCIDRsUnknown
	}
	if !p.IsValid() {
		return DropOutsideCIDRs
	}
	if !p.IsSingleIP() {
		p = p.Masked()
	}
	if IsReserved(p) {
		return DropReserved
	}
	if !within(own, p) {
		return DropOutsideCIDRs
	}
	if local != nil && (overlapsAny(local.PodCIDRs, p) || overlapsAny(local.ServiceCIDRs, p) || overlapsAny(local.GlobalCIDRs, p)) {
		return DropLocalCIDR
	}
	return DropNone
}

// ParseCIDRs parses network CIDRs (as in Submariner's Cluster spec): the
// valid ones sorted and de-duplicated, and an error per invalid entry. An
// entry with host bits set, or an IPv4-mapped IPv6 prefix, is invalid.
func ParseCIDRs(in []string) ([]netip.Prefix, []error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range in {
		p, err := parseNetworkCIDR(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out), errs
}

func parseNetworkCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR", s)
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("%q is IPv4-mapped IPv6; use the IPv4 form", s)
	}
	if p.Masked() != p {
		return p, fmt.Errorf("%q has host bits set (the network is %s)", s, p.Masked())
	}
	return p, nil
}

// ParseClusterCIDRs parses operator-supplied CIDRs (--cluster-cidrs), one
// entry per CIDR: "<cluster>=<cidr>" or "<cluster>:pod=<cidr>" for a pod
// CIDR, "<cluster>:service=<cidr>" and "<cluster>:global=<cidr>". Entries
// for one cluster accumulate. Every invalid entry is reported.
func ParseClusterCIDRs(entries []string) (Networks, error) {
	out := Networks{}
	var errs []error
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		key, cidr, ok := strings.Cut(e, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("%q: want <cluster>[:pod|:service|:global]=<cidr>", e))
			continue
		}
		id, kind, _ := strings.Cut(key, ":")
		if msgs := validation.IsDNS1123Label(id); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%q: cluster ID %q: %s", e, id, strings.Join(msgs, "; ")))
			continue
		}
		p, err := parseNetworkCIDR(cidr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", e, err))
			continue
		}
		n := out[id]
		switch kind {
		case "", "pod":
			n.PodCIDRs = append(n.PodCIDRs, p)
		case "service":
			n.ServiceCIDRs = append(n.ServiceCIDRs, p)
		case "global":
			n.GlobalCIDRs = append(n.GlobalCIDRs, p)
		default:
			errs = append(errs, fmt.Errorf("%q: unknown range %q (want pod, service or global)", e, kind))
			continue
		}
		n.Sources = []string{"config"}
		out[id] = n
	}
	for id, n := range out {
		out[id] = n.normalized()
	}
	return out, errors.Join(errs...)
}

func (n ClusterNetworks) normalized() ClusterNetworks {
	sortUniq := func(ps []netip.Prefix) []netip.Prefix {
		if len(ps) == 0 {
			return nil
		}
		ps = slices.Clone(ps)
		slices.SortFunc(ps, netip.Prefix.Compare)
		return slices.Compact(ps)
	}
	srcs := slices.Clone(n.Sources)
	slices.Sort(srcs)
	return ClusterNetworks{PodCIDRs: sortUniq(n.PodCIDRs), ServiceCIDRs: sortUniq(n.ServiceCIDRs),
		GlobalCIDRs: sortUniq(n.GlobalCIDRs), Sources: slices.Compact(srcs)}
}

// MergeNetworks returns the union of several sources of trusted network
// knowledge (e.g. Submariner's Cluster objects and operator
// configuration), per cluster and per range.
func MergeNetworks(sources ...Networks) Networks {
	out := Networks{}
	for _, src := range sources {
		for id, n := range src {
			m := out[id]
			m.PodCIDRs = append(m.PodCIDRs, n.PodCIDRs...)
			m.ServiceCIDRs = append(m.ServiceCIDRs, n.ServiceCIDRs...)
			m.GlobalCIDRs = append(m.GlobalCIDRs, n.GlobalCIDRs...)
			m.Sources = append(m.Sources, n.Sources...)
			out[id] = m
		}
	}
	for id, n := range out {
		out[id] = n.normalized()
	}
	return out
}

// localNetworksOf returns the enforcing cluster's own networks as given,
// unchecked: a remote address inside any of them is refused, so a range of
// its own that overlaps another cluster's keeps protecting it.
func (inv *Inventory) localNetworksOf(id string) *ClusterNetworks {
	if n, ok := inv.localNetworks[id]; ok {
		return &n
	}
	return nil
}

// networksOf returns the trusted networks of a cluster, nil when unknown.
func (inv *Inventory) networksOf(id string) *ClusterNetworks {
	if n, ok := inv.networks[id]; ok {
		return &n
	}
	return nil
}

// PodIPDrop counts the remote addresses of one cluster that the enforcing
// cluster never renders, for one reason.
type PodIPDrop struct {
	Cluster string
	Reason  DropReason
	Count   int
	// Example is the first dropped address (namespace/pod and address),
	// in sorted order.
	Example string
}

// PodIPDrops checks every eligible pod of every remote cluster (the
// enforcing cluster's own pods are native peers, never ipBlocks) against
// the ownership rules and counts the addresses dropped, by cluster and
// reason: pod IPs, and for Globalnet clusters the global addresses
// (per-pod, namespace and cluster egress IPs, global CIDRs) their pods
// would be rendered by. Sorted by cluster and reason; deterministic.
func PodIPDrops(inv *Inventory, enforcing string) []PodIPDrop {
	local := inv.localNetworksOf(enforcing)
	views := newClusterViews(inv)
	var out []PodIPDrop
	for _, id := range inv.sortedClusters() {
		if id == enforcing {
			continue
		}
		v := views[id]
		dc := dropCounter{cluster: id, local: local, owner: inv.networksOf(id), globalnet: v.globalnet, counts: map[DropReason]*PodIPDrop{}}
		if v.globalnet {
			dc.noteGlobalnet(v)
		}
		dc.notePods(inv.clusters[id], v.globalnet)
		for _, r := range DropReasons {
			if d := dc.counts[r]; d != nil {
				out = append(out, *d)
			}
		}
	}
	return out
}

// dropCounter counts one cluster's dropped addresses per reason.
type dropCounter struct {
	cluster      string
	local, owner *ClusterNetworks
	globalnet    bool
	counts       map[DropReason]*PodIPDrop
}

// note counts a dropped address; the example is the smallest (so the
// result does not depend on map order).
func (dc *dropCounter) note(what func() string, p netip.Prefix) {
	r := CheckRemoteAddr(dc.local, dc.owner, dc.globalnet, p)
	if r == DropNone {
		return
	}
	ex := what() + " " + p.String()
	d := dc.counts[r]
	if d == nil {
		d = &PodIPDrop{Cluster: dc.cluster, Reason: r, Example: ex}
		dc.counts[r] = d
	} else if ex < d.Example {
		d.Example = ex
	}
	d.Count++
}

// noteGlobalnet checks a Globalnet cluster's egress IPs and global CIDRs.
func (dc *dropCounter) noteGlobalnet(v *clusterView) {
	str := func(s string) func() string { return func() string { return s } }
	for _, p := range v.clusterEgress {
		dc.note(str("cluster egress IP"), p)
	}
	for ns, ps := range v.nsEgress {
		for _, p := range ps {
			dc.note(str("namespace "+ns+" egress IP"), p)
		}
	}
	for _, p := range v.globalCIDRs {
		dc.note(str("global CIDR"), p)
	}
}

// notePods checks the addresses of the cluster's eligible pods: their
// egress IPs with Globalnet, else their pod IPs.
func (dc *dropCounter) notePods(cs *clusterState, globalnet bool) {
	for nsName, ns := range cs.namespaces {
		for pod := range ns.pods.all() {
			podName := pod.name
			if !pod.eligible() {
				continue
			}
			name := func() string { return nsName + "/" + podName }
			if globalnet {
				for _, p := range pod.egress() {
					dc.note(func() string { return name() + " egress IP" }, p)
				}
				continue
			}
			for a := range pod.addrs() {
				dc.note(name, netip.PrefixFrom(a, a.BitLen()))
			}
		}
	}
}
