package v1

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of the borrowed selector and ipBlock types. The CRD schema carries
// them too (hack/crdschema adds them after controller-gen), so the apiserver's
// CEL cost estimate stays within budget; Validate enforces the same bounds.
const (
	MaxSelectorRequirements = 16
	MaxSelectorValues       = 64
	MaxMatchLabels          = 64
	MaxExcept               = 64
	MaxCIDRLength           = 43
)

// Validate checks a MultiClusterNetworkPolicy with the same rules the CRD
// enforces through its OpenAPI schema and CEL rules, for callers that have no
// apiserver (coastguardd render, and the daemon as a defence in depth for
// policies received from peers). The error, when not nil, is an aggregate of
// field errors whose paths name the offending field, e.g.
// "spec.ingress[0].from[1]: Invalid value: ...: ipBlock cannot be combined
// with ...".
func Validate(p *MultiClusterNetworkPolicy) error {
	if p == nil {
		return fmt.Errorf("nil MultiClusterNetworkPolicy")
	}
	var errs field.ErrorList
	md := field.NewPath("metadata")
	if p.Name == "" {
		errs = append(errs, field.Required(md.Child("name"), ""))
	} else {
		for _, m := range validation.IsDNS1123Subdomain(p.Name) {
			errs = append(errs, field.Invalid(md.Child("name"), p.Name, m))
		}
	}
	if p.Namespace != "" {
		for _, m := range validation.IsDNS1123Label(p.Namespace) {
			errs = append(errs, field.Invalid(md.Child("namespace"), p.Namespace, m))
		}
	}
	errs = append(errs, ValidateSpec(&p.Spec, field.NewPath("spec"))...)
	return errs.ToAggregate()
}

// ValidateSpec validates a spec; see Validate.
func ValidateSpec(s *MultiClusterNetworkPolicySpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.ClusterSelector != nil {
		errs = append(errs, validateSelector(s.ClusterSelector, path.Child("clusterSelector"))...)
	}
	errs = append(errs, validateSelector(&s.PodSelector, path.Child("podSelector"))...)
	if len(s.PolicyTypes) > 2 {
		errs = append(errs, field.TooMany(path.Child("policyTypes"), len(s.PolicyTypes), 2))
	}
	seen := map[networkingv1.PolicyType]bool{}
	for i, t := range s.PolicyTypes {
		p := path.Child("policyTypes").Index(i)
		if t != networkingv1.PolicyTypeIngress && t != networkingv1.PolicyTypeEgress {
			errs = append(errs, field.NotSupported(p, t, []string{string(networkingv1.PolicyTypeIngress), string(networkingv1.PolicyTypeEgress)}))
		} else if seen[t] {
			errs = append(errs, field.Duplicate(p, t))
		}
		seen[t] = true
	}
	if len(s.Ingress) > 256 {
		errs = append(errs, field.TooMany(path.Child("ingress"), len(s.Ingress), 256))
	}
	if len(s.Egress) > 256 {
		errs = append(errs, field.TooMany(path.Child("egress"), len(s.Egress), 256))
	}
	for i, r := range s.Ingress {
		rp := path.Child("ingress").Index(i)
		errs = append(errs, validatePorts(r.Ports, rp.Child("ports"))...)
		errs = append(errs, validatePeers(r.From, rp.Child("from"))...)
	}
	for i, r := range s.Egress {
		rp := path.Child("egress").Index(i)
		errs = append(errs, validatePorts(r.Ports, rp.Child("ports"))...)
		errs = append(errs, validatePeers(r.To, rp.Child("to"))...)
	}
	return errs
}

func validateSelector(sel *metav1.LabelSelector, path *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, path)
	if len(sel.MatchLabels) > MaxMatchLabels {
		errs = append(errs, field.TooMany(path.Child("matchLabels"), len(sel.MatchLabels), MaxMatchLabels))
	}
	if len(sel.MatchExpressions) > MaxSelectorRequirements {
		errs = append(errs, field.TooMany(path.Child("matchExpressions"), len(sel.MatchExpressions), MaxSelectorRequirements))
	}
	for i, r := range sel.MatchExpressions {
		if len(r.Values) > MaxSelectorValues {
			errs = append(errs, field.TooMany(path.Child("matchExpressions").Index(i).Child("values"), len(r.Values), MaxSelectorValues))
		}
	}
	if len(errs) == 0 {
		// Belt and braces: everything that validates must also convert.
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs = append(errs, field.Invalid(path, sel, err.Error()))
		}
	}
	return errs
}

func validatePorts(ports []networkingv1.NetworkPolicyPort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(ports) > 128 {
		errs = append(errs, field.TooMany(path, len(ports), 128))
	}
	for i, p := range ports {
		pp := path.Index(i)
		if p.Protocol != nil {
			switch *p.Protocol {
			case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
			default:
				errs = append(errs, field.NotSupported(pp.Child("protocol"), *p.Protocol, []string{"TCP", "UDP", "SCTP"}))
			}
		}
		named := false
		if p.Port != nil {
			if p.Port.Type == intstr.String {
				named = true
				for _, m := range validation.IsValidPortName(p.Port.StrVal) {
					errs = append(errs, field.Invalid(pp.Child("port"), p.Port.StrVal, m))
				}
			} else {
				for _, m := range validation.IsValidPortNum(int(p.Port.IntVal)) {
					errs = append(errs, field.Invalid(pp.Child("port"), p.Port.IntVal, m))
				}
			}
		}
		if p.EndPort != nil {
			switch {
			case p.Port == nil:
				errs = append(errs, field.Required(pp.Child("port"), "when endPort is set"))
			case named:
				errs = append(errs, field.Invalid(pp.Child("endPort"), *p.EndPort, "may not be used with a named port"))
			case *p.EndPort < p.Port.IntVal:
				errs = append(errs, field.Invalid(pp.Child("endPort"), *p.EndPort, "must be greater than or equal to port"))
			case *p.EndPort > 65535:
				errs = append(errs, field.Invalid(pp.Child("endPort"), *p.EndPort, "must be between 1 and 65535, inclusive"))
			}
		}
	}
	return errs
}

func validatePeers(peers []MultiClusterNetworkPolicyPeer, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(peers) > 128 {
		errs = append(errs, field.TooMany(path, len(peers), 128))
	}
	for i := range peers {
		p := &peers[i]
		pp := path.Index(i)
		selectors := p.ClusterSelector != nil || p.NamespaceSelector != nil || p.PodSelector != nil
		if !selectors && p.IPBlock == nil && p.Service == nil {
			errs = append(errs, field.Required(pp, "a peer must set at least one of clusterSelector, namespaceSelector, podSelector, ipBlock, service"))
			continue
		}
		if selectors && p.IPBlock != nil {
			errs = append(errs, field.Invalid(pp, "ipBlock", "ipBlock cannot be combined with clusterSelector, namespaceSelector or podSelector"))
		}
		if p.Service != nil {
			if selectors || p.IPBlock != nil {
				errs = append(errs, field.Invalid(pp, "service", "service cannot be combined with clusterSelector, namespaceSelector, podSelector or ipBlock (select its clusters with service.clusterSelector)"))
			}
			errs = append(errs, validateServicePeer(p.Service, pp.Child("service"))...)
		}
		if p.ClusterSelector != nil {
			errs = append(errs, validateSelector(p.ClusterSelector, pp.Child("clusterSelector"))...)
		}
		if p.NamespaceSelector != nil {
			errs = append(errs, validateSelector(p.NamespaceSelector, pp.Child("namespaceSelector"))...)
		}
		if p.PodSelector != nil {
			errs = append(errs, validateSelector(p.PodSelector, pp.Child("podSelector"))...)
		}
		if p.IPBlock != nil {
			errs = append(errs, validateIPBlock(p.IPBlock, pp.Child("ipBlock"))...)
		}
	}
	return errs
}

func validateIPBlock(b *networkingv1.IPBlock, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if b.CIDR == "" {
		return append(errs, field.Required(path.Child("cidr"), ""))
	}
	if len(b.Except) > MaxExcept {
		errs = append(errs, field.TooMany(path.Child("except"), len(b.Except), MaxExcept))
	}
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || len(b.CIDR) > MaxCIDRLength {
		return append(errs, field.Invalid(path.Child("cidr"), b.CIDR, "must be a valid CIDR"))
	}
	for i, e := range b.Except {
		ep, err := netip.ParsePrefix(e)
		switch {
		case err != nil || len(e) > MaxCIDRLength:
			errs = append(errs, field.Invalid(path.Child("except").Index(i), e, "must be a valid CIDR"))
		case ep.Addr().Is4() != cidr.Addr().Is4() || ep.Bits() <= cidr.Bits() || !cidr.Contains(ep.Addr()):
			errs = append(errs, field.Invalid(path.Child("except").Index(i), e, "must be strictly within "+b.CIDR))
		}
	}
	return errs
}

func validateServicePeer(s *ServicePeer, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), "the name of an exported Service"))
	} else {
		// Service names are DNS-1035 labels (the apiserver's rule for
		// Services): a Service of another name cannot exist.
		for _, m := range validation.IsDNS1035Label(s.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), s.Name, m))
		}
	}
	if s.Namespace != "" {
		for _, m := range validation.IsDNS1123Label(s.Namespace) {
			errs = append(errs, field.Invalid(path.Child("namespace"), s.Namespace, m))
		}
	}
	if s.ClusterSelector != nil {
		errs = append(errs, validateSelector(s.ClusterSelector, path.Child("clusterSelector"))...)
	}
	return errs
}
