package enforce

import (
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ChangeKind says what changed in the inventory.
type ChangeKind uint8

const (
	// ChangePod means a pod of Cluster/Namespace was added, updated or removed.
	ChangePod ChangeKind = iota + 1
	// ChangeNamespace means a namespace object was added, relabelled or removed.
	ChangeNamespace
	// ChangeCluster means a cluster joined, left or changed labels.
	ChangeCluster
	// ChangePolicy means a policy was added, updated or removed.
	ChangePolicy
	// ChangeService means an exported Service of Cluster/Namespace was
	// added, updated or removed.
	ChangeService
)

// Change describes one inventory change for Affected.
type Change struct {
	Kind      ChangeKind
	Cluster   string
	Namespace string
	Policy    PolicyRef
	// Labels optionally lists the labels of the changed pod or namespace
	// before and/or after the change (nil entries are skipped). When set,
	// a policy is affected only if one of these label sets matches the
	// relevant selector, which makes Affected precise; when nil, Affected
	// is conservative.
	Labels []labels.Labels
}

// Affected returns, sorted, the policies whose translation for the
// enforcing cluster may differ after the change (a superset of those that
// do differ). Recompute them with Evaluate; every other
// policy's output is unchanged. Apply the change to the inventory first:
// the check uses current cluster labels (cluster label changes are
// ChangeCluster, which affects every policy).
func Affected(enforcing string, inv *Inventory, ch Change) []PolicyRef {
	switch ch.Kind {
	case ChangePolicy:
		return []PolicyRef{ch.Policy}
	case ChangeCluster:
		return inv.Policies()
	case ChangePod:
		if ch.Cluster == enforcing {
			// Local pods are selected natively by the CNI: no change.
			return nil
		}
		return inv.affectedByPod(enforcing, &ch)
	case ChangeService:
		return inv.affectedByService(enforcing, &ch)
	case ChangeNamespace:
		return inv.affectedByNamespace(enforcing, &ch)
	}
	return nil
}

// affectedByPod is Affected for a remote pod's change.
func (inv *Inventory) affectedByPod(enforcing string, ch *Change) []PolicyRef {
	var svcPeers []PolicyRef
	// A service peer selects the backends of a Service of the pod's
	// namespace; the pod matters if a Service there selects it.
	if len(inv.svcPeers[ch.Namespace]) > 0 {
		svcPeers = inv.affectedServicePeers(enforcing, ch.Cluster, ch.Namespace, func(p *compiledPeer) bool {
			return inv.podMattersToServicePeer(ch.Cluster, p, ch.Labels)
		})
	}
	return mergeRefs(svcPeers, inv.collectAffectedFrom(enforcing, ch.Cluster, ch.Namespace, func(cp *compiledPolicy, p *compiledPeer) bool {
		if p.nsSel == nil {
			if ch.Namespace != cp.ref.Namespace {
				return false
			}
		} else {
			ns := inv.nsLabels(ch.Cluster, ch.Namespace)
			if ns == nil || !p.nsSel.Matches(ns) {
				return false
			}
		}
		// A backend of an exported Service can change the exactness
		// decision of any peer that reaches into its namespace.
		return p.podSel == nil || anyMatches(p.podSel, ch.Labels) ||
			inv.servicesSelectAny(ch.Cluster, ch.Namespace, ch.Labels)
	}))
}

// affectedByService is Affected for a Service's change: service peers,
// the enforcing cluster's own included (its selector is their native
// form), and for a remote one every peer reaching into its namespace.
func (inv *Inventory) affectedByService(enforcing string, ch *Change) []PolicyRef {
	svcPeers := inv.affectedServicePeers(enforcing, ch.Cluster, ch.Namespace, nil)
	if ch.Cluster == enforcing {
		return svcPeers // otherwise the enforcing cluster's own Services are never remote peers
	}
	return mergeRefs(svcPeers, inv.collectAffectedFrom(enforcing, ch.Cluster, ch.Namespace, func(cp *compiledPolicy, p *compiledPeer) bool {
		if p.nsSel == nil {
			return ch.Namespace == cp.ref.Namespace
		}
		ns := inv.nsLabels(ch.Cluster, ch.Namespace)
		return ns != nil && p.nsSel.Matches(ns)
	}))
}

// affectedByNamespace is Affected for a namespace's change.
func (inv *Inventory) affectedByNamespace(enforcing string, ch *Change) []PolicyRef {
	if ch.Cluster == enforcing {
		// Presence of the policy's own namespace decides whether the
		// policy is enforced here; local namespaceSelectors are native.
		var out []PolicyRef
		for _, ref := range inv.sortedPolicies() {
			if ref.Namespace == ch.Namespace {
				out = append(out, ref)
			}
		}
		return out
	}
	return inv.collectAffected(enforcing, ch.Cluster, func(cp *compiledPolicy, p *compiledPeer) bool {
		// With no namespaceSelector, pods of the policy's namespace are
		// peers whether or not the Namespace object is known.
		return p.nsSel != nil && anyMatches(p.nsSel, ch.Labels)
	})
}

func anyMatches(sel labels.Selector, sets []labels.Labels) bool {
	if sets == nil {
		return true
	}
	for _, s := range sets {
		if s != nil && sel.Matches(s) {
			return true
		}
	}
	return false
}

// collectAffected returns the valid policies enforced at the enforcing
// cluster (which holds their namespace) that have a selector peer whose
// cluster dimension includes the remote cluster (so only explicit
// clusterSelectors qualify) and for which match(peer) holds.
func (inv *Inventory) collectAffected(enforcing, remote string, match func(*compiledPolicy, *compiledPeer) bool) []PolicyRef {
	return inv.collectAffectedFrom(enforcing, remote, "", match)
}

// collectAffectedFrom is collectAffected restricted to the candidates of the
// reverse index: policies with a namespaceSelector peer, plus (when ns is
// not "") policies of namespace ns with a same-namespace remote peer.
func (inv *Inventory) collectAffectedFrom(enforcing, remote, ns string, match func(*compiledPolicy, *compiledPeer) bool) []PolicyRef {
	var out []PolicyRef
	check := func(ref PolicyRef) {
		cp := inv.policies[ref]
		if cp == nil || cp.err != nil || !cp.enforcedAt(inv, enforcing) || !inv.HasNamespace(enforcing, ref.Namespace) {
			return
		}
		if cp.anyPeer(func(p *compiledPeer) bool {
			return p.ipBlock == nil && p.svc == nil && p.clusterSel != nil && inv.clusterMatches(p.clusterSel, remote) && match(cp, p)
		}) {
			out = append(out, ref)
		}
	}
	for ref := range inv.remoteNSSel {
		check(ref)
	}
	if ns != "" {
		for ref := range inv.remoteSameNS[ns] {
			if _, dup := inv.remoteNSSel[ref]; !dup {
				check(ref)
			}
		}
	}
	slices.SortFunc(out, PolicyRef.Compare)
	return out
}

// anyPeer reports whether fn holds for a peer of a rule that is translated
// (rules of a direction missing from policyTypes are ignored).
func (cp *compiledPolicy) anyPeer(fn func(*compiledPeer) bool) bool {
	if slices.Contains(cp.types, networkingv1.PolicyTypeIngress) {
		for i := range cp.ingress {
			for j := range cp.ingress[i].peers {
				if fn(&cp.ingress[i].peers[j]) {
					return true
				}
			}
		}
	}
	if slices.Contains(cp.types, networkingv1.PolicyTypeEgress) {
		for i := range cp.egress {
			for j := range cp.egress[i].peers {
				if fn(&cp.egress[i].peers[j]) {
					return true
				}
			}
		}
	}
	return false
}

// nsLabels returns the labels of a present namespace, or nil.
func (inv *Inventory) nsLabels(cluster, name string) labels.Set {
	c := inv.clusters[cluster]
	if c == nil {
		return nil
	}
	if ns := c.namespaces[name]; ns != nil && ns.present {
		return ns.labels
	}
	return nil
}
