package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
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

// LoadConsent reads and validates a consent file (YAML or JSON; unknown
// fields are errors).
func LoadConsent(path string) (*Consent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("consent file: %w", err)
	}
	var c Consent
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("consent file %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("consent file %s: %w", path, err)
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
	set[enforce.ClusterIDLabel] = id
	return set, true
}

// originLabels are the labels consent rules see for a remote origin.
func (c *Consent) originLabels(inv *enforce.Inventory, origin string) labels.Set {
	if set, ok := c.TrustedLabels(origin); ok {
		return set
	}
	if c.TrustClaimedLabels {
		if set, known := inv.ClusterLabels(origin); known {
			return set
		}
	}
	return labels.Set{enforce.ClusterIDLabel: origin}
}

// ApplyConsent checks the result of another cluster's MCNP against this
// cluster's consent: a policy no rule admits, or one that widens beyond the
// cluster set when that is forbidden, generates nothing here and is
// Degraded NotAdmitted, naming why. A nil consent admits everything.
func ApplyConsent(self string, ref enforce.PolicyRef, res enforce.Result, c *Consent, inv *enforce.Inventory) enforce.Result {
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
func wideningBlock(spec apiv1.MultiClusterNetworkPolicySpec, nets enforce.Networks) string {
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

// EventNotAdmitted is the Event on a Namespace of this cluster when an MCNP
// of another cluster is not admitted in it.
const EventNotAdmitted = "MCNPNotAdmitted"

// consentEventLoop records an Event (on the Namespace, in this cluster)
// and a log line for every MCNP of another cluster that this cluster's
// consent newly refuses. Only the leader records.
func (d *Daemon) consentEventLoop(ctx context.Context, rec record.EventRecorder) {
	if d.opts.Consent == nil {
		return
	}
	seen := map[string]bool{}
	every(ctx, SanityInterval, func(time.Time) {
		d.mu.Lock()
		refused := d.outputs.Refused()
		d.mu.Unlock()
		for k := range seen {
			if _, ok := refused[k]; !ok {
				delete(seen, k)
			}
		}
		if !d.leader.Load() {
			return
		}
		for k, why := range refused {
			if seen[k] {
				continue
			}
			seen[k] = true
			ref, _ := ParsePolicyKey(k)
			d.log.Warn("MCNP of another cluster not admitted here", "policy", k, "remote_cluster", ref.Origin, "why", why)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ref.Namespace}}
			ns.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}
			rec.Eventf(ns, corev1.EventTypeWarning, EventNotAdmitted, "MCNP %s/%s of cluster %s is not enforced here: %s", ref.Namespace, ref.Name, ref.Origin, why)
		}
	})
}
