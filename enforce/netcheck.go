package enforce

import (
	"fmt"
	"net/netip"
	"slices"
)

// Trusted CIDRs are checked too (issue 29, item 8). A cluster's own
// Submariner Cluster object or --cluster-cidrs could declare 0.0.0.0/0 or
// another cluster's range; every address inside then passed the ownership
// check as that cluster's: another cluster's pods, this cluster's nodes,
// public addresses. CheckNetworks refuses such ranges before the ownership
// check uses them:
//
//   - a /0 range;
//   - a pod or service range overlapping a pod or service range of another
//     cluster (this cluster's own included: it is one of the clusters),
//     unless both clusters use Globalnet, which renders their pods by
//     global addresses and so explains the overlap;
//   - a global range overlapping another cluster's global range.
//
// Both sides of an overlap are refused: which of them lies cannot be told,
// and leaving a range out only leaves its pods out of allow rules
// (PodCIDRsUnknown / outside_owner_cidrs), never opens anything.

// NetworkProblem is one trusted range CheckNetworks refused.
type NetworkProblem struct {
	Cluster string
	Range   netip.Prefix
	Why     string
}

func (p NetworkProblem) String() string {
	return fmt.Sprintf("cluster %s: trusted range %s refused: %s", p.Cluster, p.Range, p.Why)
}

type trustedRange struct {
	cluster string
	global  bool // a GlobalCIDRs range
	p       netip.Prefix
}

// CheckNetworks returns n without the ranges refused above, and the
// refusals, sorted by cluster and range. Deterministic.
func CheckNetworks(n Networks) (Networks, []NetworkProblem) {
	var all []trustedRange
	globalnet := map[string]bool{}
	for id, c := range n {
		globalnet[id] = len(c.GlobalCIDRs) > 0
		for _, p := range slices.Concat(c.PodCIDRs, c.ServiceCIDRs) {
			all = append(all, trustedRange{cluster: id, p: p})
		}
		for _, p := range c.GlobalCIDRs {
			all = append(all, trustedRange{cluster: id, global: true, p: p})
		}
	}
	refused := map[trustedRange]string{}
	for i, a := range all {
		if a.p.Bits() == 0 {
			refused[a] = "a /0 range covers every address"
			continue
		}
		for _, b := range all[i+1:] {
			if a.cluster == b.cluster || a.global != b.global || b.p.Bits() == 0 || !a.p.Overlaps(b.p) {
				continue
			}
			if !a.global && globalnet[a.cluster] && globalnet[b.cluster] {
				continue // Globalnet explains overlapping pod/service ranges
			}
			refused[a] = fmt.Sprintf("overlaps %s of cluster %s", b.p, b.cluster)
			refused[b] = fmt.Sprintf("overlaps %s of cluster %s", a.p, a.cluster)
		}
	}
	if len(refused) == 0 {
		return n, nil
	}
	out := n.Clone()
	keep := func(id string, global bool, ps []netip.Prefix) []netip.Prefix {
		return slices.DeleteFunc(ps, func(p netip.Prefix) bool {
			_, bad := refused[trustedRange{cluster: id, global: global, p: p}]
			return bad
		})
	}
	for id, c := range out {
		c.PodCIDRs, c.ServiceCIDRs = keep(id, false, c.PodCIDRs), keep(id, false, c.ServiceCIDRs)
		c.GlobalCIDRs = keep(id, true, c.GlobalCIDRs)
		out[id] = c
	}
	problems := make([]NetworkProblem, 0, len(refused))
	for r, why := range refused {
		problems = append(problems, NetworkProblem{Cluster: r.cluster, Range: r.p, Why: why})
	}
	slices.SortFunc(problems, func(a, b NetworkProblem) int {
		if a.Cluster != b.Cluster {
			return cmpStr(a.Cluster, b.Cluster)
		}
		return a.Range.Compare(b.Range)
	})
	return out, problems
}
