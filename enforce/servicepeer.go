package enforce

import (
	"encoding/json"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// Services as peers (docs/SEMANTICS.md "Services as peers").
//
// A peer `service: {name, namespace, clusterSelector}` means, in every
// cluster its clusterSelector selects (absent: the enforcing cluster
// only), the backends of that cluster's export of the Service: the pods of
// the Service's namespace there that its selector matches.
//
//   - In the enforcing cluster the backends are selected natively (the
//     local Service's selector as podSelector, its namespace by name), so
//     the CNI follows local pod churn; this needs the Service to be
//     exported there too, like everywhere else.
//   - In another cluster its eligible backends are rendered by address, as
//     pods selected by a podSelector would be (ownership, Globalnet). In
//     egress rules the exactness rule of services.go then adds the
//     Service's ClusterIPs on the service ports whose backends the rule
//     admits entirely (every eligible backend is a peer here, so only the
//     rule's ports and ineligible backends can make it partial).
//   - A Service that no selected cluster exports selects nothing (fail
//     closed) and the policy is Degraded with ReasonServicePeerNotExported;
//     an exported Service without a selector contributes nothing either
//     (its backends cannot be seen) and is reported with
//     ReasonServicePeerNoSelector.

// Degraded reasons of service peers.
const (
	// ReasonServicePeerNotExported: a service peer names a Service that no
	// cluster of its clusterSelector exports; the peer selects nothing.
	ReasonServicePeerNotExported = "ServicePeerNotExported"
	// ReasonServicePeerNoSelector: a service peer names an exported Service
	// without a selector in some cluster; that cluster contributes no
	// backend.
	ReasonServicePeerNoSelector = "ServicePeerWithoutSelector"
)

// servicePeerRef is the Service a service peer names, its namespace
// resolved (absent: the policy's).
type servicePeerRef struct {
	namespace, name string
}

func (r *servicePeerRef) String() string { return r.namespace + "/" + r.name }

// compileServicePeer fills c for a service peer of a policy of policyNS.
func compileServicePeer(c *compiledPeer, policyNS string, s *apiv1.ServicePeer) error {
	var err error
	if c.clusterSel, err = selector(s.ClusterSelector); err != nil {
		return err
	}
	ns := s.Namespace
	if ns == "" {
		ns = policyNS
	}
	c.svc = &servicePeerRef{namespace: ns, name: s.Name}
	k, _ := json.Marshal([]any{"service", ns, s.Name, s.ClusterSelector})
	c.key = string(k)
	return nil
}

// coversCluster reports whether cluster c is in the service peer's
// cluster dimension for the enforcing cluster.
func (p *compiledPeer) coversCluster(inv *Inventory, enforcing, c string) bool {
	if p.clusterSel == nil {
		return c == enforcing
	}
	return inv.clusterMatches(p.clusterSel, c)
}

// service returns cluster c's export of namespace/name, or nil.
func (inv *Inventory) service(c, namespace, name string) *serviceState {
	cs := inv.clusters[c]
	if cs == nil {
		return nil
	}
	return cs.services[namespace][name]
}

// collectServicePeer fills b's set with what service peer p selects (see
// the comment at the top of this file).
func (ec *evalCache) collectServicePeer(inv *Inventory, p *compiledPeer, policyNS string, b *remoteBuilder) {
	rs := b.set
	ref := p.svc
	exported := false
	p.peerClusters(inv, ec.enforcing, func(c string) {
		st := inv.service(c, ref.namespace, ref.name)
		if st == nil {
			return
		}
		exported = true
		if st.sel == nil {
			rs.problems.add(ReasonServicePeerNoSelector, c+"/"+ref.String())
			return
		}
		if c == ec.enforcing {
			rs.hasLocal = true
			rs.native = localServicePeer(st, policyNS)
			id, _ := json.Marshal(rs.native)
			rs.nativeID = string(id)
			return
		}
		for _, pod := range ec.backends(st, inv.clusters[c].namespaces[ref.namespace]) {
			if pod.eligible() {
				b.add(c, pod)
			}
		}
	})
	if !exported {
		rs.problems.add(ReasonServicePeerNotExported, ref.String())
	}
}

// localServicePeer is the native NetworkPolicy peer selecting the backends
// of a Service of the enforcing cluster: its selector as podSelector, in
// its namespace (named by the namespace name label when it is not the
// policy's own).
func localServicePeer(st *serviceState, policyNS string) *networkingv1.NetworkPolicyPeer {
	out := &networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{}}}
	for k, v := range st.svc.Selector {
		out.PodSelector.MatchLabels[k] = v
	}
	if st.svc.Namespace != policyNS {
		out.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceNameLabel: st.svc.Namespace}}
	}
	return out
}

// affectedServicePeers returns, sorted, the policies enforced at enforcing
// with a service peer naming a Service of namespace ns whose cluster
// dimension covers cluster c, and for which match (nil: always) holds.
func (inv *Inventory) affectedServicePeers(enforcing, c, ns string, match func(*compiledPeer) bool) []PolicyRef {
	var out []PolicyRef
	for ref := range inv.svcPeers[ns] {
		cp := inv.policies[ref]
		if cp == nil || cp.err != nil || !cp.enforcedAt(inv, enforcing) || !inv.HasNamespace(enforcing, ref.Namespace) {
			continue
		}
		if cp.anyPeer(func(p *compiledPeer) bool {
			return p.svc != nil && p.svc.namespace == ns && p.coversCluster(inv, enforcing, c) && (match == nil || match(p))
		}) {
			out = append(out, ref)
		}
	}
	slices.SortFunc(out, PolicyRef.Compare)
	return out
}

// podMattersToServicePeer reports whether a pod of cluster c and namespace
// p.svc.namespace with one of the label sets (nil: unknown) can change what
// service peer p renders: p's Service S there selects it (a backend
// joins, changes or leaves), or another Service T there selects it and
// may share a backend with S (T's exactness decision, services.go, depends
// on all of T's backends once one of S's backends is admitted). Service
// selectors are equality maps, so T and S can share a pod unless they
// require different values for one key.
func (inv *Inventory) podMattersToServicePeer(c string, p *compiledPeer, sets []labels.Labels) bool {
	s := inv.service(c, p.svc.namespace, p.svc.name)
	if s == nil || s.sel == nil {
		return false // the peer selects nothing in c, whatever the pods
	}
	for _, t := range inv.clusters[c].services[p.svc.namespace] {
		if t.sel == nil || !anyMatches(t.sel, sets) {
			continue
		}
		if t == s || compatibleSelectors(t.svc.Selector, s.svc.Selector) {
			return true
		}
	}
	return false
}

// compatibleSelectors reports whether some label set satisfies both
// equality selectors.
func compatibleSelectors(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; ok && w != v {
			return false
		}
	}
	return true
}

// indexServicePeers records the policy under the namespaces of the
// Services its service peers name.
func (inv *Inventory) indexServicePeers(cp *compiledPolicy) {
	cp.forPeers(func(p *compiledPeer) {
		if p.svc == nil {
			return
		}
		set := inv.svcPeers[p.svc.namespace]
		if set == nil {
			set = map[PolicyRef]struct{}{}
			inv.svcPeers[p.svc.namespace] = set
		}
		set[cp.ref] = struct{}{}
	})
}

func (inv *Inventory) unindexServicePeers(cp *compiledPolicy) {
	cp.forPeers(func(p *compiledPeer) {
		if p.svc == nil {
			return
		}
		if set := inv.svcPeers[p.svc.namespace]; set != nil {
			delete(set, cp.ref)
			if len(set) == 0 {
				delete(inv.svcPeers, p.svc.namespace)
			}
		}
	})
}

// mergeRefs returns the sorted union of two sorted ref lists.
func mergeRefs(a, b []PolicyRef) []PolicyRef {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, PolicyRef.Compare)
	return slices.Compact(out)
}
