package reach

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// HalfOpen is a group of flows one side explicitly allows and the other
// side denies, for one port class and one (source, destination) namespace
// pair.
type HalfOpen struct {
	// Kind is "ingress-allowed-egress-denied" (the destination's ingress
	// rules admit the source, the source's own egress policies deny it) or
	// "egress-allowed-ingress-denied".
	Kind      string    `json:"kind"`
	From      string    `json:"from"` // cluster/namespace
	To        string    `json:"to"`
	Port      string    `json:"port"`
	Flows     int       `json:"flows"`
	Example   [2]string `json:"example"` // source pod, destination pod
	AllowedBy []string  `json:"allowedBy"`
	DeniedBy  []string  `json:"deniedBy"` // the isolating policies on the denying side
}

// Redundant is a rule group every flow of which another group also allows.
type Redundant struct {
	Group      string   `json:"rule"`
	Owner      string   `json:"owner"`
	ShadowedBy []string `json:"shadowedBy"`
}

// Report is the outcome of Conflicts.
type Report struct {
	HalfOpen      []HalfOpen  `json:"halfOpen"`
	Redundant     []Redundant `json:"redundant"`
	EmptyRules    []string    `json:"rulesSelectingNothing"`
	EmptyPolicies []string    `json:"policiesSelectingNothing"`
	IsolatedPods  []string    `json:"isolatedPods"`
	Pods          int         `json:"pods"`
	Policies      int         `json:"policies"`
}

// ownersOf lists the owners of rules allowing s->t in a direction, and the
// isolating policies of the pod.
func (e *Engine) decisive(pod int, other int, egress bool, q Probe) (allow, isolating []string) {
	ps := e.pods[pod]
	for _, p := range e.byNS[nsKey(ps.Cluster, ps.Namespace)] {
		if !p.targets.has(pod) || (egress && !p.egressIso) || (!egress && !p.ingressIso) {
			continue
		}
		isolating = append(isolating, p.owner)
		for _, r := range p.rules {
			if r.egress == egress && r.matches(q) && r.bits.has(other) {
				allow = append(allow, r.group)
			}
		}
	}
	sort.Strings(allow)
	sort.Strings(isolating)
	return slices.Compact(allow), slices.Compact(isolating)
}

// Conflicts computes the conflict report over every port class.
func (e *Engine) Conflicts() Report {
	rep := Report{Pods: len(e.byKey), Policies: len(e.policies)}
	live := e.liveProbes()
	groups := halfOpenGroups{e: e, groups: map[halfOpenKey]*HalfOpen{}}
	reachOut, reachIn := e.scanHalfOpen(live, &groups)
	for _, g := range groups.groups {
		rep.HalfOpen = append(rep.HalfOpen, *g)
	}
	sort.Slice(rep.HalfOpen, func(i, j int) bool {
		x, y := rep.HalfOpen[i], rep.HalfOpen[j]
		return fmt.Sprint(x.From, x.To, x.Port, x.Kind) < fmt.Sprint(y.From, y.To, y.Port, y.Kind)
	})
	e.alive.each(func(s int) {
		if !reachOut.has(s) && !reachIn.has(s) {
			rep.IsolatedPods = append(rep.IsolatedPods, e.pods[s].Key())
		}
	})
	sort.Strings(rep.IsolatedPods)
	e.emptyAndRedundant(&rep, live)
	return rep
}

// halfOpenKey groups half-open flows by kind, namespaces and port class.
type halfOpenKey struct{ kind, from, to, port string }

// halfOpenGroups collects half-open flows by halfOpenKey.
type halfOpenGroups struct {
	e      *Engine
	groups map[halfOpenKey]*HalfOpen
}

// add counts the flow s->t of port class q; the group's example (and the
// rules named) are those of its smallest flow.
func (h *halfOpenGroups) add(kind string, q Probe, s, t int, allowSideEgress bool) {
	e := h.e
	sp, tp := e.pods[s], e.pods[t]
	k := halfOpenKey{kind, sp.Cluster + "/" + sp.Namespace, tp.Cluster + "/" + tp.Namespace, q.String()}
	g := h.groups[k]
	ex := [2]string{sp.Key(), tp.Key()}
	if g == nil || ex[0] < g.Example[0] || (ex[0] == g.Example[0] && ex[1] < g.Example[1]) {
		if g == nil {
			g = &HalfOpen{Kind: kind, From: k.from, To: k.to, Port: k.port}
			h.groups[k] = g
		}
		g.Example = ex
		if allowSideEgress {
			g.AllowedBy, _ = e.decisive(s, t, true, q)
			_, g.DeniedBy = e.decisive(t, s, false, q)
		} else {
			g.AllowedBy, _ = e.decisive(t, s, false, q)
			_, g.DeniedBy = e.decisive(s, t, true, q)
		}
	}
	g.Flows++
}

// scanHalfOpen adds every half-open flow of the live port classes to
// groups and returns the pods that reach some pod and those reached.
func (e *Engine) scanHalfOpen(live map[Probe]bool, groups *halfOpenGroups) (reachOut, reachIn bitset) {
	a := newBitset(e.words * 64)
	b := newBitset(e.words * 64)
	reachOut = newBitset(e.words * 64)
	reachIn = newBitset(e.words * 64)
	rowAny := newBitset(e.words * 64)
	for qi, l := range e.layers {
		q := e.probes[qi]
		if !live[q] {
			continue
		}
		e.alive.each(func(s int) {
			// ingress explicitly admits s at t, s's egress denies t
			if e.egrIso.has(s) {
				a.copyFrom(l.inAllow[s])
				a.and(e.ingIso)
				a.andNot(l.egress[s])
				a.and(e.alive)
				a.clear(s)
				a.each(func(t int) { groups.add("ingress-allowed-egress-denied", q, s, t, false) })
				// s's egress explicitly admits t, t's ingress denies s
				b.copyFrom(l.egress[s])
				b.andNot(l.inAllow[s])
				b.and(e.alive)
				b.clear(s)
				b.each(func(t int) { groups.add("egress-allowed-ingress-denied", q, s, t, true) })
			}
			rowAny.copyFrom(l.egress[s])
			rowAny.and(l.inAllow[s])
			rowAny.and(e.alive)
			rowAny.clear(s)
			if !rowAny.empty() {
				reachOut.set(s)
				reachIn.or(rowAny)
			}
		})
	}
	return reachOut, reachIn
}

// emptyAndRedundant adds the rules and policies selecting nothing and the
// redundant rule groups to rep.
func (e *Engine) emptyAndRedundant(rep *Report, live map[Probe]bool) {
	ownerTargets := map[string]bool{}
	byGroup := map[string][]*rule{}
	for _, p := range e.policies {
		ownerTargets[p.owner] = ownerTargets[p.owner] || !p.targets.empty()
		for _, r := range p.rules {
			byGroup[r.group] = append(byGroup[r.group], r)
		}
	}
	for o, any := range ownerTargets {
		if !any {
			rep.EmptyPolicies = append(rep.EmptyPolicies, o)
		}
	}
	sort.Strings(rep.EmptyPolicies)
	for g, rules := range byGroup {
		empty := true
		for _, r := range rules {
			if r.allPeers || r.hasIP || !r.bits.empty() {
				empty = false
			}
		}
		if empty {
			rep.EmptyRules = append(rep.EmptyRules, g)
			continue
		}
		if red, by := e.redundant(g, rules, live); red {
			rep.Redundant = append(rep.Redundant, Redundant{Group: g, Owner: rules[0].pol.owner, ShadowedBy: by})
		}
	}
	sort.Strings(rep.EmptyRules)
	sort.Slice(rep.Redundant, func(i, j int) bool { return rep.Redundant[i].Group < rep.Redundant[j].Group })
}

// podsOnly: every address the rule admits is a known pod (no peer-less
// rule, no ipBlock other than a /32 of a pod, as coastguard renders remote
// pods).
func (e *Engine) podsOnly(r *rule) bool {
	if r.allPeers {
		return false
	}
	for _, p := range r.peers {
		if p.cidr != nil && (!p.cidr.IsSingleIP() || len(e.byIP[p.cidr.Addr()]) == 0) {
			return false
		}
	}
	return true
}

// judgeable: the matrix represents every flow the rule admits. A named
// port (resolved per pod, which the matrix does not model) or a port range
// (whose unnamed ports share the "other" class with ports outside it)
// admits flows no port class stands for exactly, so such a rule is never
// called redundant.
func judgeable(r *rule) bool {
	for _, p := range r.ports {
		if p.EndPort != nil || (p.Port != nil && p.Port.Type != 0) {
			return false
		}
	}
	return true
}

// redundancyProbes are the port classes a redundancy is checked on: the
// live ones plus the "other" class of every protocol, so that a rule
// admitting every port of every protocol is checked on protocols no rule
// names too.
func redundancyProbes(live map[Probe]bool) []Probe {
	out := make([]Probe, 0, len(live)+3)
	for q := range live {
		out = append(out, q)
	}
	for _, p := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP} {
		if !live[Probe{Protocol: p}] {
			out = append(out, Probe{Protocol: p})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// redundant: every (target, peer, port class) the group's rules admit is
// admitted by rules of other groups, which it returns (never empty for a
// redundant group). Rules that may admit addresses outside the pods
// (ipBlocks) or ports outside the port classes (see judgeable) are never
// redundant; neither are groups that admit no flow at all (nothing shadows
// them: they select nothing, or admit only what the matrix cannot see).
func (e *Engine) redundant(g string, rules []*rule, live map[Probe]bool) (bool, []string) {
	by := map[string]bool{}
	cover := newBitset(e.words * 64)
	probes := redundancyProbes(live)
	admits := false
	for _, r := range rules {
		if !e.podsOnly(r) || !judgeable(r) {
			return false, nil
		}
		var ok = true
		r.pol.targets.each(func(t int) {
			if !ok {
				return
			}
			ps := e.pods[t]
			for _, q := range probes {
				if !r.matches(q) || r.bits.empty() {
					continue
				}
				admits = true
				cover.reset()
				var contrib []string
				for _, p := range e.byNS[nsKey(ps.Cluster, ps.Namespace)] {
					if !p.targets.has(t) {
						continue
					}
					for _, o := range p.rules {
						if o.group != g && o.egress == r.egress && o.matches(q) {
							cover.or(o.bits)
							if o.bits.intersects(r.bits) {
								contrib = append(contrib, o.group)
							}
						}
					}
				}
				if !r.bits.subsetOf(cover) {
					ok = false
					return
				}
				for _, c := range contrib {
					by[c] = true
				}
			}
		})
		if !ok {
			return false, nil
		}
	}
	if !admits || len(by) == 0 {
		return false, nil
	}
	out := make([]string, 0, len(by))
	for k := range by {
		out = append(out, k)
	}
	sort.Strings(out)
	return true, out
}

// Summary renders a short human-readable count line.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d pods, %d network policies (one per MCNP rule and cluster, plus user policies): %d half-open flow groups, %d redundant rules, %d rules and %d policies selecting nothing, %d isolated pods",
		r.Pods, r.Policies, len(r.HalfOpen), len(r.Redundant), len(r.EmptyRules), len(r.EmptyPolicies), len(r.IsolatedPods))
	return b.String()
}

// liveProbes: the port classes named by current rules (classes of removed
// policies stay in the matrix but are not reported).
func (e *Engine) liveProbes() map[Probe]bool {
	live := map[Probe]bool{{Protocol: "TCP"}: true}
	for _, p := range e.policies {
		for _, r := range p.rules {
			for _, q := range probesOf(r.ports) {
				live[q] = true
			}
		}
	}
	return live
}
