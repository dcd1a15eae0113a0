package enforce

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
)

// clusterSelector semantics live here, once: translation (enforcedAt) and
// the MCNP status (EnforcingClusters, via the daemon) both call selects.

// selects reports whether a policy of origin with the compiled
// spec.clusterSelector sel is enforced in cluster c: sel nil (absent)
// means the origin only, {} every cluster, else the clusters whose labels
// match (always including cluster.clusterset.k8s.io=<ID>); a cluster whose
// labels are unknown only when sel names its ID (clusterMatches).
func (inv *Inventory) selects(sel labels.Selector, origin, c string) bool {
	if sel == nil {
		return c == origin
	}
	return inv.clusterMatches(sel, c)
}

// EnforcingClusters lists, sorted, the clusters of the inventory a
// policy's spec.clusterSelector selects (the origin alone when it is
// absent). It is an error when the policy is unknown or its
// clusterSelector is not a valid label selector.
func EnforcingClusters(inv *Inventory, ref PolicyRef) ([]string, error) {
	cp, ok := inv.policies[ref]
	if !ok {
		return nil, fmt.Errorf("policy %s is not in the inventory", ref)
	}
	sel, err := selector(cp.policy.Spec.ClusterSelector)
	if err != nil {
		return nil, fmt.Errorf("policy %s: spec.clusterSelector: %w", ref, err)
	}
	if sel == nil {
		return []string{ref.Origin}, nil
	}
	var out []string
	for _, c := range inv.sortedClusters() {
		if inv.selects(sel, ref.Origin, c) {
			out = append(out, c)
		}
	}
	return slices.Clip(out), nil
}
