package cli

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/reach"
)

func newConflictsCmd(o *Options) *cobra.Command {
	var intra bool
	cmd := &cobra.Command{
		Use:   "conflicts",
		Short: "Half-open flows (pod flows, and flows to other clusters' exported Services), shadowed/redundant MCNP rules, rules and MCNPs selecting nothing, isolated pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			ms, err := o.connect(ctx)
			if err != nil {
				return err
			}
			l, err := o.load(ctx, ms)
			if err != nil {
				return err
			}
			e, err := l.engine()
			if err != nil {
				o.warnf("%v", err)
			}
			rep := ConflictsReport{Report: e.Conflicts()}
			if !intra {
				rep.HalfOpen = crossCluster(rep.HalfOpen)
			}
			if rep.ServiceHalfOpen, err = l.serviceConflicts(); err != nil {
				o.warnf("%v", err)
			}
			return o.print(rep, func(w *strings.Builder) { printConflicts(w, rep) })
		},
	}
	cmd.Flags().BoolVar(&intra, "intra-cluster", false, "also report half-open flows inside one cluster")
	return cmd
}

func crossCluster(in []reach.HalfOpen) []reach.HalfOpen {
	var out []reach.HalfOpen
	for _, h := range in {
		fc, _, _ := strings.Cut(h.From, "/")
		tc, _, _ := strings.Cut(h.To, "/")
		if fc != tc {
			out = append(out, h)
		}
	}
	return out
}

// effectiveTypes is the API's documented default for policyTypes.
func effectiveTypes(s *apiv1.MultiClusterNetworkPolicySpec) []networkingv1.PolicyType {
	if len(s.PolicyTypes) > 0 {
		return s.PolicyTypes
	}
	t := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(s.Egress) > 0 {
		t = append(t, networkingv1.PolicyTypeEgress)
	}
	return t
}

// engine feeds the reachability engine with every pod and, per cluster,
// the user's NetworkPolicies plus what each MCNP rule generates there. The
// generated policies of one MCNP rule come from translating a copy of the
// MCNP holding only that rule (same selectors and policyTypes), with the
// daemon's translator; since NetworkPolicies are additive, their union is
// exactly what the whole MCNP generates, and each rule can be judged alone.
func (l *live) engine() (*reach.Engine, error) {
	e := reach.New()
	pods := l.reachPods(e)
	pols := map[string]reach.Policy{}
	for c, nps := range l.netpols {
		for i := range nps {
			if !generated(&nps[i]) {
				pols["np/"+c+"/"+nps[i].Namespace+"/"+nps[i].Name] = reach.Policy{Cluster: c, NetworkPolicy: &nps[i]}
			}
		}
	}
	for _, ref := range l.inv.Policies() {
		pol, _ := l.inv.Policy(ref)
		owner := "mcnp " + ref.String()
		for vi, v := range ruleVariants(owner, &pol.Spec) {
			vref := enforce.PolicyRef{Origin: ref.Origin, Namespace: ref.Namespace, Name: fmt.Sprintf("%s.cg-variant-%d", ref.Name, vi)}
			_ = l.inv.SetPolicy(enforce.Policy{Origin: vref.Origin, Namespace: vref.Namespace, Name: vref.Name, Generation: pol.Generation, Spec: v.spec})
			for _, c := range l.inv.Clusters() {
				for j, np := range l.admit(c, vref).NetworkPolicies {
					np := np
					groups := make([]string, max(len(np.Spec.Ingress), len(np.Spec.Egress)))
					for k := range groups {
						groups[k] = v.label
					}
					pols[fmt.Sprintf("mcnp/%s/%s/%d/%d", c, ref, vi, j)] = reach.Policy{Cluster: c, Owner: owner, NetworkPolicy: &np,
						IngressGroups: groups, EgressGroups: groups}
				}
			}
			l.inv.RemovePolicy(vref)
		}
	}
	err := e.Load(pods, pols)
	return e, err
}

// reachPods sets every cluster's namespaces in e and returns the pods that
// policies can select (pod network, with an IP, not finished).
func (l *live) reachPods(e *reach.Engine) []reach.Pod {
	var pods []reach.Pod
	for c, ps := range l.pods {
		for n, lbls := range l.ns[c] {
			e.SetNamespace(c, n, lbls)
		}
		for i := range ps {
			p := &ps[i]
			if p.Spec.HostNetwork || p.Status.PodIP == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			ip, _ := netip.ParseAddr(p.Status.PodIP)
			pods = append(pods, reach.Pod{Cluster: c, Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, IP: ip})
		}
	}
	return pods
}

// ruleVariant is an MCNP reduced to one of its rules, labelled for the
// conflict report.
type ruleVariant struct {
	label string
	spec  apiv1.MultiClusterNetworkPolicySpec
}

// ruleVariants splits an MCNP into one variant per rule (its isolation
// alone when it has none), so that a rule's flows can be told apart.
func ruleVariants(owner string, spec *apiv1.MultiClusterNetworkPolicySpec) []ruleVariant {
	var vs []ruleVariant
	base := *spec
	base.PolicyTypes = effectiveTypes(spec)
	base.Ingress, base.Egress = nil, nil
	for i := range spec.Ingress {
		s := base
		s.Ingress = spec.Ingress[i : i+1]
		vs = append(vs, ruleVariant{fmt.Sprintf("%s ingress[%d]", owner, i), s})
	}
	for i := range spec.Egress {
		s := base
		s.Egress = spec.Egress[i : i+1]
		vs = append(vs, ruleVariant{fmt.Sprintf("%s egress[%d]", owner, i), s})
	}
	if len(vs) == 0 {
		vs = append(vs, ruleVariant{owner + " (isolation only)", base})
	}
	return vs
}

func printConflicts(w *strings.Builder, r ConflictsReport) {
	fmt.Fprintf(w, "%s, %d half-open service flow groups\n", r.Summary(), len(r.ServiceHalfOpen))
	if len(r.HalfOpen) > 0 {
		fmt.Fprintln(w, "\nHALF-OPEN FLOWS (one end allows, the other denies)")
		for _, h := range r.HalfOpen {
			fmt.Fprintf(w, "  %s -> %s on %s: %d flow(s), %s\n    e.g. %s -> %s\n    allowed by: %s\n    denied by:  %s\n",
				h.From, h.To, h.Port, h.Flows, h.Kind, h.Example[0], h.Example[1], strings.Join(h.AllowedBy, ", "), strings.Join(h.DeniedBy, ", "))
		}
	}
	printServiceConflicts(w, r.ServiceHalfOpen)
	if len(r.Redundant) > 0 {
		fmt.Fprintln(w, "\nSHADOWED / REDUNDANT RULES (every flow they allow is allowed by other rules)")
		for _, x := range r.Redundant {
			fmt.Fprintf(w, "  %s\n    shadowed by: %s\n", x.Group, strings.Join(x.ShadowedBy, ", "))
		}
	}
	if len(r.EmptyRules) > 0 {
		fmt.Fprintln(w, "\nRULES SELECTING NO POD IN ANY CLUSTER")
		for _, x := range r.EmptyRules {
			fmt.Fprintf(w, "  %s\n", x)
		}
	}
	if len(r.EmptyPolicies) > 0 {
		fmt.Fprintln(w, "\nPOLICIES SELECTING NO POD IN ANY CLUSTER")
		for _, x := range r.EmptyPolicies {
			fmt.Fprintf(w, "  %s\n", x)
		}
	}
	if len(r.IsolatedPods) > 0 {
		fmt.Fprintln(w, "\nISOLATED PODS (reach no pod and no pod reaches them)")
		for _, x := range r.IsolatedPods {
			fmt.Fprintf(w, "  %s\n", x)
		}
	}
}
