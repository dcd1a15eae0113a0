package v1

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

type validationCase struct {
	name    string
	spec    string
	wantErr string // substring; "" = valid
}

// goOnlyCases are checked by Validate but not by the CRD. The schema of the
// borrowed selector and ipBlock types carries bounds, enums and patterns
// (hack/crdschema), and CEL checks selector requirements; what remains is
// what the apiserver cannot check within the CEL cost budget, or on every
// version: a matchLabels key (structural schemas have no propertyNames, and a
// per-key regex under 256x128 peers exceeds the budget) and except containment
// (needs the CIDR library, apiserver >= 1.31). coastguard reports these
// through Validate (render fails; the daemon reports the error in the MCNP
// status).
var goOnlyCases = map[string]bool{
	"except outside":      true,
	"except equal":        true,
	"bad matchLabels key": true,
}

var validationCases = []validationCase{
	{"minimal", `podSelector: {}`, ""},
	{"full valid", `
clusterSelector: {matchLabels: {region: eu}}
podSelector: {matchLabels: {app: db}}
policyTypes: [Ingress, Egress]
ingress:
- from:
  - clusterSelector: {}
    namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [a]}]}
  - podSelector: {matchExpressions: [{key: x, operator: Exists}]}
  - ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}
  ports:
  - {port: 80}
  - {port: http, protocol: TCP}
  - {port: 1000, endPort: 2000, protocol: UDP}
  - {protocol: SCTP}
egress:
- to: [{ipBlock: {cidr: "fd00::/64"}}]
`, ""},
	{"empty peer", `
podSelector: {}
ingress: [{from: [{}]}]`, "spec.ingress[0].from[0]: Required value: a peer must set at least one"},
	{"ipBlock with selector", `
podSelector: {}
egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}]`, "spec.egress[0].to[0]: Invalid value: \"ipBlock\": ipBlock cannot be combined"},
	{"ipBlock with clusterSelector", `
podSelector: {}
ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}, clusterSelector: {}}]}]`, "ipBlock cannot be combined"},
	{"bad cidr", `
podSelector: {}
ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]`, "spec.ingress[0].from[0].ipBlock.cidr"},
	{"except outside", `
podSelector: {}
ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.2.0.0/24]}}]}]`, "spec.ingress[0].from[0].ipBlock.except[0]"},
	{"except equal", `
podSelector: {}
ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/16, except: [10.0.0.0/16]}}]}]`, "strictly within"},
	{"port zero", `
podSelector: {}
ingress: [{ports: [{port: 0}]}]`, "spec.ingress[0].ports[0].port"},
	{"port too large", `
podSelector: {}
egress: [{ports: [{port: 70000}]}]`, "spec.egress[0].ports[0].port"},
	{"endPort below port", `
podSelector: {}
ingress: [{ports: [{port: 100, endPort: 99}]}]`, "spec.ingress[0].ports[0].endPort"},
	{"endPort without port", `
podSelector: {}
ingress: [{ports: [{endPort: 99}]}]`, "spec.ingress[0].ports[0].port: Required"},
	{"endPort with named port", `
podSelector: {}
ingress: [{ports: [{port: http, endPort: 99}]}]`, "spec.ingress[0].ports[0].endPort: Invalid value: 99: may not be used with a named port"},
	{"bad named port", `
podSelector: {}
ingress: [{ports: [{port: "Not_A_Name"}]}]`, "spec.ingress[0].ports[0].port"},
	{"named port too long", `
podSelector: {}
egress: [{ports: [{port: abcdefghijklmnopq}]}]`, "spec.egress[0].ports[0].port"},
	{"bad protocol", `
podSelector: {}
ingress: [{ports: [{port: 80, protocol: ICMP}]}]`, "spec.ingress[0].ports[0].protocol"},
	{"bad policyType", `
podSelector: {}
policyTypes: [Inbound]`, "spec.policyTypes[0]"},
	{"duplicate policyType", `
podSelector: {}
policyTypes: [Ingress, Ingress]`, "spec.policyTypes[1]: Duplicate"},
	{"bad operator", `
podSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}`, "spec.podSelector.matchExpressions[0].operator"},
	{"In without values", `
clusterSelector: {matchExpressions: [{key: a, operator: In}]}
podSelector: {}`, "spec.clusterSelector.matchExpressions[0].values"},
	{"Exists with values", `
podSelector: {}
ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: a, operator: Exists, values: [x]}]}}]}]`, "spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].values"},
	{"bad matchLabels key", `
podSelector: {matchLabels: {"-bad": x}}`, "spec.podSelector.matchLabels"},
	{"bad matchExpressions key", `
podSelector: {}
ingress: [{from: [{podSelector: {matchExpressions: [{key: "a b", operator: Exists}]}}]}]`, "spec.ingress[0].from[0].podSelector.matchExpressions[0].key"},
	{"bad requirement value", `
podSelector: {matchExpressions: [{key: a, operator: In, values: ["x y"]}]}`, "spec.podSelector.matchExpressions[0].values[0]"},
	{"named port with double dash", `
podSelector: {}
ingress: [{ports: [{port: "a--b"}]}]`, "spec.ingress[0].ports[0].port"},
	{"named port all digits", `
podSelector: {}
ingress: [{ports: [{port: "8080"}]}]`, "spec.ingress[0].ports[0].port"},
	{"named port leading dash", `
podSelector: {}
egress: [{ports: [{port: "-http"}]}]`, "spec.egress[0].ports[0].port"},
	{"good named ports", `
podSelector: {}
ingress: [{ports: [{port: "h2c"}, {port: "8-web"}, {port: "web-8"}, {port: "a-b-c"}]}]`, ""},
	{"bad except", `
podSelector: {}
ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/40]}}]}]`, "spec.ingress[0].from[0].ipBlock.except[0]"},
	{"bad ipv6 cidr", `
podSelector: {}
egress: [{to: [{ipBlock: {cidr: "fd00::/129"}}]}]`, "spec.egress[0].to[0].ipBlock.cidr"},
	{"cidr without prefix", `
podSelector: {}
egress: [{to: [{ipBlock: {cidr: 10.0.0.1}}]}]`, "spec.egress[0].to[0].ipBlock.cidr"},
	{"service peer", `
podSelector: {}
ingress: [{from: [{service: {name: db}}]}]
egress:
- to:
  - service: {name: db, namespace: shop, clusterSelector: {matchLabels: {region: eu}}}
  - service: {name: cache, clusterSelector: {}}
  - podSelector: {}
`, ""},
	{"service with clusterSelector", `
podSelector: {}
egress: [{to: [{service: {name: db}, clusterSelector: {}}]}]`, "spec.egress[0].to[0]: Invalid value: \"service\": service cannot be combined"},
	{"service with podSelector", `
podSelector: {}
ingress: [{from: [{service: {name: db}, podSelector: {}}]}]`, "service cannot be combined"},
	{"service with namespaceSelector", `
podSelector: {}
ingress: [{from: [{service: {name: db}, namespaceSelector: {}}]}]`, "spec.ingress[0].from[0]: Invalid value: \"service\""},
	{"service with ipBlock", `
podSelector: {}
egress: [{to: [{service: {name: db}, ipBlock: {cidr: 10.0.0.0/8}}]}]`, "spec.egress[0].to[0]: Invalid value: \"service\""},
	{"service without name", `
podSelector: {}
egress: [{to: [{service: {namespace: shop}}]}]`, "spec.egress[0].to[0].service.name: Required"},
	{"service name not a DNS-1035 label", `
podSelector: {}
egress: [{to: [{service: {name: 1db}}]}]`, "spec.egress[0].to[0].service.name"},
	{"service name uppercase", `
podSelector: {}
egress: [{to: [{service: {name: DB}}]}]`, "spec.egress[0].to[0].service.name"},
	{"service name too long", `
podSelector: {}
egress: [{to: [{service: {name: a234567890123456789012345678901234567890123456789012345678901234}}]}]`, "spec.egress[0].to[0].service.name"},
	{"service namespace invalid", `
podSelector: {}
ingress: [{from: [{service: {name: db, namespace: Shop.eu}}]}]`, "spec.ingress[0].from[0].service.namespace"},
	{"service clusterSelector invalid", `
podSelector: {}
ingress: [{from: [{service: {name: db, clusterSelector: {matchExpressions: [{key: a, operator: In}]}}}]}]`, "spec.ingress[0].from[0].service.clusterSelector.matchExpressions[0].values"},
	{"bad label value", `
podSelector: {}
egress: [{to: [{clusterSelector: {matchLabels: {region: "eu west"}}}]}]`, "spec.egress[0].to[0].clusterSelector.matchLabels"},
}

func TestValidate(t *testing.T) {
	for _, tc := range validationCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &MultiClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
			require.NoError(t, yaml.UnmarshalStrict([]byte(tc.spec), &p.Spec))
			err := Validate(p)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestValidateMetadata(t *testing.T) {
	require.Error(t, Validate(nil))
	p := &MultiClusterNetworkPolicy{}
	require.ErrorContains(t, Validate(p), "metadata.name: Required")
	p.Name = "Bad_Name"
	require.ErrorContains(t, Validate(p), "metadata.name: Invalid")
	p.Name = "ok"
	p.Namespace = "Bad.NS"
	require.ErrorContains(t, Validate(p), "metadata.namespace: Invalid")
}

func TestValidateLimits(t *testing.T) {
	p := &MultiClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(80)
	for i := 0; i < 129; i++ {
		p.Spec.Ingress = append(p.Spec.Ingress, MultiClusterNetworkPolicyIngressRule{})
		p.Spec.Egress = append(p.Spec.Egress, MultiClusterNetworkPolicyEgressRule{})
	}
	p.Spec.Ingress[0].Ports = make([]networkingv1.NetworkPolicyPort, 129)
	for i := range p.Spec.Ingress[0].Ports {
		p.Spec.Ingress[0].Ports[i] = networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &port}
	}
	err := Validate(p)
	require.ErrorContains(t, err, "spec.ingress[0].ports: Too many")
}

func TestSchemeRegistration(t *testing.T) {
	require.Equal(t, "networking.submariner.io", SchemeGroupVersion.Group)
	require.Equal(t, "multiclusternetworkpolicies", GroupVersionResource.Resource)
}

func TestDecodeSpecReportsUnknownFields(t *testing.T) {
	spec, unknown, err := DecodeSpec([]byte(`{"podSelector":{"matchLabels":{"a":"b"}},"zz":1,` +
		`"ingress":[{"from":[{"podSelector":{},"onlyReady":true}]}]}`))
	require.NoError(t, err)
	require.Equal(t, []string{"ingress[0].from[0].onlyReady", "zz"}, unknown)
	require.Equal(t, map[string]string{"a": "b"}, spec.PodSelector.MatchLabels, "the known fields are decoded")
	require.Len(t, spec.Ingress, 1)

	_, unknown, err = DecodeSpec([]byte(`{"podSelector":{},"policyTypes":["Ingress"]}`))
	require.NoError(t, err)
	require.Empty(t, unknown)

	_, _, err = DecodeSpec([]byte(`{"podSelector":`))
	require.Error(t, err, "malformed JSON is an error, not an unknown field")
}

// BenchmarkDecodeSpec is the mirror's decoding of one replicated spec
// (strict, to find unknown fields) against encoding/json's lenient one.
func BenchmarkDecodeSpec(b *testing.B) {
	raw := []byte(`{"clusterSelector":{"matchLabels":{"region":"eu"}},"podSelector":{"matchLabels":{"role":"db"}},` +
		`"policyTypes":["Ingress"],"ingress":[{"from":[{"clusterSelector":{},"podSelector":{"matchLabels":{"app":"web"}}}],` +
		`"ports":[{"protocol":"TCP","port":5432}]}]}`)
	b.Run("strict", func(b *testing.B) {
		for range b.N {
			if _, _, err := DecodeSpec(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for range b.N {
			var s MultiClusterNetworkPolicySpec
			if err := json.Unmarshal(raw, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
