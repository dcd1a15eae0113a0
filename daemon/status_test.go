package daemon

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

type fakeStatusStore struct {
	updates map[string]apiv1.MultiClusterNetworkPolicyStatus
	fail    error
}

func (f *fakeStatusStore) Policy(ns, name string) (*unstructured.Unstructured, apiv1.MultiClusterNetworkPolicyStatus, error) {
	if ns == "gone" {
		return nil, apiv1.MultiClusterNetworkPolicyStatus{}, errors.New("not found")
	}
	return nil, f.updates[ns+"/"+name], nil
}

func (f *fakeStatusStore) Update(_ context.Context, ns, name string, st apiv1.MultiClusterNetworkPolicyStatus) (bool, error) {
	if f.fail != nil {
		return false, f.fail
	}
	f.updates[ns+"/"+name] = st
	return true, nil
}

// The status part aggregates the replicated reports of every enforcing
// cluster into the own MCNP's status, ignores other clusters' policies,
// and marks a failed update again (level-triggered retry).
func TestStatusLoopAggregatesReports(t *testing.T) {
	w := newWorld(t, "a", "a", "b")
	w.write("a", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{}}, 2))
	w.write("b", crdt.KindPolicy, "shop/other", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{}}, 1))
	w.write("a", crdt.KindCluster, "", &crdt.ClusterValue{})
	w.write("b", crdt.KindCluster, "", &crdt.ClusterValue{})
	w.write("a", crdt.KindReport, "a/shop/db", &crdt.ReportValue{ObservedGeneration: 2})
	w.write("b", crdt.KindReport, "a/shop/db", &crdt.ReportValue{ObservedGeneration: 1})
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	var r roles
	var marked []enforce.PolicyRef
	store := &fakeStatusStore{updates: map[string]apiv1.MultiClusterNetworkPolicyStatus{}}
	s := &statusLoop{self: "a", view: &view{mirror: w.mirror, outputs: w.outputs}, roles: &r, store: store,
		mark: func(k ...enforce.PolicyRef) { marked = append(marked, k...) }, m: m, log: discard}

	s.MarkAll()
	require.Equal(t, prefs("a/shop/db"), marked, "only own policies")
	s.Fire(t.Context(), prefs("a/shop/db"))
	require.Empty(t, store.updates, "a standby writes no status")

	r.leader.Store(true)
	s.Fire(t.Context(), prefs("a/shop/db", "b/shop/other", "a/gone/x"))
	require.Len(t, store.updates, 1)
	require.Equal(t, "1/2", store.updates["shop/db"].EnforcedSummary, "b has not observed generation 2 yet")

	w.write("b", crdt.KindReport, "a/shop/db", &crdt.ReportValue{ObservedGeneration: 2})
	s.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, "2/2", store.updates["shop/db"].EnforcedSummary)

	marked = nil
	store.fail = errors.New("conflict")
	s.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, prefs("a/shop/db"), marked, "a failed update is retried")
}

// The status counts exactly the clusters the translator enforces the
// policy in (enforce.EnforcingClusters): here only a carries region=eu.
func TestStatusEnforcingSetIsTheTranslators(t *testing.T) {
	w := newWorld(t, "a", "a", "b")
	w.write("a", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}, 1))
	w.write("a", crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"region": "eu"}})
	w.write("b", crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"region": "us"}})
	w.write("a", crdt.KindReport, "a/shop/db", &crdt.ReportValue{ObservedGeneration: 1})
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	var r roles
	r.leader.Store(true)
	store := &fakeStatusStore{updates: map[string]apiv1.MultiClusterNetworkPolicyStatus{}}
	s := &statusLoop{self: "a", view: &view{mirror: w.mirror, outputs: w.outputs}, roles: &r, store: store,
		mark: func(...enforce.PolicyRef) {}, m: m, log: discard}
	s.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, "1/1", store.updates["shop/db"].EnforcedSummary, "b (region=us) is not selected")

	w.write("b", crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"region": "eu"}})
	s.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, "1/2", store.updates["shop/db"].EnforcedSummary, "b now selected, has not reported")
}
