package model

import (
	"slices"
	"sort"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Outputs holds the enforcer's latest per-policy results for the enforcing
// cluster, so that one changed pod recomputes only the policies it affects.
type Outputs struct {
	self string
	// setDegraded is a cluster-set problem (sanity.go) reported on every
	// policy not otherwise degraded; changing it changes every report.
	setDegraded string
	// gateDegraded is ReasonPartialView while the empty-view gate is closed.
	gateDegraded string
	// failures are the applier's per-policy problems.
	failures map[enforce.PolicyRef]string
	adm      enforce.Admission
	results  map[enforce.PolicyRef]enforce.Result
	gens     map[enforce.PolicyRef]int64 // policy generation each result was computed for
	// handOff: policies whose generated NetworkPolicies changed since the
	// last TakeChanges (by name and content hash), gone ones included.
	handOff map[enforce.PolicyRef]struct{}
}

// NewOutputs returns empty outputs for the enforcing cluster self.
func NewOutputs(self string) *Outputs {
	return &Outputs{self: self, results: map[enforce.PolicyRef]enforce.Result{}, gens: map[enforce.PolicyRef]int64{},
		handOff: map[enforce.PolicyRef]struct{}{}}
}

// Recompute evaluates the given policies (all of them when all is set)
// against the inventory and returns the policies whose report changed. A
// new policy generation changes the report even when the counts stay the
// same (an edited port), so that the origin's status can observe it. The
// zero PolicyRef (no policy has an empty origin) is skipped.
func (o *Outputs) Recompute(inv *enforce.Inventory, refs []enforce.PolicyRef, all bool) []enforce.PolicyRef {
	if all {
		refs = refs[:0:0]
		seen := map[enforce.PolicyRef]bool{}
		for _, r := range inv.Policies() {
			refs = append(refs, r)
			seen[r] = true
		}
		for r := range o.results {
			if !seen[r] {
				refs = append(refs, r)
			}
		}
		slices.SortFunc(refs, enforce.PolicyRef.Compare)
	}
	var changed []enforce.PolicyRef
	for _, ref := range refs {
		if ref == (enforce.PolicyRef{}) {
			continue
		}
		old, had := o.results[ref]
		oldGen := o.gens[ref]
		res := o.Admit(inv, ref)
		p, exists := inv.Policy(ref)
		if !exists {
			delete(o.results, ref)
			delete(o.gens, ref)
		} else {
			o.results[ref] = res
			o.gens[ref] = p.Generation
		}
		if !sameGenerated(old.NetworkPolicies, res.NetworkPolicies) {
			o.handOff[ref] = struct{}{}
		}
		if !had || o.Report(ref, old, oldGen) != o.Report(ref, res, p.Generation) {
			changed = append(changed, ref)
		}
	}
	return changed
}

// Admit is the result policy ref has in the enforcing cluster under the
// outputs' guards and consent, without recording it: what Recompute
// records, for a caller that asks about one policy (the CLI).
func (o *Outputs) Admit(inv *enforce.Inventory, ref enforce.PolicyRef) enforce.Result {
	return enforce.Admit(o.self, inv, ref, o.adm)
}

// Desired returns every generated NetworkPolicy, sorted by namespace/name.
func (o *Outputs) Desired() []networkingv1.NetworkPolicy {
	var out []networkingv1.NetworkPolicy
	for _, r := range o.results {
		out = append(out, r.NetworkPolicies...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// TakeChanges returns the change set since the last call (or since the
// outputs were created): every policy whose generated NetworkPolicies
// changed, with its current ones (none: it generates nothing any more, or
// is gone). What an applier holds after applying every change set in
// order equals Desired.
func (o *Outputs) TakeChanges() map[enforce.PolicyRef][]networkingv1.NetworkPolicy {
	out := make(map[enforce.PolicyRef][]networkingv1.NetworkPolicy, len(o.handOff))
	for ref := range o.handOff {
		out[ref] = o.results[ref].NetworkPolicies
	}
	clear(o.handOff)
	return out
}

// Generated is the number of generated NetworkPolicies (len(Desired())).
func (o *Outputs) Generated() int {
	n := 0
	for _, r := range o.results {
		n += len(r.NetworkPolicies)
	}
	return n
}

// sameGenerated reports whether two generated lists of a policy are the
// same objects: names and content hashes (enforce.ContentHash covers the
// labels, the other annotations and the spec), in part order.
func sameGenerated(a, b []networkingv1.NetworkPolicy) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Namespace != b[i].Namespace || a[i].Name != b[i].Name ||
			a[i].Annotations[enforce.AnnotationContentHash] != b[i].Annotations[enforce.AnnotationContentHash] {
			return false
		}
	}
	return true
}

// Result returns the latest result of a policy.
func (o *Outputs) Result(ref enforce.PolicyRef) (enforce.Result, bool) {
	r, ok := o.results[ref]
	return r, ok
}

// Len is the number of policies with a result.
func (o *Outputs) Len() int { return len(o.results) }

// reportOf is the enforcement report the enforcing cluster publishes for a
// result. Only clusters selected by the policy publish one.
func reportOf(r enforce.Result, generation int64) crdt.ReportValue {
	return crdt.ReportValue{
		ObservedGeneration: generation,
		NetworkPolicies:    int32(len(r.NetworkPolicies)),
		RemotePeers:        int32(r.RemotePeers),
		Error:              r.Error,
		SkippedNoNamespace: r.SkippedNoNamespace,
		Degraded:           degradedText(r),
	}
}

// degradedText is the report's Degraded: the most severe reason with the
// clusters it concerns ("PodCIDRsUnknown: eu-2 (...)"), so that the MCNP's
// Degraded condition names them; the bare reason when there are no details.
func degradedText(r enforce.Result) string {
	if r.Degraded == "" || len(r.DegradedDetails) == 0 || !strings.HasPrefix(r.DegradedDetails[0], r.Degraded+":") {
		return r.Degraded
	}
	return r.DegradedDetails[0]
}

// Report is the report the enforcing cluster publishes for a result of a
// generation of policy ref: reportOf plus the applier's failure for this
// policy (when it generates objects), the empty-view gate and the
// cluster-set problem, if any.
func (o *Outputs) Report(ref enforce.PolicyRef, r enforce.Result, generation int64) crdt.ReportValue {
	v := reportOf(r, generation)
	if v.Error == "" && len(r.NetworkPolicies) > 0 {
		if f := o.failures[ref]; f != "" {
			v.Error = "not applied: " + f
		}
	}
	if v.Degraded == "" && v.Error == "" && !v.SkippedNoNamespace {
		v.Degraded = o.gateDegraded
	}
	if v.Degraded == "" && v.Error == "" && !v.SkippedNoNamespace {
		v.Degraded = o.setDegraded
	}
	return v
}

// SetGuards sets the guard rails applied to every result from now on.
func (o *Outputs) SetGuards(g enforce.Guards) { o.adm.Guards = g }

// SetConsent sets what this cluster admits from other clusters (nil:
// everything) for every result from now on.
func (o *Outputs) SetConsent(c *enforce.Consent) { o.adm.Consent = c }

// NotAdmitted counts the policies this cluster's consent refuses.
func (o *Outputs) NotAdmitted() int { return len(o.Refused()) }

// Refused returns the policies this cluster's consent refuses (policy ->
// why).
func (o *Outputs) Refused() map[enforce.PolicyRef]string {
	out := map[enforce.PolicyRef]string{}
	for k, r := range o.results {
		if r.Degraded == enforce.ReasonNotAdmitted {
			out[k] = strings.Join(r.DegradedDetails, "; ")
		}
	}
	return out
}

// SetGateDegraded sets (ReasonPartialView) or clears ("") the empty-view
// gate's reason; it reports whether it changed (then recompute all).
func (o *Outputs) SetGateDegraded(reason string) bool {
	if o.gateDegraded == reason {
		return false
	}
	o.gateDegraded = reason
	return true
}

// SetFailures replaces the applier's per-policy failures (policy -> why)
// and returns the policies whose failure changed.
func (o *Outputs) SetFailures(f map[enforce.PolicyRef]string) []enforce.PolicyRef {
	var changed []enforce.PolicyRef
	for k, v := range f {
		if o.failures[k] != v {
			changed = append(changed, k)
		}
	}
	for k := range o.failures {
		if _, ok := f[k]; !ok {
			changed = append(changed, k)
		}
	}
	o.failures = f
	slices.SortFunc(changed, enforce.PolicyRef.Compare)
	return changed
}

// SetSetDegraded sets the cluster-set problem reported on every policy
// (empty clears it). It reports whether it changed: then every report must
// be rewritten (recompute all).
func (o *Outputs) SetSetDegraded(reason string) bool {
	if o.setDegraded == reason {
		return false
	}
	o.setDegraded = reason
	return true
}
