package enforce

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func guardResult(ref PolicyRef, parts, blocksPerPart int) Result {
	res := Result{Selected: true, RemotePeers: parts * blocksPerPart}
	for i := 0; i < parts; i++ {
		np := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{
			Name: GeneratedName(ref.Origin, ref.Name, i), Namespace: ref.Namespace,
			Annotations: map[string]string{AnnotationOrigin: ref.String(), AnnotationPart: "x"}}}
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		var peers []networkingv1.NetworkPolicyPeer
		for j := 0; j < blocksPerPart; j++ {
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.1/32"}})
		}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peers}}
		res.NetworkPolicies = append(res.NetworkPolicies, np)
	}
	return res
}

func TestApplyGuards(t *testing.T) {
	g := Guards{ProtectedNamespaces: []string{"kube-system", "coastguard-system"},
		MaxNetworkPoliciesPerMCNP: 3, MaxIPBlocksPerNetworkPolicy: 10, MaxBytesPerMCNP: 1500}
	remoteKS := PolicyRef{Origin: "eu-2", Namespace: "kube-system", Name: "deny-all"}
	ownKS := PolicyRef{Origin: "eu-1", Namespace: "kube-system", Name: "deny-all"}
	app := PolicyRef{Origin: "eu-2", Namespace: "shop", Name: "p"}

	out := ApplyGuards("eu-1", remoteKS, guardResult(remoteKS, 1, 0), g)
	assert.Empty(t, out.NetworkPolicies, "a remote MCNP is not enforced in a protected namespace")
	assert.Equal(t, ReasonProtectedNamespace, out.Degraded)
	assert.Contains(t, out.DegradedDetails[0], "eu-2")

	allowed := g
	allowed.EnforceRemoteInProtected = true
	assert.Len(t, ApplyGuards("eu-1", remoteKS, guardResult(remoteKS, 1, 0), allowed).NetworkPolicies, 1, "explicitly allowed")
	assert.Len(t, ApplyGuards("eu-1", ownKS, guardResult(ownKS, 1, 0), g).NetworkPolicies, 1, "own MCNPs are enforced")

	ok := guardResult(app, 2, 5)
	assert.Equal(t, ok, ApplyGuards("eu-1", app, ok, g), "within every cap: unchanged")

	for name, tc := range map[string]struct {
		res    Result
		reason string
	}{
		"parts":    {guardResult(app, 4, 1), ReasonCapNetworkPoliciesPerMCNP},
		"ipBlocks": {guardResult(app, 1, 11), ReasonCapIPBlocksPerNetworkPolicy},
		"bytes":    {guardResult(app, 3, 10), ReasonCapBytesPerMCNP},
	} {
		t.Run(name, func(t *testing.T) {
			out := ApplyGuards("eu-1", app, tc.res, g)
			assert.Equal(t, tc.reason, out.Degraded)
			require.Len(t, out.NetworkPolicies, 1, "fails closed: isolation only")
			np := out.NetworkPolicies[0]
			assert.Equal(t, GeneratedName("eu-2", "p", 0), np.Name)
			assert.Empty(t, np.Spec.Ingress)
			assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
			assert.Equal(t, "a", np.Spec.PodSelector.MatchLabels["app"])
			assert.Equal(t, ContentHash(&np), np.Annotations[AnnotationContentHash])
			assert.NotContains(t, np.Annotations, AnnotationPart)
			assert.True(t, strings.Contains(out.DegradedDetails[0], "--max-"), out.DegradedDetails[0])
			assert.NotEmpty(t, tc.res.NetworkPolicies[0].Spec.Ingress, "input not mutated")
		})
	}
}
