package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// Through the mirror: a cluster whose pods arrive before its cluster entry,
// or whose cluster entry is deleted, is not admitted by a NotIn peer; with
// its labels it is.
func TestUnknownLabelsThroughMirror(t *testing.T) {
	w := newWorld(t, "a", "a", "b")
	w.mirror.Inventory().SetNetworks(mustNets(t, "a=10.1.0.0/16", "b=10.2.0.0/16"))
	w.labelled("a")
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindPod, "shop/web", &crdt.PodValue{Labels: map[string]string{"app": "web"}, IPs: []string{"10.2.0.1"}, Phase: "Running"})
	notUS := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"us"}}}}
	w.write("a", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{
		Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{ClusterSelector: notUS}}}},
	}, 1))
	admitted := func() bool {
		for _, np := range w.outputs.Desired() {
			for _, r := range np.Spec.Ingress {
				for _, p := range r.From {
					if p.IPBlock != nil && p.IPBlock.CIDR == "10.2.0.1/32" {
						return true
					}
				}
			}
		}
		return false
	}
	require.False(t, w.mirror.Inventory().ClusterLabelsKnown("b"))
	require.False(t, admitted(), "labels not arrived: NotIn must not match")
	w.write("b", crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"region": "eu"}})
	require.True(t, admitted(), "region=eu is NotIn [us]")
	w.write("b", crdt.KindCluster, "", nil)
	require.False(t, w.mirror.Inventory().ClusterLabelsKnown("b"))
	require.False(t, admitted(), "cluster entry deleted: labels unknown again")
}

func mustNets(t *testing.T, entries ...string) enforce.Networks {
	t.Helper()
	n, err := enforce.ParseClusterCIDRs(entries)
	require.NoError(t, err)
	return n
}
