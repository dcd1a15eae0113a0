package enforce

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// unknownWorld is base plus cluster ap-1 whose labels have not arrived: it
// is only implied by its namespace and a pod (or its entry was deleted).
func unknownWorld(t *testing.T) *Inventory {
	inv := base(t)
	inv.SetCluster(Cluster{ID: "ap-1", LabelsUnknown: true})
	inv.SetNamespace("ap-1", Namespace{Name: "shop"})
	inv.SetPod("ap-1", pod("shop", "web", l("app", "web"), "10.4.0.7"))
	nw := nets(t, "eu-1=10.1.0.0/16", "eu-2=10.2.0.0/16", "us-1=10.3.0.0/16", "ap-1=10.4.0.0/16")
	inv.SetNetworks(nw)
	return inv
}

// A cluster whose labels are unknown matches no clusterSelector, neither
// positively ({}, In) nor negatively (NotIn, DoesNotExist), unless the
// selector names its ID; once its labels arrive it matches as usual.
func TestUnknownLabelsMatchNothingButTheirID(t *testing.T) {
	cases := []struct {
		selector string
		unknown  bool // ap-1 selected while its labels are unknown
		labelled bool // ap-1 selected once it is labelled region=ap
	}{
		{"{}", false, true},
		{"{matchExpressions: [{key: region, operator: NotIn, values: [eu, us]}]}", false, true},
		{"{matchExpressions: [{key: region, operator: DoesNotExist}]}", false, false},
		{"{matchExpressions: [{key: tier, operator: DoesNotExist}]}", false, true},
		{"{matchExpressions: [{key: cluster.clusterset.k8s.io, operator: NotIn, values: [eu-1]}]}", false, true},
		{"{matchLabels: {cluster.clusterset.k8s.io: ap-1}}", true, true},
		{"{matchExpressions: [{key: cluster.clusterset.k8s.io, operator: In, values: [us-1, ap-1]}]}", true, true},
		{"{matchLabels: {cluster.clusterset.k8s.io: ap-1, region: ap}}", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.selector, func(t *testing.T) {
			inv := unknownWorld(t)
			// where it is enforced (spec.clusterSelector)
			ref := PolicyRef{"eu-1", "shop", "p"}
			mustSet(t, inv, pol(t, "eu-1", "shop", "p", "clusterSelector: "+tc.selector+"\npodSelector: {}"))
			// whom it admits (a peer's clusterSelector), enforced in eu-1
			peer := PolicyRef{"eu-1", "shop", "peer"}
			mustSet(t, inv, pol(t, "eu-1", "shop", "peer", "podSelector: {}\ningress:\n- from:\n  - clusterSelector: "+tc.selector+"\n    podSelector: {matchLabels: {app: web}}"))
			check := func(want bool) {
				t.Helper()
				got, err := EnforcingClusters(inv, ref)
				require.NoError(t, err)
				require.Equal(t, want, contains(got, "ap-1"), "enforcing clusters %v", got)
				require.Equal(t, want, Evaluate("ap-1", inv, ref).Selected)
				var admitted []string
				for _, np := range Evaluate("eu-1", inv, peer).NetworkPolicies {
					for _, r := range np.Spec.Ingress {
						admitted = append(admitted, cidrs(r.From)...)
					}
				}
				require.Equal(t, want, contains(admitted, "10.4.0.7/32"), "admitted %v", admitted)
			}
			check(tc.unknown)
			inv.SetCluster(Cluster{ID: "ap-1", Labels: l("region", "ap")})
			check(tc.labelled)
			inv.SetCluster(Cluster{ID: "ap-1", LabelsUnknown: true}) // its entry deleted
			check(tc.unknown)
		})
	}
}

// A cluster the inventory has never heard of (not even implied) is an
// unknown-labels cluster too.
func TestNeverSeenClusterMatchesOnlyByID(t *testing.T) {
	inv := NewInventory()
	require.False(t, inv.ClusterLabelsKnown("x"))
	all, err := selector(&metav1.LabelSelector{})
	require.NoError(t, err)
	id, err := selector(&metav1.LabelSelector{MatchLabels: l(ClusterIDLabel, "x")})
	require.NoError(t, err)
	require.False(t, inv.clusterMatches(all, "x"))
	require.True(t, inv.clusterMatches(id, "x"))
	inv.SetCluster(Cluster{ID: "x"})
	require.True(t, inv.ClusterLabelsKnown("x"))
	require.True(t, inv.clusterMatches(all, "x"))
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
