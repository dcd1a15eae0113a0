package cli

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// ClusterExplanation is what one MCNP does in one cluster.
type ClusterExplanation struct {
	Cluster  string   `json:"cluster"`
	Enforced bool     `json:"enforced"`
	Why      string   `json:"why"`
	Degraded string   `json:"degraded,omitempty"`
	Details  []string `json:"details,omitempty"`
	// Live compares the generated NetworkPolicies with the cluster's:
	// "in sync", or what differs.
	Live            string                       `json:"live,omitempty"`
	NetworkPolicies []networkingv1.NetworkPolicy `json:"networkPolicies,omitempty"`
	// Peers lists, per generated rule, the pods it admits.
	Peers []RulePeers `json:"peers,omitempty"`
	// Services are the exactness decisions for the exported Services of
	// other clusters whose backends or addresses the egress rules admit.
	Services []ServiceAddress `json:"services,omitempty"`
}

// RulePeers are the pods one generated rule admits.
type RulePeers struct {
	NetworkPolicy string   `json:"networkPolicy"`
	Rule          string   `json:"rule"` // ingress[i] / egress[i]
	Ports         string   `json:"ports"`
	Pods          []string `json:"pods"` // cluster/ns/pod
	// Services are the exported Services' addresses among the rule's
	// ipBlocks ("service CLUSTER/NS/NAME ClusterIP IP").
	Services []string `json:"services,omitempty"`
	Other    []string `json:"other,omitempty"`
}

// Explanation is the explain document.
type Explanation struct {
	Policy   string               `json:"policy"`
	Clusters []ClusterExplanation `json:"clusters"`
}

func newExplainCmd(o *Options) *cobra.Command {
	var ns string
	var showYAML bool
	cmd := &cobra.Command{
		Use:   "explain -n NAMESPACE NAME",
		Short: "Where an MCNP is enforced and why not elsewhere, its generated NetworkPolicies and the peers they admit",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ms, err := o.connect(ctx)
			if err != nil {
				return err
			}
			l, err := o.load(ctx, ms)
			if err != nil {
				return err
			}
			ex, err := explain(l, ns, args[0])
			if err != nil {
				return err
			}
			return o.print(ex, func(w *strings.Builder) { printExplanation(w, ex, showYAML) })
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", "default", "namespace of the MCNP")
	cmd.Flags().BoolVar(&showYAML, "show-policies", false, "print the generated NetworkPolicies (text output)")
	return cmd
}

func explain(l *live, ns, name string) (*Explanation, error) {
	var ref *enforce.PolicyRef
	for origin, ps := range l.mcnps {
		for _, p := range ps {
			if p.Namespace == ns && p.Name == name {
				if ref != nil {
					return nil, fmt.Errorf("MCNP %s/%s exists in clusters %s and %s; they are distinct policies (use --contexts to pick one)", ns, name, ref.Origin, origin)
				}
				ref = &enforce.PolicyRef{Origin: origin, Namespace: ns, Name: name}
			}
		}
	}
	if ref == nil {
		return nil, fmt.Errorf("MCNP %s/%s not found in any cluster", ns, name)
	}
	pol, _ := l.inv.Policy(*ref)
	ex := &Explanation{Policy: ref.String()}
	for _, c := range l.inv.Clusters() {
		res := l.admit(c, *ref)
		ce := ClusterExplanation{Cluster: c, Degraded: res.Degraded, Details: res.DegradedDetails, NetworkPolicies: res.NetworkPolicies}
		switch {
		case res.Error != "" && !res.Selected:
			ce.Why = "invalid policy: " + res.Error
		case !res.Selected:
			ce.Why = whyNotSelected(l, c, pol)
		case res.Degraded == enforce.ReasonNotAdmitted || res.Degraded == enforce.ReasonProtectedNamespace:
			ce.Why = "selected, but not admitted here: " + strings.Join(res.DegradedDetails, "; ")
		case res.SkippedNoNamespace:
			ce.Why = fmt.Sprintf("NamespaceMissing: selected, but cluster %s has no namespace %s: nothing is enforced there (not counted as enforced)", c, ns)
		case res.Error != "":
			ce.Enforced = true
			ce.Why = "selected; the policy is invalid, so it only isolates the selected pods: " + res.Error
		default:
			ce.Enforced = true
			ce.Why = "selected by " + selectorText(pol.Spec.ClusterSelector, ref.Origin)
		}
		if _, isMember := l.pods[c]; isMember {
			ce.Live = liveDiff(l, c, *ref, res.NetworkPolicies)
		}
		svcIdx := l.serviceIndex()
		for i := range res.NetworkPolicies {
			ce.Peers = append(ce.Peers, peersOf(l, c, &res.NetworkPolicies[i], svcIdx)...)
		}
		ce.Services = l.serviceAddresses(c, res.NetworkPolicies, res.DegradedDetails)
		ex.Clusters = append(ex.Clusters, ce)
	}
	return ex, nil
}

func selectorText(s *metav1.LabelSelector, origin string) string {
	if s == nil {
		return "no clusterSelector (the origin cluster " + origin + " only)"
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "an invalid clusterSelector"
	}
	if sel.Empty() {
		return "clusterSelector {} (every cluster)"
	}
	return "clusterSelector " + sel.String()
}

func whyNotSelected(l *live, c string, p enforce.Policy) string {
	if p.Spec.ClusterSelector == nil {
		return fmt.Sprintf("not selected: no clusterSelector, so only the origin cluster %s enforces it", p.Origin)
	}
	if !l.inv.ClusterLabelsKnown(c) {
		return fmt.Sprintf("not selected: the labels of %s are unknown, so it matches only a clusterSelector naming its ID", c)
	}
	var lbls []string
	for _, cc := range l.clusters[c] {
		if cc.Name == c {
			for k, v := range cc.Status.Labels {
				lbls = append(lbls, k+"="+v)
			}
		}
	}
	sort.Strings(lbls)
	return fmt.Sprintf("not selected: %s does not match the cluster's labels {%s}", selectorText(p.Spec.ClusterSelector, p.Origin), strings.Join(lbls, ","))
}

// liveDiff compares what the translator generates with what the cluster holds.
func liveDiff(l *live, c string, ref enforce.PolicyRef, want []networkingv1.NetworkPolicy) string {
	have := map[string]*networkingv1.NetworkPolicy{}
	for i := range l.netpols[c] {
		np := &l.netpols[c][i]
		if generated(np) && np.Annotations[enforce.AnnotationOrigin] == ref.String() {
			have[np.Name] = np
		}
	}
	var diffs []string
	for i := range want {
		w := &want[i]
		h, ok := have[w.Name]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+w.Name)
		case h.Annotations[enforce.AnnotationContentHash] != w.Annotations[enforce.AnnotationContentHash]:
			diffs = append(diffs, "differs "+w.Name+" (not yet applied, or the inventory moved since)")
		}
		delete(have, w.Name)
	}
	for n := range have {
		diffs = append(diffs, "extra "+n)
	}
	sort.Strings(diffs)
	if len(diffs) == 0 {
		return "in sync"
	}
	return strings.Join(diffs, "; ")
}

func portsText(ports []networkingv1.NetworkPolicyPort) string {
	if len(ports) == 0 {
		return "all ports"
	}
	var s []string
	for _, p := range ports {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		switch {
		case p.Port == nil:
			s = append(s, "all/"+proto)
		case p.EndPort != nil:
			s = append(s, fmt.Sprintf("%s-%d/%s", p.Port.String(), *p.EndPort, proto))
		default:
			s = append(s, p.Port.String()+"/"+proto)
		}
	}
	return strings.Join(s, ",")
}

// peersOf resolves a generated rule's peers to pods: ipBlocks by pod IP in
// any cluster, selectors among the enforcing cluster's pods (apimachinery
// selectors).
func peersOf(l *live, c string, np *networkingv1.NetworkPolicy, svcIdx map[netip.Addr]string) []RulePeers {
	var out []RulePeers
	do := func(dir string, i int, ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer) {
		rp := RulePeers{NetworkPolicy: np.Name, Rule: fmt.Sprintf("%s[%d]", dir, i), Ports: portsText(ports)}
		seen := map[string]bool{}
		if len(peers) == 0 {
			rp.Other = append(rp.Other, "every source/destination")
		}
		for _, p := range peers {
			if p.IPBlock != nil {
				ipBlockPeer(l, p.IPBlock, svcIdx, &rp, seen)
				continue
			}
			selectorPeer(l, c, np.Namespace, p, seen)
		}
		for k := range seen {
			rp.Pods = append(rp.Pods, k)
		}
		sort.Strings(rp.Pods)
		out = append(out, rp)
	}
	for i, r := range np.Spec.Ingress {
		do("ingress", i, r.Ports, r.From)
	}
	for i, r := range np.Spec.Egress {
		do("egress", i, r.Ports, r.To)
	}
	return out
}

// ipBlockPeer explains an ipBlock peer: an exported Service's ClusterIP,
// the known pods it contains (into seen), or itself.
func ipBlockPeer(l *live, b *networkingv1.IPBlock, svcIdx map[netip.Addr]string, rp *RulePeers, seen map[string]bool) {
	pre, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return
	}
	if svc, ok := svcIdx[pre.Addr()]; ok && pre.Bits() == pre.Addr().BitLen() {
		rp.Services = append(rp.Services, "service "+svc+" ClusterIP "+pre.Addr().String())
		return
	}
	found := false
	for ip, pod := range l.byIP {
		if pre.Contains(ip) {
			seen[pod], found = true, true
		}
	}
	if !found || pre.Bits() < pre.Addr().BitLen() {
		rp.Other = append(rp.Other, "ipBlock "+b.CIDR)
	}
}

// selectorPeer adds to seen the pods of cluster c that a selector peer of a
// NetworkPolicy of namespace policyNS selects.
func selectorPeer(l *live, c, policyNS string, p networkingv1.NetworkPolicyPeer, seen map[string]bool) {
	nsSel, podSel := labels.Everything(), labels.Everything()
	if p.NamespaceSelector != nil {
		nsSel, _ = metav1.LabelSelectorAsSelector(p.NamespaceSelector)
	}
	if p.PodSelector != nil {
		podSel, _ = metav1.LabelSelectorAsSelector(p.PodSelector)
	}
	for _, pod := range l.pods[c] {
		nsOK := pod.Namespace == policyNS
		if p.NamespaceSelector != nil {
			nl := labels.Set{"kubernetes.io/metadata.name": pod.Namespace}
			for k, v := range l.ns[c][pod.Namespace] {
				nl[k] = v
			}
			nsOK = nsSel.Matches(nl)
		}
		if nsOK && podSel.Matches(labels.Set(pod.Labels)) && pod.Status.PodIP != "" && !pod.Spec.HostNetwork {
			seen[c+"/"+pod.Namespace+"/"+pod.Name] = true
		}
	}
}

func printExplanation(w *strings.Builder, ex *Explanation, showYAML bool) {
	fmt.Fprintf(w, "MCNP %s\n", ex.Policy)
	for _, c := range ex.Clusters {
		mark := "not enforced"
		if c.Enforced {
			mark = fmt.Sprintf("ENFORCED, %d NetworkPolicy(ies)", len(c.NetworkPolicies))
		}
		fmt.Fprintf(w, "\n%s: %s\n  why: %s\n", c.Cluster, mark, c.Why)
		if c.Degraded != "" {
			fmt.Fprintf(w, "  degraded: %s %s\n", c.Degraded, strings.Join(c.Details, "; "))
		}
		if c.Live != "" && (c.Enforced || c.Live != "in sync") {
			fmt.Fprintf(w, "  live: %s\n", c.Live)
		}
		for _, p := range c.Peers {
			pods := strings.Join(p.Pods, " ")
			if pods == "" {
				pods = "(no pod)"
			}
			if pods == "(no pod)" && len(p.Services) > 0 {
				pods = strings.Join(p.Services, " ")
			} else if len(p.Services) > 0 {
				pods += " + " + strings.Join(p.Services, ", ")
			}
			fmt.Fprintf(w, "  %s %s on %s admits: %s", p.NetworkPolicy, p.Rule, p.Ports, pods)
			if len(p.Other) > 0 {
				fmt.Fprintf(w, " + %s", strings.Join(p.Other, ", "))
			}
			fmt.Fprintln(w)
		}
		printServiceAddresses(w, c.Services)
		if showYAML {
			for i := range c.NetworkPolicies {
				b, _ := yaml.Marshal(&c.NetworkPolicies[i])
				fmt.Fprintf(w, "  ---\n%s", indent(string(b), "  "))
			}
		}
	}
}

func indent(s, p string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return p + strings.Join(lines, "\n"+p) + "\n"
}
