package cli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
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
				pre, err := netip.ParsePrefix(p.IPBlock.CIDR)
				if err != nil {
					continue
				}
				if svc, ok := svcIdx[pre.Addr()]; ok && pre.Bits() == pre.Addr().BitLen() {
					rp.Services = append(rp.Services, "service "+svc+" ClusterIP "+pre.Addr().String())
					continue
				}
				found := false
				for ip, pod := range l.byIP {
					if pre.Contains(ip) {
						seen[pod], found = true, true
					}
				}
				if !found || pre.Bits() < pre.Addr().BitLen() {
					rp.Other = append(rp.Other, "ipBlock "+p.IPBlock.CIDR)
				}
				continue
			}
			nsSel, podSel := labels.Everything(), labels.Everything()
			if p.NamespaceSelector != nil {
				nsSel, _ = metav1.LabelSelectorAsSelector(p.NamespaceSelector)
			}
			if p.PodSelector != nil {
				podSel, _ = metav1.LabelSelectorAsSelector(p.PodSelector)
			}
			for _, pod := range l.pods[c] {
				nsOK := pod.Namespace == np.Namespace
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

// ---- what-if

// ClusterDiff is the change of generated NetworkPolicies in one cluster.
type ClusterDiff struct {
	Cluster string   `json:"cluster"`
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Diff    string   `json:"diff,omitempty"`
	// Degraded and Details are the candidate's Degraded reason there, as
	// the daemon would report it; Services its exactness decisions for
	// the exported Services of other clusters (the ClusterIP rules).
	Degraded string           `json:"degraded,omitempty"`
	Details  []string         `json:"details,omitempty"`
	Services []ServiceAddress `json:"services,omitempty"`
}

// WhatIf is the what-if document.
type WhatIf struct {
	Policy   string        `json:"policy"`
	Exists   bool          `json:"exists"`
	Error    string        `json:"error,omitempty"`
	Clusters []ClusterDiff `json:"clusters"`
}

func newWhatIfCmd(o *Options) *cobra.Command {
	var file, origin string
	cmd := &cobra.Command{
		Use:   "what-if -f candidate.yaml [--origin CLUSTER]",
		Short: "Diff of the generated NetworkPolicies in every cluster if this MCNP were applied, from the live inventory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b []byte
			var err error
			if file == "-" {
				b, err = io.ReadAll(o.In)
			} else {
				b, err = os.ReadFile(file)
			}
			if err != nil {
				return err
			}
			var cand v1.MultiClusterNetworkPolicy
			if err := yaml.UnmarshalStrict(b, &cand); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if cand.Kind != v1.KindMultiClusterNetworkPolicy || cand.Name == "" {
				return errors.New("the file must hold one MultiClusterNetworkPolicy with a name")
			}
			if cand.Namespace == "" {
				cand.Namespace = "default"
			}
			if err := v1.Validate(&cand); err != nil {
				o.warnf("the apiserver would reject this policy: %v", err)
			}
			ctx := cmd.Context()
			ms, err := o.connect(ctx)
			if err != nil {
				return err
			}
			if origin == "" {
				origin = ms[0].ID
				if cur, err := o.currentContext(); err == nil {
					if m, err := o.find(ms, cur); err == nil {
						origin = m.ID
					}
				}
			}
			om, err := o.find(ms, origin)
			if err != nil {
				return err
			}
			l, err := o.load(ctx, ms)
			if err != nil {
				return err
			}
			wi := whatIf(l, om.ID, &cand)
			return o.print(wi, func(w *strings.Builder) { printWhatIf(w, wi) })
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "candidate MCNP manifest (- for stdin)")
	cmd.Flags().StringVar(&origin, "origin", "", "cluster (or context) the MCNP would be applied in (default: the current context)")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

func whatIf(l *live, origin string, cand *v1.MultiClusterNetworkPolicy) *WhatIf {
	ref := enforce.PolicyRef{Origin: origin, Namespace: cand.Namespace, Name: cand.Name}
	_, exists := l.inv.Policy(ref)
	wi := &WhatIf{Policy: ref.String(), Exists: exists}
	before := map[string][]networkingv1.NetworkPolicy{}
	for _, c := range l.inv.Clusters() {
		before[c] = l.admit(c, ref).NetworkPolicies
	}
	if err := l.inv.SetPolicy(enforce.Policy{Origin: origin, Namespace: cand.Namespace, Name: cand.Name, Generation: cand.Generation + 1, Spec: cand.Spec}); err != nil {
		wi.Error = err.Error()
	}
	for _, c := range l.inv.Clusters() {
		res := l.admit(c, ref)
		after := res.NetworkPolicies
		d := ClusterDiff{Cluster: c, Degraded: res.Degraded, Details: res.DegradedDetails,
			Services: l.serviceAddresses(c, after, res.DegradedDetails)}
		bm := map[string]networkingv1.NetworkPolicy{}
		for _, np := range before[c] {
			bm[np.Name] = np
		}
		var diffs []string
		for _, np := range after {
			old, ok := bm[np.Name]
			switch {
			case !ok:
				d.Added = append(d.Added, np.Namespace+"/"+np.Name)
				diffs = append(diffs, "+ "+np.Name+"\n"+cmp.Diff(networkingv1.NetworkPolicySpec{}, np.Spec))
			case old.Annotations[enforce.AnnotationContentHash] != np.Annotations[enforce.AnnotationContentHash]:
				d.Changed = append(d.Changed, np.Namespace+"/"+np.Name)
				diffs = append(diffs, "~ "+np.Name+"\n"+cmp.Diff(old.Spec, np.Spec))
			}
			delete(bm, np.Name)
		}
		for n, np := range bm {
			d.Removed = append(d.Removed, np.Namespace+"/"+n)
			diffs = append(diffs, "- "+n)
		}
		sort.Strings(d.Removed)
		d.Diff = strings.Join(diffs, "\n")
		wi.Clusters = append(wi.Clusters, d)
	}
	return wi
}

func printWhatIf(w *strings.Builder, wi *WhatIf) {
	verb := "creating"
	if wi.Exists {
		verb = "changing"
	}
	fmt.Fprintf(w, "what if: %s MCNP %s\n", verb, wi.Policy)
	if wi.Error != "" {
		fmt.Fprintf(w, "policy error: %s\n", wi.Error)
	}
	for _, c := range wi.Clusters {
		if len(c.Added)+len(c.Removed)+len(c.Changed) == 0 {
			fmt.Fprintf(w, "\n%s: no change\n", c.Cluster)
		} else {
			fmt.Fprintf(w, "\n%s: %d added, %d changed, %d removed\n%s\n", c.Cluster, len(c.Added), len(c.Changed), len(c.Removed), indent(c.Diff, "  "))
		}
		if c.Degraded != "" {
			fmt.Fprintf(w, "  degraded: %s %s\n", c.Degraded, strings.Join(c.Details, "; "))
		}
		printServiceAddresses(w, c.Services)
	}
}
