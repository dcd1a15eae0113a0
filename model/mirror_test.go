package model

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// world is a set of origin writers plus one observing replica, the way the
// daemon sees them: every write becomes a delta applied to the observer,
// whose change feed drives the Mirror.
type world struct {
	t        *testing.T
	writers  map[string]*crdt.State
	observer *crdt.State
	mirror   *Mirror
	outputs  *Outputs
	nets     enforce.Networks // trusted networks (pod-IP ownership)
}

// setNetworks gives the observer its trusted networks, as the daemon does
// from Submariner's Cluster objects, and recomputes everything.
func (w *world) setNetworks(n enforce.Networks) {
	w.nets = n
	w.mirror.SetNetworks(n)
	w.outputs.Recompute(w.mirror.Inventory(), nil, true)
}

func newWorld(t *testing.T, self string, clusters ...string) *world {
	w := &world{t: t, writers: map[string]*crdt.State{}, observer: crdt.NewState(self),
		mirror: NewMirror(self), outputs: NewOutputs(self)}
	for _, c := range clusters {
		s := crdt.NewState(c)
		require.NoError(t, s.SetEpoch(1))
		w.writers[c] = s
	}
	return w
}

// labelled publishes the cluster entries (ID label only) of the given
// clusters: until its entry arrives a cluster's labels are unknown and it
// matches only clusterSelectors naming its ID.
func (w *world) labelled(clusters ...string) {
	w.t.Helper()
	for _, c := range clusters {
		w.write(c, crdt.KindCluster, "", &crdt.ClusterValue{})
	}
}

func (w *world) write(origin string, kind crdt.Kind, name string, v any) {
	w.t.Helper()
	var b []byte
	if v != nil {
		var err error
		b, err = crdt.EncodeValue(v)
		require.NoError(w.t, err)
	}
	d, _, err := w.writers[origin].Write(kind, name, b, v == nil, 0)
	require.NoError(w.t, err)
	changes, err := w.observer.Apply(d)
	require.NoError(w.t, err)
	res := w.mirror.Apply(changes)
	require.Empty(w.t, res.Errors)
	w.outputs.Recompute(w.mirror.Inventory(), res.Affected, res.All)
}

// fromScratch rebuilds the inventory from the observer's full state and
// translates everything: the reference the incremental path must match.
func (w *world) fromScratch(self string) []networkingv1.NetworkPolicy {
	m := NewMirror(self)
	m.SetNetworks(w.nets)
	require.Empty(w.t, m.Load(w.observer))
	return enforce.Translate(self, m.Inventory())
}

func TestIncrementalMatchesFullTranslation(t *testing.T) {
	clusters := []string{"a", "b", "c"}
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			w := newWorld(t, "a", clusters...)
			// pods get 10.0-2.x IPs: some inside their cluster's CIDR
			nets, err := enforce.ParseClusterCIDRs([]string{"a=10.0.0.0/16", "b=10.1.0.0/16", "c=10.2.0.0/16"})
			require.NoError(t, err)
			w.setNetworks(nets)
			for _, c := range clusters {
				w.write(c, crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"region": []string{"eu", "us"}[rng.Intn(2)]}})
				w.write(c, crdt.KindNamespace, "shop", &crdt.NamespaceValue{Labels: map[string]string{"team": "x"}})
			}
			apps := []string{"web", "db", "api"}
			for step := 0; step < 150; step++ {
				c := clusters[rng.Intn(len(clusters))]
				switch r := rng.Intn(10); {
				case r < 6: // pod upsert or delete
					name := fmt.Sprintf("shop/p%d", rng.Intn(12))
					if rng.Intn(5) == 0 {
						w.write(c, crdt.KindPod, name, nil)
					} else {
						w.write(c, crdt.KindPod, name, &crdt.PodValue{
							Labels: map[string]string{"app": apps[rng.Intn(len(apps))]},
							IPs:    []string{fmt.Sprintf("10.%d.0.%d", rng.Intn(3), rng.Intn(250)+1)},
							Phase:  "Running",
							Ports:  []crdt.NamedPort{{Name: "sql", Port: 5432}}})
					}
				case r < 8: // policy upsert / delete
					name := fmt.Sprintf("shop/pol%d", rng.Intn(3))
					if rng.Intn(4) == 0 {
						w.write(c, crdt.KindPolicy, name, nil)
						continue
					}
					spec := apiv1.MultiClusterNetworkPolicySpec{
						PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": apps[rng.Intn(3)]}},
						Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{
							ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}},
							PodSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": apps[rng.Intn(3)]}},
						}}}},
					}
					if rng.Intn(2) == 0 {
						spec.ClusterSelector = &metav1.LabelSelector{}
					}
					w.write(c, crdt.KindPolicy, name, modeltest.PolicyValue(t, spec, int64(step)))
				case r < 9: // relabel a cluster
					w.write(c, crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"region": []string{"eu", "us"}[rng.Intn(2)]}})
				default: // relabel or delete/recreate the namespace
					if rng.Intn(3) == 0 {
						w.write(c, crdt.KindNamespace, "shop", nil)
					} else {
						w.write(c, crdt.KindNamespace, "shop", &crdt.NamespaceValue{Labels: map[string]string{"team": []string{"x", "y"}[rng.Intn(2)]}})
					}
				}
				require.Equal(t, modeltest.NPNames(w.fromScratch("a")), modeltest.NPNames(w.outputs.Desired()), "step %d", step)
			}
		})
	}
}

func TestRetirementRemovesClusterAndItsPolicies(t *testing.T) {
	w := newWorld(t, "a", "a", "b")
	w.labelled("a", "b")
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindPod, "shop/web", &crdt.PodValue{Labels: map[string]string{"app": "web"}, IPs: []string{"10.2.0.1"}, Phase: "Running"})
	spec := apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{},
		PodSelector:     metav1.LabelSelector{},
		Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{
			ClusterSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}},
	}
	w.write("a", crdt.KindPolicy, "shop/from-a", modeltest.PolicyValue(t, spec, 1))
	w.write("b", crdt.KindPolicy, "shop/from-b", modeltest.PolicyValue(t, spec, 1))
	require.Len(t, w.outputs.Desired(), 2)

	changes, err := w.observer.ApplyRetire(w.observer.RetireRecord("b"))
	require.NoError(t, err)
	res := w.mirror.Apply(changes)
	require.True(t, res.All)
	w.outputs.Recompute(w.mirror.Inventory(), res.Affected, res.All)
	desired := w.outputs.Desired()
	require.Len(t, desired, 1, "b's policy is gone")
	require.Equal(t, "a", desired[0].Labels[enforce.LabelOriginCluster])
	for _, r := range desired[0].Spec.Ingress {
		for _, p := range r.From {
			require.Nil(t, p.IPBlock, "b's pod IP must be gone")
		}
	}
	require.NotContains(t, w.mirror.Inventory().Clusters(), "b")
}

func TestReportsAndStatusDirty(t *testing.T) {
	w := newWorld(t, "a", "a", "b")
	w.write("a", crdt.KindPolicy, "shop/p", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{}, 3))
	w.write("b", crdt.KindReport, "a/shop/p", &crdt.ReportValue{ObservedGeneration: 3, NetworkPolicies: 1})
	ref := enforce.PolicyRef{Origin: "a", Namespace: "shop", Name: "p"}
	rep := w.mirror.Reports(ref)
	require.Equal(t, int64(3), rep["b"].ObservedGeneration)

	d, _, err := w.writers["b"].Write(crdt.KindReport, "a/shop/p", nil, true, 0)
	require.NoError(t, err)
	changes, err := w.observer.Apply(d)
	require.NoError(t, err)
	res := w.mirror.Apply(changes)
	require.Equal(t, []enforce.PolicyRef{ref}, res.StatusDirty)
	require.Empty(t, w.mirror.Reports(ref))
}

func TestUndecodableEntryIsSkipped(t *testing.T) {
	m := NewMirror("a")
	e := crdt.Entry{Key: crdt.Key{Origin: "b", Kind: crdt.KindPod, Name: "shop/x"}, Version: 1, Value: []byte{0xc1, 0xff}}
	res := m.Apply([]crdt.Change{{Key: e.Key, New: &e}})
	require.Len(t, res.Errors, 1)
	require.Equal(t, 1, m.DecodeErrors)
}

// A report entry's name is the one place a policy reference arrives as
// text: a name that is not origin/namespace/name is skipped and counted,
// and marks no policy's status.
func TestMalformedReportNameIsSkipped(t *testing.T) {
	m := NewMirror("a")
	e := crdt.Entry{Key: crdt.Key{Origin: "b", Kind: crdt.KindReport, Name: "a/shop"}, Version: 1}
	res := m.Apply([]crdt.Change{{Key: e.Key, New: &e}})
	require.Len(t, res.Errors, 1)
	require.Contains(t, res.Errors[0].Error(), "report name is not origin/namespace/name")
	require.Equal(t, 1, m.DecodeErrors)
	require.Empty(t, res.StatusDirty)
}

// Entries of an origin that is not a DNS-1123 label (possible only from a
// peer that skipped validation) are refused with an error naming it.
func TestMirrorRefusesInvalidOrigin(t *testing.T) {
	m := NewMirror("eu-1")
	e := crdt.Entry{Key: crdt.Key{Origin: "eu.2", Kind: crdt.KindNamespace, Name: "shop"}, Value: []byte{0x80}}
	res := m.Apply([]crdt.Change{{Key: e.Key, New: &e}})
	require.Len(t, res.Errors, 1)
	require.Contains(t, res.Errors[0].Error(), `"eu.2"`)
	require.Contains(t, res.Errors[0].Error(), "gossip")
}

// A newer origin's MCNP carries a spec field this build does not know (its
// CRD admits it). Ignoring the field could admit more than the origin
// meant, so the policy is invalid here and only isolates its pods; the
// same spec without the field is enforced with its rules.
func TestUnknownSpecFieldIsolates(t *testing.T) {
	w := newWorld(t, "a", "a", "b")
	w.labelled("a", "b")
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindPod, "shop/web", &crdt.PodValue{Labels: map[string]string{"app": "web"}, IPs: []string{"10.2.0.1"}, Phase: "Running"})
	const known = `{"clusterSelector":{},"podSelector":{"matchLabels":{"role":"db"}},` +
		`"ingress":[{"from":[{"clusterSelector":{},"podSelector":{"matchLabels":{"app":"web"}}%s}]}]}`
	ref := enforce.PolicyRef{Origin: "b", Namespace: "shop", Name: "db"}
	for _, tc := range []struct{ extra, unknown string }{
		{"", ""},
		{`,"onlyReadyPods":true`, "ingress[0].from[0].onlyReadyPods"},
		{"", ""}, // the origin dropped the field again: enforced as before
	} {
		w.write("b", crdt.KindPolicy, "shop/db", &crdt.PolicyValue{UID: "u", Generation: 1, Spec: []byte(fmt.Sprintf(known, tc.extra))})
		res := enforce.Evaluate("a", w.mirror.Inventory(), ref)
		require.True(t, res.Selected)
		require.Len(t, res.NetworkPolicies, 1)
		np := res.NetworkPolicies[0]
		require.Equal(t, map[string]string{"role": "db"}, np.Spec.PodSelector.MatchLabels)
		if tc.unknown == "" {
			require.Empty(t, res.Error)
			require.Len(t, np.Spec.Ingress, 1, "the known spec is enforced with its rule")
			continue
		}
		require.Contains(t, res.Error, "spec."+tc.unknown)
		require.Contains(t, res.Error, "not known to this coastguard build")
		require.Nil(t, np.Spec.Ingress, "isolated: no rule admits anything")
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
		require.Equal(t, enforce.Translate("a", w.mirror.Inventory()), w.fromScratch("a"), "a cold start reads it the same way")
	}
}
