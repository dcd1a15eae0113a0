package daemon

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

type fakeDesired struct {
	calls   int // hand-offs (full or change set)
	full    int // full hand-offs
	desired []networkingv1.NetworkPolicy
	changes map[enforce.PolicyRef][]networkingv1.NetworkPolicy // the last change set
}

func (f *fakeDesired) ApplyChanges(c map[enforce.PolicyRef][]networkingv1.NetworkPolicy) error {
	f.calls++
	f.changes = c
	return nil
}

func (f *fakeDesired) Failures() map[string]string { return nil }
func (f *fakeDesired) SetDesired(d []networkingv1.NetworkPolicy) error {
	f.calls++
	f.full++
	f.desired = d
	return nil
}

type fakeReportSink struct {
	reports []reportWrite
	all     bool
	calls   int
}

func (f *fakeReportSink) Publish(r []reportWrite, all bool) {
	f.reports, f.all, f.calls = r, all, f.calls+1
}

// The enforcer computes on standbys too (warm for failover) but only the
// leader applies and reports; a decommissioned cluster applies nothing.
func TestEnforcerLeaderStandbyDecommissioned(t *testing.T) {
	w := newWorld(t, "b", "a", "b")
	w.labelled("a", "b")
	w.write("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("a", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{}, PodSelector: metav1.LabelSelector{}}, 3))
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	var r roles
	var lastRun atomic.Int64
	ap, sink := &fakeDesired{}, &fakeReportSink{}
	e := &enforcer{view: &view{mirror: w.mirror, outputs: w.outputs}, roles: &r, applier: ap, reports: sink,
		m: m, log: discard, lastRun: &lastRun}

	e.NoteStamp(5)
	e.NoteStamp(3)
	require.Equal(t, int64(5), e.maxStamp.Load(), "the newest stamp wins")
	e.Fire(t.Context(), []enforce.PolicyRef{allPolicies})
	require.Zero(t, ap.calls, "a standby does not apply")
	require.Zero(t, sink.calls, "a standby does not report")
	require.NotZero(t, lastRun.Load())
	require.Zero(t, e.maxStamp.Load())

	r.leader.Store(true)
	e.Fire(t.Context(), []enforce.PolicyRef{allPolicies})
	require.Equal(t, 1, ap.calls)
	require.NotEmpty(t, ap.desired)
	require.True(t, sink.all, "a full run reconciles every report")
	require.Len(t, sink.reports, 1)
	require.Equal(t, "a/shop/db", sink.reports[0].ref.String())
	require.True(t, sink.reports[0].ok)
	require.Equal(t, int64(3), sink.reports[0].val.ObservedGeneration)

	require.Equal(t, 1, ap.full, "the first leading run hands over everything")

	// the next leading runs hand over only what changed
	e.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, 2, ap.calls)
	require.Equal(t, 1, ap.full)
	require.Empty(t, ap.changes, "nothing changed")
	w.write("a", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{}, PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}, 4))
	e.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, 1, ap.full)
	require.Len(t, ap.changes[pref("a/shop/db")], 1, "the changed policy with its current objects")

	// a standby run's changes never reach the applier: the next leading
	// run hands over everything again
	r.leader.Store(false)
	e.Fire(t.Context(), prefs("a/shop/db"))
	r.leader.Store(true)
	e.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, 2, ap.full)
	require.NotEmpty(t, ap.desired)

	r.decommissioned.Store(true)
	calls := ap.calls
	e.Fire(t.Context(), prefs("a/shop/db"))
	require.Equal(t, calls+1, ap.calls)
	require.Equal(t, 3, ap.full)
	require.Empty(t, ap.desired, "a decommissioned cluster removes what it generated")
	require.False(t, sink.all)
}
