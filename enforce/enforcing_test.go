package enforce

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EnforcingClusters (what the MCNP status reports) agrees with where the
// translator enforces the policy, for every selector shape.
func TestEnforcingClustersMatchesTranslation(t *testing.T) {
	cases := []struct {
		selector string
		want     []string
	}{
		{"", []string{"eu-1"}},
		{"clusterSelector: {}", []string{"eu-1", "eu-2", "us-1"}},
		{"clusterSelector: {matchLabels: {region: eu}}", []string{"eu-1", "eu-2"}},
		{"clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: us-1}}", []string{"us-1"}},
		{"clusterSelector: {matchExpressions: [{key: tier, operator: DoesNotExist}]}", []string{"eu-1", "us-1"}},
		{"clusterSelector: {matchLabels: {region: ap}}", nil},
	}
	for _, tc := range cases {
		t.Run(tc.selector, func(t *testing.T) {
			inv := base(t)
			inv.SetCluster(Cluster{ID: "eu-2", Labels: l("region", "eu", "tier", "gold")})
			ref := PolicyRef{"eu-1", "shop", "p"}
			mustSet(t, inv, pol(t, "eu-1", "shop", "p", tc.selector+"\npodSelector: {}"))
			got, err := EnforcingClusters(inv, ref)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			var enforced []string
			for _, c := range inv.Clusters() {
				if Evaluate(c, inv, ref).Selected {
					enforced = append(enforced, c)
				}
			}
			require.Equal(t, enforced, got)
		})
	}
}

func TestEnforcingClustersErrors(t *testing.T) {
	inv := base(t)
	_, err := EnforcingClusters(inv, PolicyRef{"eu-1", "shop", "nope"})
	require.ErrorContains(t, err, "not in the inventory")
	p := pol(t, "eu-1", "shop", "bad", "podSelector: {}")
	p.Spec.ClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: "Sometimes"}}}
	require.Error(t, inv.SetPolicy(p), "an invalid policy is still recorded, with its error")
	_, err = EnforcingClusters(inv, p.Ref())
	require.ErrorContains(t, err, "spec.clusterSelector")
}
