package daemon

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

func guardResult(ref enforce.PolicyRef, parts, blocksPerPart int) enforce.Result {
	res := enforce.Result{Selected: true, RemotePeers: parts * blocksPerPart}
	for i := 0; i < parts; i++ {
		np := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{
			Name: enforce.GeneratedName(ref.Origin, ref.Name, i), Namespace: ref.Namespace,
			Annotations: map[string]string{enforce.AnnotationOrigin: ref.String(), enforce.AnnotationPart: "x"}}}
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
	remoteKS := enforce.PolicyRef{Origin: "eu-2", Namespace: "kube-system", Name: "deny-all"}
	ownKS := enforce.PolicyRef{Origin: "eu-1", Namespace: "kube-system", Name: "deny-all"}
	app := enforce.PolicyRef{Origin: "eu-2", Namespace: "shop", Name: "p"}

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
		res    enforce.Result
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
			assert.Equal(t, enforce.GeneratedName("eu-2", "p", 0), np.Name)
			assert.Empty(t, np.Spec.Ingress)
			assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
			assert.Equal(t, "a", np.Spec.PodSelector.MatchLabels["app"])
			assert.Equal(t, enforce.ContentHash(&np), np.Annotations[enforce.AnnotationContentHash])
			assert.NotContains(t, np.Annotations, enforce.AnnotationPart)
			assert.True(t, strings.Contains(out.DegradedDetails[0], "--max-"), out.DegradedDetails[0])
			assert.NotEmpty(t, tc.res.NetworkPolicies[0].Spec.Ingress, "input not mutated")
		})
	}
}

// Reports carry the applier's failure of a policy (as an error of this
// cluster) and, while the gate is closed, PartialView.
func TestReportCarriesFailuresAndPartialView(t *testing.T) {
	o := NewOutputs("eu-1")
	ref := enforce.PolicyRef{Origin: "eu-2", Namespace: "shop", Name: "p"}
	res := guardResult(ref, 1, 1)
	assert.Equal(t, "", o.report(res, 3).Degraded)

	require.True(t, o.SetGateDegraded(ReasonPartialView))
	assert.False(t, o.SetGateDegraded(ReasonPartialView))
	assert.Equal(t, ReasonPartialView, o.report(res, 3).Degraded)
	own := res
	own.Degraded = enforce.ReasonGlobalnetCoarseIdentity
	assert.Equal(t, enforce.ReasonGlobalnetCoarseIdentity, o.report(own, 3).Degraded, "a policy's own reason wins")

	changed := o.SetFailures(map[string]string{"eu-2/shop/p": "apply NetworkPolicy shop/x: forbidden"})
	assert.Equal(t, []string{"eu-2/shop/p"}, changed)
	v := o.report(res, 3)
	assert.Equal(t, "not applied: apply NetworkPolicy shop/x: forbidden", v.Error)
	assert.Empty(t, v.Degraded)
	assert.Equal(t, []string{"eu-2/shop/p"}, o.SetFailures(nil), "cleared")
	require.True(t, o.SetGateDegraded(""))
	assert.Equal(t, reportOf(res, 3), o.report(res, 3), "back to the plain report")
}
