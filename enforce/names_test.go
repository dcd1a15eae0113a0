package enforce

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The names of issue 13: an MCNP whose name looks like another MCNP's part
// suffix, and cluster IDs and names that share a dotted join, all stay
// distinct and DNS-safe.
func TestGeneratedNameCollisionFree(t *testing.T) {
	long := strings.Repeat("x", 250)
	type id struct {
		origin, name string
		part         int
	}
	ids := []id{
		{"eu-1", "big", 0}, {"eu-1", "big", 1}, {"eu-1", "big-p2", 0},
		{"eu-1", "big.p2-3675f42a7e", 0}, {"eu-1", "big-p2-" + nameHash("eu-1", "big", 1), 0},
		{"eu", "1.big", 0}, {"eu.1", "big", 0}, {"a-b", "c", 0}, {"a", "b-c", 0},
		{"eu-1", long, 0}, {"eu-1", long + "c", 0}, {"eu-1", long, 1}, {"eu-2", long, 0},
	}
	seen := map[string]id{}
	for _, x := range ids {
		n := GeneratedName(x.origin, x.name, x.part)
		require.Empty(t, validation.IsDNS1123Subdomain(n), n)
		require.LessOrEqual(t, len(n), 253)
		prev, dup := seen[n]
		require.False(t, dup, "%v and %v share %s", prev, x, n)
		seen[n] = x
		require.Equal(t, n, GeneratedName(x.origin, x.name, x.part), "deterministic")
	}
	require.True(t, strings.HasPrefix(GeneratedName("eu-2", "payments", 0), "mcnp-eu-2.payments-"))
	require.True(t, strings.HasPrefix(GeneratedName("eu-2", "payments", 2), "mcnp-eu-2.payments-p3-"))
}

// The stand-in of an unproven MCNP's generated policy isolates exactly
// the pods and directions the policy does, allows nothing, and is told
// apart from the policy by its annotation and content hash.
func TestIsolationOnly(t *testing.T) {
	np := networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "mcnp-eu-1.db", Namespace: "shop",
			Labels:      map[string]string{LabelManagedBy: ManagedByValue},
			Annotations: map[string]string{AnnotationOrigin: "eu-1/shop/db"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.7/32"}}}}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
		},
	}
	np.Annotations[AnnotationContentHash] = ContentHash(&np)
	s := IsolationOnly(&np)
	assert.Equal(t, np.Name, s.Name)
	assert.Equal(t, np.Spec.PodSelector, s.Spec.PodSelector)
	assert.Equal(t, np.Spec.PolicyTypes, s.Spec.PolicyTypes)
	assert.Empty(t, s.Spec.Ingress)
	assert.Empty(t, s.Spec.Egress)
	assert.Equal(t, "isolation-only", s.Annotations[AnnotationUnproven])
	assert.Equal(t, "eu-1/shop/db", s.Annotations[AnnotationOrigin])
	assert.Equal(t, ContentHash(s), s.Annotations[AnnotationContentHash])
	assert.NotEqual(t, np.Annotations[AnnotationContentHash], s.Annotations[AnnotationContentHash])
	assert.Empty(t, np.Annotations[AnnotationUnproven], "the policy itself is not changed")
	assert.Len(t, np.Spec.Ingress, 1)

	// types left to the apiserver's default are spelled out: without its
	// rules an egress policy would read as ingress only
	np.Spec.PolicyTypes = nil
	np.Spec.Ingress = nil
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, IsolationOnly(&np).Spec.PolicyTypes)
}
