package model

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// An MCNP edit that leaves the report's counts unchanged (a new port) must
// still be reported as changed: the enforcing cluster then publishes a report
// with the new observedGeneration, without which the origin's status would
// wait for it forever.
func TestRecomputeReportsGenerationChange(t *testing.T) {
	w := newWorld(t, "b", "a", "b")
	w.labelled("a", "b")
	w.write("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("a", crdt.KindPod, "shop/web", &crdt.PodValue{Labels: map[string]string{"app": "web"}, IPs: []string{"10.1.0.1"}, Phase: "Running"})
	spec := func(port int) apiv1.MultiClusterNetworkPolicySpec {
		p := intstr.FromInt(port)
		return apiv1.MultiClusterNetworkPolicySpec{
			ClusterSelector: &metav1.LabelSelector{},
			Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{
				From: []apiv1.MultiClusterNetworkPolicyPeer{{
					ClusterSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &p}},
			}},
		}
	}
	w.write("a", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, spec(5432), 1))
	key := enforce.PolicyRef{Origin: "a", Namespace: "shop", Name: "db"}
	before, ok := w.outputs.Result(key)
	require.True(t, ok)
	require.Len(t, before.NetworkPolicies, 1)

	apply := func(v any) []enforce.PolicyRef {
		b, err := crdt.EncodeValue(v)
		require.NoError(t, err)
		d, _, err := w.writers["a"].Write(crdt.KindPolicy, "shop/db", b, false, 0)
		require.NoError(t, err)
		changes, err := w.observer.Apply(d)
		require.NoError(t, err)
		res := w.mirror.Apply(changes)
		return w.outputs.Recompute(w.mirror.Inventory(), res.Affected, res.All)
	}
	changed := apply(modeltest.PolicyValue(t, spec(5433), 2))
	require.Equal(t, []enforce.PolicyRef{key}, changed, "new generation, same counts: the report must be rewritten")
	after, _ := w.outputs.Result(key)
	require.Equal(t, reportOf(before, 1).NetworkPolicies, reportOf(after, 2).NetworkPolicies)
	require.Equal(t, int32(5433), after.NetworkPolicies[0].Spec.Ingress[0].Ports[0].Port.IntVal)

	require.Empty(t, apply(modeltest.PolicyValue(t, spec(5433), 2)), "same generation and result: no report write")
}

// The change set after a recompute names exactly the policies whose
// generated NetworkPolicies changed (with their current ones; none for a
// policy gone), also after a full recompute.
func TestTakeChangesNamesExactlyTheChangedPolicies(t *testing.T) {
	w := newWorld(t, "b", "a", "b")
	w.labelled("a", "b")
	w.write("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	from := func(app string) apiv1.MultiClusterNetworkPolicySpec {
		return apiv1.MultiClusterNetworkPolicySpec{
			ClusterSelector: &metav1.LabelSelector{},
			PodSelector:     metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{
				ClusterSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}}},
		}
	}
	web := enforce.PolicyRef{Origin: "a", Namespace: "shop", Name: "from-web"}
	api := enforce.PolicyRef{Origin: "a", Namespace: "shop", Name: "from-api"}
	w.write("a", crdt.KindPolicy, "shop/from-web", modeltest.PolicyValue(t, from("web"), 1))
	w.write("a", crdt.KindPolicy, "shop/from-api", modeltest.PolicyValue(t, from("api"), 1))
	first := w.outputs.TakeChanges()
	require.ElementsMatch(t, []enforce.PolicyRef{web, api}, slices.Collect(maps.Keys(first)))
	res, _ := w.outputs.Result(web)
	require.Equal(t, res.NetworkPolicies, first[web])
	require.Empty(t, w.outputs.TakeChanges(), "taken")

	// from-api is edited: only its objects change
	w.write("a", crdt.KindPolicy, "shop/from-api", modeltest.PolicyValue(t, from("cli"), 2))
	changes := w.outputs.TakeChanges()
	require.Equal(t, []enforce.PolicyRef{api}, slices.Collect(maps.Keys(changes)))
	require.NotEqual(t, first[api][0].Annotations[enforce.AnnotationContentHash], changes[api][0].Annotations[enforce.AnnotationContentHash])

	// a full recompute with nothing changed hands over nothing
	w.outputs.Recompute(w.mirror.Inventory(), nil, true)
	require.Empty(t, w.outputs.TakeChanges())

	// a deleted policy is handed over with no objects
	w.write("a", crdt.KindPolicy, "shop/from-api", nil)
	changes = w.outputs.TakeChanges()
	require.Equal(t, map[enforce.PolicyRef][]networkingv1.NetworkPolicy{api: nil}, changes)
	require.Equal(t, len(w.outputs.Desired()), w.outputs.Generated())
}
