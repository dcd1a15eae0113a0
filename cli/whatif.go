package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

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
		d := ClusterDiff{Cluster: c, Degraded: res.Degraded, Details: res.DegradedDetails,
			Services: l.serviceAddresses(c, res.NetworkPolicies, res.DegradedDetails)}
		d.diff(before[c], res.NetworkPolicies)
		wi.Clusters = append(wi.Clusters, d)
	}
	return wi
}

// diff fills d with the NetworkPolicies added, changed and removed between
// before and after, and a unified diff of their YAML (policyYAML). A policy
// whose YAML is the same is unchanged, whatever defaults either side spells
// out.
func (d *ClusterDiff) diff(before, after []networkingv1.NetworkPolicy) {
	bm := map[string]string{}
	for i := range before {
		bm[before[i].Namespace+"/"+before[i].Name] = policyYAML(&before[i])
	}
	am := map[string]string{}
	for i := range after {
		am[after[i].Namespace+"/"+after[i].Name] = policyYAML(&after[i])
	}
	var diffs []string
	for _, n := range slices.Sorted(maps.Keys(am)) {
		old, ok := bm[n]
		switch {
		case !ok:
			d.Added = append(d.Added, n)
			diffs = append(diffs, unifiedDiff("/dev/null", n, "", am[n]))
		case old != am[n]:
			d.Changed = append(d.Changed, n)
			diffs = append(diffs, unifiedDiff(n, n, old, am[n]))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(bm)) {
		if _, ok := am[n]; !ok {
			d.Removed = append(d.Removed, n)
			diffs = append(diffs, unifiedDiff(n, "/dev/null", bm[n], ""))
		}
	}
	d.Diff = strings.Join(diffs, "")
}

// policyDoc is what coastguard owns in a generated NetworkPolicy, as YAML.
type policyDoc struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Metadata   policyMeta                     `json:"metadata"`
	Spec       networkingv1.NetworkPolicySpec `json:"spec"`
}

type policyMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// policyYAML renders a generated NetworkPolicy as the apiserver stores it
// (defaultNetworkPolicy), without the content-hash annotation, which
// changes with every change and says nothing a reader can use.
func policyYAML(np *networkingv1.NetworkPolicy) string {
	doc := policyDoc{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy",
		Metadata: policyMeta{Name: np.Name, Namespace: np.Namespace, Labels: np.Labels, Annotations: maps.Clone(np.Annotations)},
		Spec:     *np.Spec.DeepCopy()}
	delete(doc.Metadata.Annotations, enforce.AnnotationContentHash)
	defaultNetworkPolicy(&doc.Spec)
	b, err := yaml.Marshal(doc)
	if err != nil { // a NetworkPolicy always marshals
		return err.Error() + "\n"
	}
	return string(b)
}

// defaultNetworkPolicy applies the apiserver's NetworkPolicy defaults
// (SetDefaults_NetworkPolicy and SetDefaults_NetworkPolicyPort of
// k8s.io/kubernetes, which is not importable as a library): a port without
// a protocol is TCP; without policyTypes, Ingress, plus Egress when there
// are egress rules.
func defaultNetworkPolicy(s *networkingv1.NetworkPolicySpec) {
	tcp := corev1.ProtocolTCP
	for i := range s.Ingress {
		for j := range s.Ingress[i].Ports {
			if s.Ingress[i].Ports[j].Protocol == nil {
				s.Ingress[i].Ports[j].Protocol = &tcp
			}
		}
	}
	for i := range s.Egress {
		for j := range s.Egress[i].Ports {
			if s.Egress[i].Ports[j].Protocol == nil {
				s.Egress[i].Ports[j].Protocol = &tcp
			}
		}
	}
	if len(s.PolicyTypes) == 0 {
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(s.Egress) > 0 {
			s.PolicyTypes = append(s.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
}

// unifiedDiff is the unified diff (3 lines of context) from a to b.
func unifiedDiff(fromName, toName, a, b string) string {
	ud := difflib.UnifiedDiff{FromFile: fromName, ToFile: toName, Context: 3}
	if a != "" {
		ud.A = difflib.SplitLines(a)
	}
	if b != "" {
		ud.B = difflib.SplitLines(b)
	}
	out, err := difflib.GetUnifiedDiffString(ud)
	if err != nil { // writes to a strings.Builder do not fail
		return err.Error() + "\n"
	}
	return out
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
