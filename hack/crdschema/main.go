// Command crdschema tightens the generated MultiClusterNetworkPolicy CRD
// where kubebuilder markers cannot reach: the schemas of the types borrowed
// from k8s.io/apimachinery and k8s.io/api (metav1.LabelSelector,
// networkingv1.IPBlock). controller-gen copies those types' schemas without
// bounds, so every string is sized at 3 MiB and every list as unbounded, and
// no CEL rule below them fits the apiserver's cost budget. This program adds:
//
//   - label selectors: maxItems/maxProperties/maxLength bounds, the operator
//     enum, qualified-name and label-value patterns (schema keywords, which
//     cost nothing in the CEL budget and work on every apiserver version), and
//     one cheap CEL rule per requirement: In/NotIn need values,
//     Exists/DoesNotExist must have none;
//   - ipBlock: format cidr (net.ParseCIDR, every apiserver version) and
//     maxLength on cidr and except.
//
// It runs from hack/generate.sh after controller-gen. The bounds match
// api/v1.Validate, which stays the fallback for daemons that receive
// policies from peers and for checks the schema cannot express (a label key
// in matchLabels, an except outside its cidr).
package main

import (
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	mcnpv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// Bounds shared with api/v1.Validate.
const (
	MaxSelectorRequirements = mcnpv1.MaxSelectorRequirements
	MaxSelectorValues       = mcnpv1.MaxSelectorValues
	MaxMatchLabels          = mcnpv1.MaxMatchLabels
	MaxExcept               = mcnpv1.MaxExcept
	// QualifiedNamePattern is a label key: optional DNS-subdomain prefix and
	// a name of at most 63 characters (metav1validation.ValidateLabelName).
	QualifiedNamePattern = `^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	// LabelValuePattern is a label value (validation.IsValidLabelValue).
	LabelValuePattern = `^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$`
	// PortNamePattern is an IANA service name (validation.IsValidPortName):
	// lower-case alphanumeric runs joined by single '-', at least one letter.
	// With maxLength 15.
	PortNamePattern = `^([0-9]+-)*[0-9]*[a-z][a-z0-9]*(-[a-z0-9]+)*$`
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdschema <crd.yaml>")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "crdschema:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		return err
	}
	n := 0
	for i := range crd.Spec.Versions {
		if s := crd.Spec.Versions[i].Schema; s != nil && s.OpenAPIV3Schema != nil {
			n += walk(s.OpenAPIV3Schema)
		}
	}
	if n == 0 {
		return fmt.Errorf("%s: no label selector or ipBlock schema found", path)
	}
	// Drop what the typed round trip adds (status, creationTimestamp).
	j, err := yaml.Marshal(&crd)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := yaml.Unmarshal(j, &m); err != nil {
		return err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

// walk tightens every selector and ipBlock schema below s and returns how
// many it found.
func walk(s *apiextensionsv1.JSONSchemaProps) int {
	n := 0
	if isSelector(s) {
		tightenSelector(s)
		n++
	}
	if isIPBlock(s) {
		tightenIPBlock(s)
		n++
	}
	if isPort(s) {
		tightenPort(s)
		n++
	}
	for k, p := range s.Properties {
		n += walk(&p)
		s.Properties[k] = p
	}
	if s.Items != nil && s.Items.Schema != nil {
		n += walk(s.Items.Schema)
	}
	return n
}

func isSelector(s *apiextensionsv1.JSONSchemaProps) bool {
	_, ml := s.Properties["matchLabels"]
	_, me := s.Properties["matchExpressions"]
	return ml && me && len(s.Properties) == 2
}

func isIPBlock(s *apiextensionsv1.JSONSchemaProps) bool {
	_, c := s.Properties["cidr"]
	_, e := s.Properties["except"]
	return c && e && len(s.Properties) == 2
}

func tightenSelector(s *apiextensionsv1.JSONSchemaProps) {
	ml := s.Properties["matchLabels"]
	ml.MaxProperties = ptr.To[int64](MaxMatchLabels)
	if ml.AdditionalProperties == nil || ml.AdditionalProperties.Schema == nil {
		panic("matchLabels without additionalProperties schema")
	}
	ml.AdditionalProperties.Schema.MaxLength = ptr.To[int64](63)
	ml.AdditionalProperties.Schema.Pattern = LabelValuePattern
	s.Properties["matchLabels"] = ml

	me := s.Properties["matchExpressions"]
	me.MaxItems = ptr.To[int64](MaxSelectorRequirements)
	req := me.Items.Schema
	key := req.Properties["key"]
	key.MaxLength = ptr.To[int64](317)
	key.Pattern = QualifiedNamePattern
	req.Properties["key"] = key
	op := req.Properties["operator"]
	op.MaxLength = ptr.To[int64](12)
	op.Enum = nil
	for _, v := range []string{"In", "NotIn", "Exists", "DoesNotExist"} {
		op.Enum = append(op.Enum, apiextensionsv1.JSON{Raw: []byte(`"` + v + `"`)})
	}
	req.Properties["operator"] = op
	vals := req.Properties["values"]
	vals.MaxItems = ptr.To[int64](MaxSelectorValues)
	vals.Items.Schema.MaxLength = ptr.To[int64](63)
	vals.Items.Schema.Pattern = LabelValuePattern
	req.Properties["values"] = vals
	req.XValidations = apiextensionsv1.ValidationRules{{
		Rule:    "(self.operator == 'In' || self.operator == 'NotIn') == (has(self.values) && size(self.values) > 0)",
		Message: "values must be non-empty for In and NotIn and empty for Exists and DoesNotExist",
	}}
	s.Properties["matchExpressions"] = me
}

func isPort(s *apiextensionsv1.JSONSchemaProps) bool {
	_, p := s.Properties["port"]
	_, e := s.Properties["endPort"]
	_, pr := s.Properties["protocol"]
	return p && e && pr && len(s.Properties) == 3
}

// tightenPort bounds a NetworkPolicyPort's int-or-string port; the pattern
// applies to named ports only.
func tightenPort(s *apiextensionsv1.JSONSchemaProps) {
	p := s.Properties["port"]
	p.MaxLength = ptr.To[int64](15)
	p.Pattern = PortNamePattern
	s.Properties["port"] = p
	pr := s.Properties["protocol"]
	pr.MaxLength = ptr.To[int64](4)
	s.Properties["protocol"] = pr
}

func tightenIPBlock(s *apiextensionsv1.JSONSchemaProps) {
	c := s.Properties["cidr"]
	c.Format = "cidr"
	c.MaxLength = ptr.To[int64](mcnpv1.MaxCIDRLength)
	s.Properties["cidr"] = c
	e := s.Properties["except"]
	e.MaxItems = ptr.To[int64](MaxExcept)
	e.Items.Schema.Format = "cidr"
	e.Items.Schema.MaxLength = ptr.To[int64](mcnpv1.MaxCIDRLength)
	s.Properties["except"] = e
}
