package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
)

// oneBlockResult is a result of ref with one generated NetworkPolicy
// admitting one address.
func oneBlockResult(ref enforce.PolicyRef) enforce.Result {
	np := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{
		Name: enforce.GeneratedName(ref.Origin, ref.Name, 0), Namespace: ref.Namespace,
		Annotations: map[string]string{enforce.AnnotationOrigin: ref.String()}}}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.1/32"}}}}}
	return enforce.Result{Selected: true, RemotePeers: 1, NetworkPolicies: []networkingv1.NetworkPolicy{np}}
}

// Reports carry the applier's failure of a policy (as an error of this
// cluster) and, while the gate is closed, PartialView.
func TestReportCarriesFailuresAndPartialView(t *testing.T) {
	o := model.NewOutputs("eu-1")
	ref := enforce.PolicyRef{Origin: "eu-2", Namespace: "shop", Name: "p"}
	res := oneBlockResult(ref)
	assert.Equal(t, "", o.Report(ref, res, 3).Degraded)

	require.True(t, o.SetGateDegraded(ReasonPartialView))
	assert.False(t, o.SetGateDegraded(ReasonPartialView))
	assert.Equal(t, ReasonPartialView, o.Report(ref, res, 3).Degraded)
	own := res
	own.Degraded = enforce.ReasonGlobalnetCoarseIdentity
	assert.Equal(t, enforce.ReasonGlobalnetCoarseIdentity, o.Report(ref, own, 3).Degraded, "a policy's own reason wins")

	changed := o.SetFailures(map[enforce.PolicyRef]string{ref: "apply NetworkPolicy shop/x: forbidden"})
	assert.Equal(t, []enforce.PolicyRef{ref}, changed)
	v := o.Report(ref, res, 3)
	assert.Equal(t, "not applied: apply NetworkPolicy shop/x: forbidden", v.Error)
	assert.Empty(t, v.Degraded)
	assert.Equal(t, []enforce.PolicyRef{ref}, o.SetFailures(nil), "cleared")
	require.True(t, o.SetGateDegraded(""))
	assert.Equal(t, model.NewOutputs("eu-1").Report(ref, res, 3), o.Report(ref, res, 3), "back to the plain report")
}
