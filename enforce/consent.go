package enforce

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// ReasonNotAdmitted is the reason when this (enforcing) cluster's consent does not admit the
// MCNP of another cluster here (docs/SEMANTICS.md, "Consent").
const ReasonNotAdmitted = "NotAdmitted"

// Consent is what the enforcing cluster admits from other clusters
// (--consent-file). Without it every origin may enforce in every namespace
// that is not protected (a single-team cluster set); with it, an MCNP of
// another cluster is enforced here only when a rule admits its origin and
// its namespace, and (with ForbidWidening) it opens nothing outside the
// cluster set. The cluster's own MCNPs are never subject to it.
type Consent struct {
	// Rules: an MCNP of another cluster is admitted when any rule admits
	// both its origin and its namespace.
	Rules []ConsentRule `json:"rules"`
	// ForbidWidening refuses MCNPs of other clusters with an ipBlock that
	// is not inside the cluster set's known CIDRs (pod, service or global
	// CIDRs of any cluster, as this cluster knows them), such as 0.0.0.0/0.
	ForbidWidening bool `json:"forbidWidening,omitempty"`
	// ClusterLabels pins the labels this cluster trusts for other clusters,
	// by cluster ID. They replace what those clusters claim for themselves,
	// in the consent rules and in every clusterSelector evaluated here (so
	// a cluster cannot promote itself into another cluster's rules).
	ClusterLabels map[string]map[string]string `json:"clusterLabels,omitempty"`
	// TrustClaimedLabels: for a cluster not in ClusterLabels, consent
	// rules see the labels it claims (true) or only its ID label (false,
	// the hardened profile). clusterSelectors of MCNPs are not affected.
	TrustClaimedLabels bool `json:"trustClaimedLabels,omitempty"`
}

// ConsentRule admits MCNPs of the clusters its Origins selects in the
// namespaces of this cluster its Namespaces selects.
type ConsentRule struct {
	Name string `json:"name"`
	// Origins selects origin clusters by the labels this cluster trusts
	// for them (cluster.clusterset.k8s.io is always set). Required; {} is
	// every cluster.
	Origins *metav1.LabelSelector `json:"origins"`
	// Namespaces selects namespaces of this cluster by their labels
	// (kubernetes.io/metadata.name is always set). Required; {} is every
	// namespace.
	Namespaces *metav1.LabelSelector `json:"namespaces"`

	origins, namespaces labels.Selector
}

// ParseConsent parses and validates a consent document (YAML or JSON;
// unknown fields are errors). source names it in errors.
func ParseConsent(source string, b []byte) (*Consent, error) {
	var c Consent
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("consent file %s: %w", source, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("consent file %s: %w", source, err)
	}
	return &c, nil
}

// Validate checks the consent and compiles its selectors.
func (c *Consent) Validate() error {
	var errs []error
	names := map[string]bool{}
	for i := range c.Rules {
		r := &c.Rules[i]
		at := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.Name == "":
			errs = append(errs, fmt.Errorf("%s: name is required", at))
		case names[r.Name]:
			errs = append(errs, fmt.Errorf("%s: duplicate name %q", at, r.Name))
		}
		names[r.Name] = true
		var err error
		if r.Origins == nil {
			errs = append(errs, fmt.Errorf("%s (%s): origins is required ({} admits every cluster)", at, r.Name))
		} else if r.origins, err = metav1.LabelSelectorAsSelector(r.Origins); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): origins: %w", at, r.Name, err))
		}
		if r.Namespaces == nil {
			errs = append(errs, fmt.Errorf("%s (%s): namespaces is required ({} admits every namespace)", at, r.Name))
		} else if r.namespaces, err = metav1.LabelSelectorAsSelector(r.Namespaces); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): namespaces: %w", at, r.Name, err))
		}
	}
	for id, ls := range c.ClusterLabels {
		if msgs := validation.IsDNS1123Label(id); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("clusterLabels: %q is not a cluster ID: %s", id, strings.Join(msgs, "; ")))
		}
		if err := metav1validateLabels(ls); err != nil {
			errs = append(errs, fmt.Errorf("clusterLabels[%s]: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

func metav1validateLabels(ls map[string]string) error {
	var errs []error
	for k, v := range ls {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label key %q: %s", k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %s value %q: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// TrustedLabels returns the pinned labels of cluster id (its ID label
// included) and whether it is pinned.
func (c *Consent) TrustedLabels(id string) (labels.Set, bool) {
	if c == nil {
		return nil, false
	}
	ls, ok := c.ClusterLabels[id]
	if !ok {
		return nil, false
	}
	set := labels.Set{}
	for k, v := range ls {
		set[k] = v
	}
	set[ClusterIDLabel] = id
	return set, true
}

// originLabels are the labels consent rules see for a remote origin.
func (c *Consent) originLabels(inv *Inventory, origin string) labels.Set {
	if set, ok := c.TrustedLabels(origin); ok {
		return set
	}
	if c.TrustClaimedLabels {
		if set, known := inv.ClusterLabels(origin); known {
			return set
		}
	}
	return labels.Set{ClusterIDLabel: origin}
}

// ApplyConsent checks the result of another cluster's MCNP against this
// cluster's consent: a policy no rule admits, or one that widens beyond the
// cluster set when that is forbidden, generates nothing here and is
// Degraded NotAdmitted, naming why. A nil consent admits everything.
func ApplyConsent(self string, ref PolicyRef, res Result, c *Consent, inv *Inventory) Result {
	if c == nil || ref.Origin == self || !res.Selected || res.Degraded == ReasonProtectedNamespace {
		return res
	}
	nsLabels, ok := inv.NamespaceLabels(self, ref.Namespace)
	if !ok {
		return res // NamespaceMissing: nothing is generated, and the status says so
	}
	origin := c.originLabels(inv, ref.Origin)
	admitted := ""
	for _, r := range c.Rules {
		if r.origins.Matches(origin) && r.namespaces.Matches(nsLabels) {
			admitted = r.Name
			break
		}
	}
	if admitted == "" {
		return refused(res, ReasonNotAdmitted, fmt.Sprintf(
			ReasonNotAdmitted+": no consent rule of this cluster admits MCNPs of cluster %s (labels %s) in namespace %s (--consent-file)",
			ref.Origin, origin, ref.Namespace))
	}
	if c.ForbidWidening {
		if p, ok := inv.Policy(ref); ok {
			if cidr := wideningBlock(p.Spec, inv.Networks()); cidr != "" {
				return refused(res, ReasonNotAdmitted, fmt.Sprintf(
					ReasonNotAdmitted+": ipBlock %s is outside the cluster set's CIDRs, and this cluster forbids widening by other clusters' MCNPs (consent forbidWidening; admitted by rule %s otherwise)",
					cidr, admitted))
			}
		}
	}
	return res
}

// wideningBlock returns the first ipBlock CIDR of spec that no known CIDR
// of the cluster set contains, or "".
func wideningBlock(spec apiv1.MultiClusterNetworkPolicySpec, nets Networks) string {
	var known []netip.Prefix
	for _, n := range nets {
		known = append(known, n.PodCIDRs...)
		known = append(known, n.ServiceCIDRs...)
		known = append(known, n.GlobalCIDRs...)
	}
	inside := func(cidr string) bool {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return false // invalid: validation refuses it anyway
		}
		return slices.ContainsFunc(known, func(k netip.Prefix) bool {
			return k.Addr().Is4() == p.Addr().Is4() && k.Bits() <= p.Bits() && k.Contains(p.Addr())
		})
	}
	var peers []apiv1.MultiClusterNetworkPolicyPeer
	for _, r := range spec.Ingress {
		peers = append(peers, r.From...)
	}
	for _, r := range spec.Egress {
		peers = append(peers, r.To...)
	}
	for _, p := range peers {
		if p.IPBlock != nil && !inside(p.IPBlock.CIDR) {
			return p.IPBlock.CIDR
		}
	}
	return ""
}
