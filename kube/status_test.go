package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
)

func cond(st v1.MultiClusterNetworkPolicyStatus, typ string) metav1.Condition {
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil {
		return metav1.Condition{}
	}
	return *c
}

func TestAggregate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ok := func(g int64) crdt.ReportValue {
		return crdt.ReportValue{ObservedGeneration: g, NetworkPolicies: 2, RemotePeers: 5}
	}
	cases := []struct {
		name                  string
		in                    AggregateInput
		summary               string
		ready, enforced, degr metav1.ConditionStatus
		enfReason, degReason  string
		msgContains           string
	}{
		{
			name:    "all enforced",
			in:      AggregateInput{Generation: 3, Enforcing: []string{"c2", "c1", "c3"}, Reports: map[string]crdt.ReportValue{"c1": ok(3), "c2": ok(3), "c3": ok(4)}},
			summary: "3/3", ready: metav1.ConditionTrue, enforced: metav1.ConditionTrue, degr: metav1.ConditionFalse,
			enfReason: ReasonAllEnforced, degReason: ReasonNotDegraded,
		},
		{
			name:    "missing and stale reports are pending",
			in:      AggregateInput{Generation: 3, Enforcing: []string{"c1", "c2", "c3"}, Reports: map[string]crdt.ReportValue{"c1": ok(3), "c2": ok(2)}},
			summary: "1/3", ready: metav1.ConditionFalse, enforced: metav1.ConditionFalse, degr: metav1.ConditionFalse,
			enfReason: ReasonPending, degReason: ReasonNotDegraded, msgContains: "waiting for: c2, c3",
		},
		{
			name: "errors win over pending",
			in: AggregateInput{Generation: 1, Enforcing: []string{"c1", "c2", "c3"}, Reports: map[string]crdt.ReportValue{
				"c1": ok(1), "c2": {ObservedGeneration: 1, Error: "forbidden"}}},
			summary: "1/3", ready: metav1.ConditionFalse, enforced: metav1.ConditionFalse, degr: metav1.ConditionFalse,
			enfReason: ReasonEnforcementFailed, degReason: ReasonNotDegraded, msgContains: "failed: c2: forbidden; pending: c3",
		},
		{
			name: "degraded still counts as enforced",
			in: AggregateInput{Generation: 1, Enforcing: []string{"c1", "c2"}, Reports: map[string]crdt.ReportValue{
				"c1": {ObservedGeneration: 1, Degraded: "GlobalnetCoarseIdentity"}, "c2": ok(1)}},
			summary: "2/2", ready: metav1.ConditionTrue, enforced: metav1.ConditionTrue, degr: metav1.ConditionTrue,
			enfReason: ReasonAllEnforced, degReason: "GlobalnetCoarseIdentity",
		},
		{
			name: "mixed degraded reasons",
			in: AggregateInput{Generation: 1, Enforcing: []string{"c1", "c2"}, Reports: map[string]crdt.ReportValue{
				"c1": {ObservedGeneration: 1, Degraded: "GlobalnetCoarseIdentity"}, "c2": {ObservedGeneration: 1, Degraded: "named ports unresolved"}}},
			summary: "2/2", ready: metav1.ConditionTrue, enforced: metav1.ConditionTrue, degr: metav1.ConditionTrue,
			enfReason: ReasonAllEnforced, degReason: ReasonMultipleDegraded,
		},
		{
			name:    "no clusters selected",
			in:      AggregateInput{Generation: 1, Reports: map[string]crdt.ReportValue{"c9": ok(1)}},
			summary: "0/0", ready: metav1.ConditionFalse, enforced: metav1.ConditionFalse, degr: metav1.ConditionFalse,
			enfReason: ReasonNoClustersSelected, degReason: ReasonNotDegraded,
		},
		{
			name:    "reports from unselected clusters are ignored; a missing namespace is not enforced",
			in:      AggregateInput{Generation: 2, Enforcing: []string{"c1", "c1"}, Reports: map[string]crdt.ReportValue{"c1": {ObservedGeneration: 2, SkippedNoNamespace: true}, "c9": {ObservedGeneration: 2, Error: "x"}}},
			summary: "0/1", ready: metav1.ConditionFalse, enforced: metav1.ConditionFalse, degr: metav1.ConditionTrue,
			enfReason: ReasonNamespaceMissing, degReason: ReasonNamespaceMissing, msgContains: "namespace missing in: c1",
		},
		{
			name: "namespace missing in one of three clusters",
			in: AggregateInput{Generation: 1, Enforcing: []string{"c1", "c2", "c3"}, Reports: map[string]crdt.ReportValue{
				"c1": ok(1), "c2": {ObservedGeneration: 1, SkippedNoNamespace: true}, "c3": ok(1)}},
			summary: "2/3", ready: metav1.ConditionFalse, enforced: metav1.ConditionFalse, degr: metav1.ConditionTrue,
			enfReason: ReasonNamespaceMissing, degReason: ReasonNamespaceMissing, msgContains: "enforced in 2 of 3 clusters; namespace missing in: c2",
		},
		{
			name: "pending wins over a missing namespace, which is still named",
			in: AggregateInput{Generation: 2, Enforcing: []string{"c1", "c2"}, Reports: map[string]crdt.ReportValue{
				"c1": ok(1), "c2": {ObservedGeneration: 2, SkippedNoNamespace: true}}},
			summary: "0/2", ready: metav1.ConditionFalse, enforced: metav1.ConditionFalse, degr: metav1.ConditionTrue,
			enfReason: ReasonPending, degReason: ReasonNamespaceMissing, msgContains: "waiting for: c1; namespace missing in: c2",
		},
		{
			name: "clusters with unknown labels are named",
			in: AggregateInput{Generation: 1, Enforcing: []string{"c1"}, LabelsUnknown: []string{"c3", "c2"}, Reports: map[string]crdt.ReportValue{
				"c1": ok(1)}},
			summary: "1/1", ready: metav1.ConditionTrue, enforced: metav1.ConditionTrue, degr: metav1.ConditionFalse,
			enfReason: ReasonAllEnforced, degReason: ReasonNotDegraded, msgContains: "not selected while their labels are unknown: c2, c3",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = t0
			st := Aggregate(tc.in)
			assert.Equal(t, tc.in.Generation, st.ObservedGeneration)
			assert.Equal(t, tc.summary, st.EnforcedSummary)
			require.Len(t, st.Conditions, 3)
			assert.Equal(t, []string{v1.ConditionReady, v1.ConditionEnforced, v1.ConditionDegraded},
				[]string{st.Conditions[0].Type, st.Conditions[1].Type, st.Conditions[2].Type})
			assert.Equal(t, tc.ready, cond(st, v1.ConditionReady).Status)
			assert.Equal(t, tc.enforced, cond(st, v1.ConditionEnforced).Status)
			assert.Equal(t, tc.degr, cond(st, v1.ConditionDegraded).Status)
			assert.Equal(t, tc.enfReason, cond(st, v1.ConditionEnforced).Reason)
			assert.Equal(t, tc.degReason, cond(st, v1.ConditionDegraded).Reason)
			assert.Contains(t, cond(st, v1.ConditionEnforced).Message, tc.msgContains)
			for _, c := range st.Conditions {
				assert.Equal(t, tc.in.Generation, c.ObservedGeneration)
				assert.Equal(t, t0, c.LastTransitionTime.Time)
			}
			var names []string
			for _, c := range st.Clusters {
				names = append(names, c.Cluster)
			}
			assert.IsNonDecreasing(t, names)
		})
	}
}

func TestAggregatePerClusterRowsAndTransitionTimes(t *testing.T) {
	t0, t1 := time.Unix(1000, 0), time.Unix(2000, 0)
	in := AggregateInput{Generation: 5, Enforcing: []string{"b", "a"}, Now: t0,
		Reports: map[string]crdt.ReportValue{"a": {ObservedGeneration: 5, NetworkPolicies: 3, RemotePeers: 7, Degraded: "X"}}}
	st := Aggregate(in)
	assert.Equal(t, []v1.ClusterEnforcementStatus{
		{Cluster: "a", ObservedGeneration: 5, NetworkPolicies: 3, RemotePeers: 7, Degraded: "X"},
		{Cluster: "b"},
	}, st.Clusters)

	// same result later: transition times are kept, so the status is equal
	in.Previous, in.Now = st.Conditions, t1
	again := Aggregate(in)
	assert.Equal(t, st, again)

	// b reports: Enforced flips and gets the new time; Degraded keeps its time
	in.Reports["b"] = crdt.ReportValue{ObservedGeneration: 5}
	flipped := Aggregate(in)
	assert.Equal(t, t1, cond(flipped, v1.ConditionEnforced).LastTransitionTime.Time)
	assert.Equal(t, t0, cond(flipped, v1.ConditionDegraded).LastTransitionTime.Time)
	assert.Equal(t, "2/2", flipped.EnforcedSummary)

	// foreign conditions in Previous are dropped
	in.Previous = append(in.Previous, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "X"})
	assert.Len(t, Aggregate(in).Conditions, 3)
}

func TestConditionReason(t *testing.T) {
	assert.Equal(t, "GlobalnetCoarseIdentity", conditionReason("GlobalnetCoarseIdentity"))
	assert.Equal(t, "NamedPortsUnresolved", conditionReason("named ports unresolved"))
	assert.Equal(t, "Degraded", conditionReason("!!!"))
	assert.Equal(t, "Ipv6", conditionReason("9 ipv6"))
}

type statusRig struct {
	dyn      *dynamicfake.FakeDynamicClient
	lister   cache.GenericLister
	recorder *record.FakeRecorder
	w        *StatusWriter
	leader   bool
}

func newStatusRig(t *testing.T, objs ...runtime.Object) *statusRig {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{MCNPResource: "MultiClusterNetworkPolicyList"}, objs...)
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := f.ForResource(MCNPResource)
	_ = inf.Informer()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	r := &statusRig{dyn: dyn, lister: inf.Lister(), recorder: record.NewFakeRecorder(32), leader: true}
	w, err := NewStatusWriter(dyn, StatusWriterOptions{Lister: r.lister, Recorder: r.recorder, Gate: func() bool { return r.leader }})
	require.NoError(t, err)
	r.w = w
	require.Eventually(t, func() bool { return hasWatch(dyn.Actions(), "multiclusternetworkpolicies") }, 5*time.Second, 5*time.Millisecond)
	return r
}

func (r *statusRig) updates() int {
	n := 0
	for _, a := range r.dyn.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && u.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func drainEvents(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestStatusWriter(t *testing.T) {
	pol := mcnp("shop", "allow", map[string]any{"podSelector": map[string]any{}})
	r := newStatusRig(t, pol)
	ctx := context.Background()

	in := AggregateInput{Generation: 3, Enforcing: []string{"c1", "c2"}, Now: time.Unix(1000, 0),
		Reports: map[string]crdt.ReportValue{"c1": {ObservedGeneration: 3, NetworkPolicies: 1}, "c2": {ObservedGeneration: 3, Error: "quota exceeded"}}}
	st := Aggregate(in)
	changed, err := r.w.Update(ctx, "shop", "allow", st)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, 1, r.updates())

	got, err := r.dyn.Resource(MCNPResource).Namespace("shop").Get(ctx, "allow", metav1.GetOptions{})
	require.NoError(t, err)
	back, err := StatusFromUnstructured(got)
	require.NoError(t, err)
	assert.Equal(t, "1/2", back.EnforcedSummary)
	assert.Equal(t, "quota exceeded", back.Clusters[1].Error)
	_, found := got.Object["spec"]
	assert.True(t, found, "spec preserved")

	events := drainEvents(r.recorder)
	require.Len(t, events, 1)
	assert.True(t, strings.HasPrefix(events[0], "Warning EnforcementFailed cluster c2: quota exceeded"), events[0])

	// once the cache has the new status, the same status is a no-op
	require.Eventually(t, func() bool {
		_, cur, err := r.w.Policy("shop", "allow")
		return err == nil && cur.EnforcedSummary == "1/2"
	}, 5*time.Second, 5*time.Millisecond)
	_, cur, _ := r.w.Policy("shop", "allow")
	in.Previous, in.Now = cur.Conditions, time.Unix(2000, 0)
	changed, err = r.w.Update(ctx, "shop", "allow", Aggregate(in))
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, 1, r.updates())
	assert.Empty(t, drainEvents(r.recorder), "no repeated events")

	// recovery: all enforced -> Normal event
	in.Reports["c2"] = crdt.ReportValue{ObservedGeneration: 3}
	changed, err = r.w.Update(ctx, "shop", "allow", Aggregate(in))
	require.NoError(t, err)
	assert.True(t, changed)
	events = drainEvents(r.recorder)
	require.Len(t, events, 1)
	assert.Contains(t, events[0], "Normal "+ReasonAllEnforced)

	// standby never writes
	r.leader = false
	_, err = r.w.Update(ctx, "shop", "allow", Aggregate(AggregateInput{Generation: 9}))
	assert.ErrorIs(t, err, ErrNotLeader)

	// a policy deleted meanwhile is not an error
	r.leader = true
	changed, err = r.w.Update(ctx, "shop", "nope", st)
	assert.NoError(t, err)
	assert.False(t, changed)
}

func TestStatusWriterRetriesConflicts(t *testing.T) {
	pol := mcnp("shop", "allow", map[string]any{"podSelector": map[string]any{}})
	r := newStatusRig(t, pol)
	conflicts := 2
	r.dyn.PrependReactor("update", "multiclusternetworkpolicies", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, errConflict()
		}
		return false, nil, nil
	})
	changed, err := r.w.Update(context.Background(), "shop", "allow", Aggregate(AggregateInput{Generation: 1, Enforcing: []string{"c1"}, Now: time.Unix(1, 0)}))
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, 0, conflicts)
}

func TestNewStatusWriterValidates(t *testing.T) {
	_, err := NewStatusWriter(nil, StatusWriterOptions{})
	assert.Error(t, err)
}

func BenchmarkAggregate(b *testing.B) {
	in := AggregateInput{Generation: 4, Reports: map[string]crdt.ReportValue{}, Now: time.Unix(0, 0)}
	for i := 0; i < 20; i++ {
		c := "cluster-" + string(rune('a'+i))
		in.Enforcing = append(in.Enforcing, c)
		in.Reports[c] = crdt.ReportValue{ObservedGeneration: 4, NetworkPolicies: 3}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		st := Aggregate(in)
		in.Previous = st.Conditions
	}
}

func errConflict() error {
	return apierrors.NewConflict(schema.GroupResource{Group: "networking.submariner.io", Resource: "multiclusternetworkpolicies"}, "allow", errors.New("object modified"))
}

// The row of a cluster lacking the namespace says so; it is not enforced.
func TestAggregateNamespaceMissingRow(t *testing.T) {
	st := Aggregate(AggregateInput{Generation: 1, Enforcing: []string{"c1", "c2"}, Now: time.Unix(0, 0),
		Reports: map[string]crdt.ReportValue{"c1": {ObservedGeneration: 1, NetworkPolicies: 1}, "c2": {ObservedGeneration: 1, SkippedNoNamespace: true}}})
	require.Len(t, st.Clusters, 2)
	require.Empty(t, st.Clusters[0].Degraded)
	require.True(t, strings.HasPrefix(st.Clusters[1].Degraded, ReasonNamespaceMissing+":"), st.Clusters[1].Degraded)
	require.Equal(t, "1/2", st.EnforcedSummary)
	require.False(t, meta.IsStatusConditionTrue(st.Conditions, v1.ConditionReady))
}
