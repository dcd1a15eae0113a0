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

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
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

// status names a cluster whose key fingerprint differs across views, and
// not one that a view has no key for yet.
func TestKeyMismatches(t *testing.T) {
	cc := func(name, fp string) v1.CoastguardCluster {
		c := v1.CoastguardCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
		c.Status.SigningKeyFingerprint = fp
		return c
	}
	views := map[string][]v1.CoastguardCluster{
		"a": {cc("a", "SHA256:A"), cc("b", "SHA256:B"), cc("c", "SHA256:C")},
		"b": {cc("a", "SHA256:A"), cc("b", "SHA256:B"), cc("c", "SHA256:rogue")},
		"c": {cc("a", ""), cc("b", "SHA256:B"), cc("c", "SHA256:C")},
	}
	got := keyMismatches(views)
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "cluster c's signing key differs across views: SHA256:C in a,c; SHA256:rogue in b")
}

// The trust bundle is what the other clusters agree each cluster's key is;
// disagreement or a cluster nobody pins is an error, never a bundle.
func TestTrustBundle(t *testing.T) {
	keys := map[string]map[string][]string{
		"a": {"KA": {"b", "c"}}, "b": {"KB": {"a", "c"}}, "c": {"KC": {"a", "b"}},
	}
	b, err := trustBundle(keys, []string{"a", "b", "c"})
	require.NoError(t, err)
	assert.Equal(t, "a KA\nb KB\nc KC\n", b)

	keys["c"]["rogue"] = []string{"b"}
	_, err = trustBundle(keys, []string{"a", "b", "c"})
	require.ErrorContains(t, err, "cluster c is pinned to different keys: KC in a,b; rogue in b")

	delete(keys, "c")
	_, err = trustBundle(keys, []string{"a", "b", "c"})
	require.ErrorContains(t, err, "no other cluster pins c yet")
}
