package v1

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

const crdPath = "../../deploy/crds/networking.submariner.io_multiclusternetworkpolicies.yaml"

// crdValidator validates objects the way the apiserver does for this CRD:
// OpenAPI schema, list-type sets/maps and CEL rules.
type crdValidator struct {
	schema     apiservervalidation.SchemaCreateValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
}

func loadCRD(t *testing.T) crdValidator {
	t.Helper()
	b, err := os.ReadFile(crdPath)
	require.NoError(t, err)
	var v1crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(b, &v1crd))
	var crd apiextensions.CustomResourceDefinition
	require.NoError(t, apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1crd, &crd, nil))
	crd.Status.StoredVersions = []string{"v1"} // set by the apiserver on create
	// The apiserver's own CRD validation: schema structure, CEL compilation
	// and CEL cost limits.
	require.Empty(t, crdvalidation.ValidateCustomResourceDefinition(context.Background(), &crd))

	require.Len(t, crd.Spec.Versions, 1)
	var internal *apiextensions.JSONSchemaProps
	if crd.Spec.Versions[0].Schema != nil {
		internal = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	} else {
		// Internal form hoists a schema shared by all versions.
		require.NotNil(t, crd.Spec.Validation)
		internal = crd.Spec.Validation.OpenAPIV3Schema
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(internal)
	require.NoError(t, err)
	st, err := structuralschema.NewStructural(internal)
	require.NoError(t, err)
	return crdValidator{schema: sv, structural: st, cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}
}

func (v crdValidator) validate(obj map[string]any) field.ErrorList {
	errs := apiservervalidation.ValidateCustomResource(nil, obj, v.schema)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// TestCRDAgreesWithValidate runs the Validate table through the generated
// CRD's schema and CEL rules: both must accept and reject the same specs,
// and the CRD's message must name the same field.
func TestCRDAgreesWithValidate(t *testing.T) {
	v := loadCRD(t)
	for _, tc := range validationCases {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeObject(t, "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: p, namespace: ns}\nspec:\n"+indent(tc.spec))
			errs := v.validate(obj)
			if tc.wantErr == "" || goOnlyCases[tc.name] {
				require.Empty(t, errs)
				return
			}
			require.NotEmpty(t, errs)
			// The reported path names the offending field (CEL errors are
			// reported at the field carrying the rule, e.g. the peer or the
			// ports list, which is a prefix of Validate's path; schema
			// errors on a map value name the key, below Validate's path).
			found := false
			for _, e := range errs {
				if strings.HasPrefix(tc.wantErr, "spec.") && e.Field != "" && (strings.HasPrefix(tc.wantErr, e.Field) || strings.HasPrefix(e.Field, tc.wantErr)) {
					found = true
				}
				if !strings.HasPrefix(tc.wantErr, "spec.") && strings.Contains(e.Error(), tc.wantErr) {
					found = true
				}
			}
			require.True(t, found, "CRD errors %v do not name the field of %q", errs, tc.wantErr)
		})
	}
}

// decodeObject decodes YAML the way the apiserver decodes JSON bodies
// (integers stay int64).
func decodeObject(t *testing.T, y string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	require.NoError(t, err)
	u := &unstructured.Unstructured{}
	require.NoError(t, u.UnmarshalJSON(j))
	return u.Object
}

func indent(s string) string {
	lines := strings.Split(strings.TrimLeft(s, "\n"), "\n")
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n")
}

// The proposal draft's shape is rejected by the schema.
func TestCRDRejectsProposalDraft(t *testing.T) {
	v := loadCRD(t)
	obj := decodeObject(t, `
apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: test-network-policy, namespace: default}
spec:
  clusterSelector: cluster1
  podSelector: {matchLabels: {role: db}}
  policyTypes:
    ingress:
    - from: [{podSelector: {matchLabels: {key: value}}}]
`)
	errs := v.validate(obj)
	require.NotEmpty(t, errs)
	msg := errs.ToAggregate().Error()
	require.Contains(t, msg, "spec.clusterSelector")
	require.Contains(t, msg, "spec.policyTypes")
}

// The CRD stays out of Submariner's category (kubectl expands categories
// before resource names, so `kubectl get submariner` would list MCNPs) and
// shows Degraded by default, observedGeneration and clusters with -o wide.
func TestCRDNamesAndColumns(t *testing.T) {
	b, err := os.ReadFile(crdPath)
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(b, &crd))
	require.Equal(t, []string{"coastguard"}, crd.Spec.Names.Categories)
	cols := map[string]apiextensionsv1.CustomResourceColumnDefinition{}
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		cols[c.Name] = c
	}
	require.Equal(t, int32(0), cols["Degraded"].Priority)
	require.Equal(t, `.status.conditions[?(@.type=="Degraded")].status`, cols["Degraded"].JSONPath)
	require.Equal(t, int32(1), cols["Observed"].Priority)
	require.Equal(t, ".status.observedGeneration", cols["Observed"].JSONPath)
	require.Equal(t, int32(1), cols["Clusters"].Priority)
	require.Equal(t, int32(0), cols["Ready"].Priority)
}

// Every field the CRD's spec schema admits is one this build's types
// decode: DecodeSpec reports a schema field the types lack as unknown, and
// every MCNP using it would only isolate its pods (enforce.Policy.Unknown).
func TestCRDSpecFieldsAreKnown(t *testing.T) {
	st := loadCRD(t).structural
	spec, ok := st.Properties["spec"]
	require.True(t, ok)
	b, err := json.Marshal(maximal(&spec))
	require.NoError(t, err)
	_, unknown, err := DecodeSpec(b)
	require.NoError(t, err, "%s", b)
	require.Empty(t, unknown, "CRD spec fields the Go types lack")
}

// maximal is an instance of s that sets every property the schema names.
func maximal(s *structuralschema.Structural) any {
	if s.XIntOrString {
		return 1
	}
	switch s.Type {
	case "object":
		out := map[string]any{}
		for name, p := range s.Properties {
			out[name] = maximal(&p)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Structural != nil {
			out["k"] = maximal(s.AdditionalProperties.Structural)
		}
		return out
	case "array":
		if s.Items == nil {
			return []any{}
		}
		return []any{maximal(s.Items)}
	case "integer", "number":
		return 1
	case "boolean":
		return true
	default:
		return "x"
	}
}
