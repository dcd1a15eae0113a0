package model

import (
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
	// failures are the applier's per-policy problems (by policy key).
	failures map[string]string
	adm      enforce.Admission
	results  map[string]enforce.Result
	gens     map[string]int64 // policy generation each result was computed for
}

// NewOutputs returns empty outputs for the enforcing cluster self.
func NewOutputs(self string) *Outputs {
	return &Outputs{self: self, results: map[string]enforce.Result{}, gens: map[string]int64{}}
}

// Recompute evaluates the given policies (all of them when all is set)
// against the inventory and returns the keys whose report changed. A new
// policy generation changes the report even when the counts stay the same
// (an edited port), so that the origin's status can observe it.
func (o *Outputs) Recompute(inv *enforce.Inventory, keys []string, all bool) []string {
	if all {
		keys = keys[:0:0]
		seen := map[string]bool{}
		for _, r := range inv.Policies() {
			k := PolicyKey(r)
			keys = append(keys, k)
			seen[k] = true
		}
		for k := range o.results {
			if !seen[k] {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
	}
	var changed []string
	for _, k := range keys {
		ref, ok := ParsePolicyKey(k)
		if !ok {
			continue
		}
		old, had := o.results[k]
		oldGen := o.gens[k]
		res := o.Admit(inv, ref)
		p, exists := inv.Policy(ref)
		if !exists {
			delete(o.results, k)
			delete(o.gens, k)
		} else {
			o.results[k] = res
			o.gens[k] = p.Generation
		}
		if !had || o.Report(old, oldGen) != o.Report(res, p.Generation) {
			changed = append(changed, k)
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

// Result returns the latest result of a policy.
func (o *Outputs) Result(key string) (enforce.Result, bool) {
	r, ok := o.results[key]
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
// policy generation: reportOf plus the applier's failure for this policy, the
// empty-view gate and the cluster-set problem, if any.
func (o *Outputs) Report(r enforce.Result, generation int64) crdt.ReportValue {
	v := reportOf(r, generation)
	if v.Error == "" {
		if f := o.failures[policyKeyOf(r)]; f != "" {
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

// policyKeyOf is the policy key of a result's generated objects (their
// origin annotation), "" when it generates none.
func policyKeyOf(r enforce.Result) string {
	if len(r.NetworkPolicies) == 0 {
		return ""
	}
	return r.NetworkPolicies[0].Annotations[enforce.AnnotationOrigin]
}

// SetGuards sets the guard rails applied to every result from now on.
func (o *Outputs) SetGuards(g enforce.Guards) { o.adm.Guards = g }

// SetConsent sets what this cluster admits from other clusters (nil:
// everything) for every result from now on.
func (o *Outputs) SetConsent(c *enforce.Consent) { o.adm.Consent = c }

// NotAdmitted counts the policies this cluster's consent refuses.
func (o *Outputs) NotAdmitted() int { return len(o.Refused()) }

// Refused returns the policies this cluster's consent refuses (key ->
// why).
func (o *Outputs) Refused() map[string]string {
	out := map[string]string{}
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

// SetFailures replaces the applier's per-policy failures (policy key ->
// why) and returns the keys whose failure changed.
func (o *Outputs) SetFailures(f map[string]string) []string {
	var changed []string
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
	sort.Strings(changed)
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
