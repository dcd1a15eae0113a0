package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// consentWorld: a enforces; b (team=platform) and c (team=x) each
// originate an isolating MCNP for shop; a's shop has tier=app, and a's
// own MCNP isolates ops (no tier).
func consentWorld(t *testing.T, c *enforce.Consent) *world {
	w := newWorld(t, "a", "a", "b", "c")
	nets, err := enforce.ParseClusterCIDRs([]string{"a=10.1.0.0/16", "b=10.2.0.0/16", "c=10.3.0.0/16"})
	require.NoError(t, err)
	w.setNetworks(nets)
	if c != nil {
		require.NoError(t, c.Validate())
		w.outputs.SetConsent(c)
		w.mirror.SetTrustedLabels(c.ClusterLabels)
	}
	w.write("a", crdt.KindCluster, "", &crdt.ClusterValue{})
	w.write("b", crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"team": "platform"}})
	w.write("c", crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"team": "x"}})
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{Labels: map[string]string{"tier": "app"}})
	w.write("a", crdt.KindNamespace, "ops", &crdt.NamespaceValue{})
	isolate := apiv1.MultiClusterNetworkPolicySpec{ClusterSelector: &metav1.LabelSelector{}, PodSelector: metav1.LabelSelector{},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}
	w.write("b", crdt.KindPolicy, "shop/from-b", modeltest.PolicyValue(t, isolate, 1))
	w.write("c", crdt.KindPolicy, "shop/from-c", modeltest.PolicyValue(t, isolate, 1))
	w.write("a", crdt.KindPolicy, "ops/own", modeltest.PolicyValue(t, isolate, 1))
	return w
}

func platformInApps() *enforce.Consent {
	return &enforce.Consent{TrustClaimedLabels: true, Rules: []enforce.ConsentRule{{Name: "platform-in-apps",
		Origins:    &metav1.LabelSelector{MatchLabels: map[string]string{"team": "platform"}},
		Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "app"}}}}}
}

func (w *world) result(key string) enforce.Result {
	w.t.Helper()
	r, ok := w.outputs.Result(pref(key))
	require.True(w.t, ok, key)
	return r
}

func TestConsentAbsentAdmitsEverything(t *testing.T) {
	w := consentWorld(t, nil)
	for _, k := range []string{"b/shop/from-b", "c/shop/from-c", "a/ops/own"} {
		require.NotEmpty(t, w.result(k).NetworkPolicies, k)
	}
}

func TestConsentRules(t *testing.T) {
	w := consentWorld(t, platformInApps())
	require.NotEmpty(t, w.result("b/shop/from-b").NetworkPolicies, "b is platform, shop is an app namespace")
	r := w.result("c/shop/from-c")
	require.Empty(t, r.NetworkPolicies)
	require.Equal(t, enforce.ReasonNotAdmitted, r.Degraded)
	require.Contains(t, r.DegradedDetails[0], "no consent rule of this cluster admits MCNPs of cluster c")
	require.NotEmpty(t, w.result("a/ops/own").NetworkPolicies, "the cluster's own MCNPs are never subject to consent")
	require.Equal(t, 1, w.outputs.NotAdmitted())
	require.Contains(t, w.outputs.Refused(), pref("c/shop/from-c"))
}

// A cluster's own claims: c says team=platform. Without trust in claims
// it is refused; pinned by this cluster as platform it is admitted, and
// pinned as something else it is refused whatever it claims.
func TestConsentTrustedLabels(t *testing.T) {
	c := platformInApps()
	c.TrustClaimedLabels = false
	w := consentWorld(t, c)
	require.Equal(t, enforce.ReasonNotAdmitted, w.result("b/shop/from-b").Degraded, "b's claim is not trusted and b is not pinned")

	c = platformInApps()
	c.TrustClaimedLabels = false
	c.ClusterLabels = map[string]map[string]string{"b": {"team": "platform"}, "c": {"team": "x"}}
	w = consentWorld(t, c)
	w.write("c", crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"team": "platform"}}) // c promotes itself
	require.NotEmpty(t, w.result("b/shop/from-b").NetworkPolicies)
	require.Equal(t, enforce.ReasonNotAdmitted, w.result("c/shop/from-c").Degraded, "c's self-promotion does not count")
	set, known := w.mirror.Inventory().ClusterLabels("c")
	require.True(t, known)
	require.Equal(t, "x", set["team"], "clusterSelectors here see the pinned labels too")
}

func TestConsentForbidWidening(t *testing.T) {
	c := platformInApps()
	c.ForbidWidening = true
	w := consentWorld(t, c)
	open := func(cidr string) apiv1.MultiClusterNetworkPolicySpec {
		return apiv1.MultiClusterNetworkPolicySpec{ClusterSelector: &metav1.LabelSelector{}, PodSelector: metav1.LabelSelector{},
			Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{
				IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}}}}
	}
	w.write("b", crdt.KindPolicy, "shop/from-b", modeltest.PolicyValue(t, open("0.0.0.0/0"), 2))
	r := w.result("b/shop/from-b")
	require.Equal(t, enforce.ReasonNotAdmitted, r.Degraded)
	require.Contains(t, r.DegradedDetails[0], "ipBlock 0.0.0.0/0 is outside the cluster set's CIDRs")
	w.write("b", crdt.KindPolicy, "shop/from-b", modeltest.PolicyValue(t, open("10.3.4.0/24"), 3))
	require.NotEmpty(t, w.result("b/shop/from-b").NetworkPolicies, "inside c's pod CIDR: not widening")
	w.write("a", crdt.KindPolicy, "ops/own", modeltest.PolicyValue(t, open("0.0.0.0/0"), 2))
	require.NotEmpty(t, w.result("a/ops/own").NetworkPolicies, "the cluster's own MCNPs may open what they like")
}

func TestLoadConsent(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "consent.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	c, err := LoadConsent(write(`
rules:
- name: platform
  origins: {matchLabels: {team: platform}}
  namespaces: {}
forbidWidening: true
clusterLabels:
  eu-1: {team: platform}
`))
	require.NoError(t, err)
	require.True(t, c.ForbidWidening)
	set, ok := c.TrustedLabels("eu-1")
	require.True(t, ok)
	require.Equal(t, "eu-1", set[enforce.ClusterIDLabel])

	for body, want := range map[string]string{
		"rules: [{name: x, namespaces: {}}]": "origins is required",
		"rules: [{name: x, origins: {}}]":    "namespaces is required",
		"rules: [{name: x, origins: {}, namespaces: {}}, {name: x, origins: {}, namespaces: {}}]":    `duplicate name "x"`,
		"rules: [{origins: {}, namespaces: {}}]":                                                     "name is required",
		"rules: [{name: x, origins: {matchExpressions: [{key: a, operator: Bad}]}, namespaces: {}}]": "origins",
		"clusterLabels: {Bad_ID: {}}":                                                                "is not a cluster ID",
		"forbidWidenin: true":                                                                        "unknown field",
	} {
		_, err := LoadConsent(write(body))
		require.ErrorContains(t, err, want, body)
	}
	_, err = LoadConsent(filepath.Join(dir, "missing.yaml"))
	require.ErrorContains(t, err, "consent file")
}
