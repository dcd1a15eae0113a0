package cli

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Cluster b's consent admits nothing from a: explain, what-if and
// conflicts say what b's daemon does (nothing of a's MCNP is enforced
// there), not what a cluster without consent would do.
func TestExplainAndWhatIfApplyEachClustersConsent(t *testing.T) {
	l := fixture(t)
	refuseAll := &enforce.Consent{ClusterLabels: map[string]map[string]string{"a": {"region": "eu"}}}
	require.NoError(t, refuseAll.Validate())
	guards := enforce.DefaultGuards("coastguard-system", submarinerNamespace)
	l.adm = map[string]enforce.Admission{"a": {Guards: guards}, "b": {Guards: guards, Consent: refuseAll}}

	ex, err := explain(l, "shop", "db")
	require.NoError(t, err)
	require.Len(t, ex.Clusters, 2)
	byCluster := map[string]ClusterExplanation{}
	for _, c := range ex.Clusters {
		byCluster[c.Cluster] = c
	}
	assert.True(t, byCluster["a"].Enforced, "a's own MCNP: consent does not apply")
	assert.False(t, byCluster["b"].Enforced)
	assert.Equal(t, enforce.ReasonNotAdmitted, byCluster["b"].Degraded)
	assert.Contains(t, byCluster["b"].Why, "not admitted here")
	assert.Empty(t, byCluster["b"].NetworkPolicies)

	cand := l.mcnps["a"][0].DeepCopy()
	p := intstr.FromInt32(6000)
	cand.Spec.Ingress[0].Ports[0].Port = &p
	wi := whatIf(l, "a", cand)
	for _, c := range wi.Clusters {
		if c.Cluster == "b" {
			assert.Empty(t, c.Changed, "nothing of a's is enforced in b, before or after")
			assert.Empty(t, c.Added)
		} else {
			assert.Len(t, c.Changed, 1)
		}
	}
	ls, _ := l.inv.ClusterLabels("a")
	assert.NotContains(t, ls, "region", "b's pinned labels are reset after each of its evaluations")
}

// A cluster's consent is read from its ConfigMap labelled ConsentLabel; a
// malformed one is an error naming the cluster and the ConfigMap.
func TestClusterConsentFromConfigMap(t *testing.T) {
	cm := func(doc string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "coastguard-system", Name: "coastguard-consent",
			Labels: map[string]string{ConsentLabel: "true"}}, Data: map[string]string{ConsentKey: doc}}
	}
	o, _, _ := testOptions("")
	ctx := context.Background()

	c, err := o.clusterConsent(ctx, &member{ID: "b", Client: fake.NewClientset()})
	require.NoError(t, err)
	assert.Nil(t, c, "no ConfigMap: no consent")

	c, err = o.clusterConsent(ctx, &member{ID: "b", Client: fake.NewClientset(cm("rules:\n- name: all\n  origins: {}\n  namespaces: {}\nclusterLabels:\n  a: {region: eu}\n"))})
	require.NoError(t, err)
	require.NotNil(t, c)
	assert.Equal(t, "eu", c.ClusterLabels["a"]["region"])

	_, err = o.clusterConsent(ctx, &member{ID: "b", Client: fake.NewClientset(cm("rules:\n- origins: {}\n"))})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "b: ConfigMap coastguard-system/coastguard-consent")
	assert.Contains(t, err.Error(), "name is required")
}
