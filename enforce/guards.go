package enforce

import (
	"encoding/json"
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
)

// Degraded reasons of the guard rails.
const (
	ReasonProtectedNamespace          = "ProtectedNamespace"
	ReasonCapNetworkPoliciesPerMCNP   = "CapExceededNetworkPoliciesPerMCNP"
	ReasonCapIPBlocksPerNetworkPolicy = "CapExceededIPBlocksPerNetworkPolicy"
	ReasonCapBytesPerMCNP             = "CapExceededBytesPerMCNP"
	// ReasonCapSelectedPeersPerMCNP: the policy's peers select, over all
	// its rules, more remote pods than its evaluation budget (issue 29).
	ReasonCapSelectedPeersPerMCNP = "CapExceededSelectedPeersPerMCNP"
)

// Guards are the enforcing cluster's guard rails (flags of coastguardd).
type Guards struct {
	// ProtectedNamespaces: MCNPs of other clusters are not enforced here.
	ProtectedNamespaces []string
	// EnforceRemoteInProtected lifts that rule.
	EnforceRemoteInProtected bool
	// Caps; 0 means no cap.
	MaxNetworkPoliciesPerMCNP   int
	MaxIPBlocksPerNetworkPolicy int
	MaxBytesPerMCNP             int
}

// Default caps of the guard rails (coastguardd's flag defaults).
const (
	DefaultMaxNetworkPoliciesPerMCNP   = 64
	DefaultMaxIPBlocksPerNetworkPolicy = 1000
	DefaultMaxBytesPerMCNP             = 8 << 20
)

// DefaultProtectedNamespaces are the namespaces where MCNPs of other
// clusters are not enforced unless configured otherwise: the system
// namespaces (kube-system, kube-public, kube-node-lease), Submariner's
// namespace (gateways, Lighthouse DNS) and coastguard's own namespace.
func DefaultProtectedNamespaces(own, submarinerNS string) []string {
	ns := []string{"kube-system", "kube-public", "kube-node-lease", submarinerNS, own}
	slices.Sort(ns)
	return slices.DeleteFunc(slices.Compact(ns), func(s string) bool { return s == "" })
}

// DefaultGuards are the guard rails of a coastguardd run without guard
// flags, installed in namespace own beside Submariner in submarinerNS.
func DefaultGuards(own, submarinerNS string) Guards {
	return Guards{ProtectedNamespaces: DefaultProtectedNamespaces(own, submarinerNS),
		MaxNetworkPoliciesPerMCNP: DefaultMaxNetworkPoliciesPerMCNP, MaxIPBlocksPerNetworkPolicy: DefaultMaxIPBlocksPerNetworkPolicy,
		MaxBytesPerMCNP: DefaultMaxBytesPerMCNP}
}

// ApplyGuards checks one policy's result against the guard rails of the
// enforcing cluster self. A policy of another cluster in a protected
// namespace generates nothing here and is Degraded ProtectedNamespace. A
// result over a cap is replaced by isolation only (the podSelector and
// policyTypes without rules, like an invalid policy: fail closed, never
// open) and Degraded with a reason naming the cap. Only this policy is
// affected.
func ApplyGuards(self string, ref PolicyRef, res Result, g Guards) Result {
	if !res.Selected || res.Error != "" || len(res.NetworkPolicies) == 0 {
		if res.Selected && ref.Origin != self && !g.EnforceRemoteInProtected && slices.Contains(g.ProtectedNamespaces, ref.Namespace) {
			return protected(ref, res)
		}
		return res
	}
	if ref.Origin != self && !g.EnforceRemoteInProtected && slices.Contains(g.ProtectedNamespaces, ref.Namespace) {
		return protected(ref, res)
	}
	if res.Overrun != nil {
		return overrun(res)
	}
	if g.MaxNetworkPoliciesPerMCNP > 0 && len(res.NetworkPolicies) > g.MaxNetworkPoliciesPerMCNP {
		return isolateOnly(res, ReasonCapNetworkPoliciesPerMCNP, fmt.Sprintf(
			"would generate %d NetworkPolicies, above the cap of %d (--max-networkpolicies-per-mcnp); only isolating its pods",
			len(res.NetworkPolicies), g.MaxNetworkPoliciesPerMCNP))
	}
	total := 0
	for i := range res.NetworkPolicies {
		np := &res.NetworkPolicies[i]
		if g.MaxIPBlocksPerNetworkPolicy > 0 {
			if n := ipBlocks(np); n > g.MaxIPBlocksPerNetworkPolicy {
				return isolateOnly(res, ReasonCapIPBlocksPerNetworkPolicy, fmt.Sprintf(
					"NetworkPolicy %s would hold %d ipBlocks, above the cap of %d (--max-ipblocks-per-networkpolicy); only isolating its pods",
					np.Name, n, g.MaxIPBlocksPerNetworkPolicy))
			}
		}
		if g.MaxBytesPerMCNP > 0 {
			b, _ := json.Marshal(np)
			total += len(b)
		}
	}
	if g.MaxBytesPerMCNP > 0 && total > g.MaxBytesPerMCNP {
		return isolateOnly(res, ReasonCapBytesPerMCNP, fmt.Sprintf(
			"would generate %d bytes of NetworkPolicies, above the cap of %d (--max-bytes-per-mcnp); only isolating its pods",
			total, g.MaxBytesPerMCNP))
	}
	return res
}

// Budget is the evaluation budget the caps imply (EvaluateBudget):
// a policy is never built beyond what its caps would let through.
func (g Guards) Budget() Budget {
	return Budget{MaxNetworkPolicies: g.MaxNetworkPoliciesPerMCNP, MaxBytes: g.MaxBytesPerMCNP}
}

// overrun is the isolate-only result of a policy whose evaluation stopped
// at its budget, Degraded with the cap it would have exceeded.
func overrun(res Result) Result {
	reason, flag := ReasonCapSelectedPeersPerMCNP, "--max-networkpolicies-per-mcnp, --max-bytes-per-mcnp"
	switch res.Overrun.Kind {
	case "networkpolicies":
		reason, flag = ReasonCapNetworkPoliciesPerMCNP, "--max-networkpolicies-per-mcnp"
	case "bytes":
		reason, flag = ReasonCapBytesPerMCNP, "--max-bytes-per-mcnp"
	}
	return isolateOnly(res, reason, fmt.Sprintf("%s (%s); not built, only isolating its pods", res.Overrun, flag))
}

func protected(ref PolicyRef, res Result) Result {
	return refused(res, ReasonProtectedNamespace, fmt.Sprintf(
		"namespace %s is protected here: MCNPs of other clusters (this one is from %s) are not enforced in it (--protected-namespaces, --enforce-remote-in-protected-namespaces)",
		ref.Namespace, ref.Origin))
}

// refused is the result of a policy this cluster does not enforce at all:
// nothing generated, Degraded with reason and detail.
func refused(res Result, reason, detail string) Result {
	out := res
	out.NetworkPolicies = nil
	out.RemotePeers = 0
	out.Error = ""
	out.SkippedNoNamespace = false
	out.Degraded = reason
	out.DegradedDetails = []string{detail}
	return out
}

func isolateOnly(res Result, reason, detail string) Result {
	first := res.NetworkPolicies[0].DeepCopy()
	first.Spec.Ingress, first.Spec.Egress = nil, nil
	delete(first.Annotations, AnnotationPart)
	first.Annotations[AnnotationContentHash] = ContentHash(first)
	out := res
	out.NetworkPolicies = []networkingv1.NetworkPolicy{*first}
	out.RemotePeers = 0
	out.Degraded = reason
	out.DegradedDetails = []string{detail}
	return out
}

func ipBlocks(np *networkingv1.NetworkPolicy) int {
	n := 0
	for _, r := range np.Spec.Ingress {
		for _, p := range r.From {
			if p.IPBlock != nil {
				n++
			}
		}
	}
	for _, r := range np.Spec.Egress {
		for _, p := range r.To {
			if p.IPBlock != nil {
				n++
			}
		}
	}
	return n
}
