package kube

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

func TestBuildClusterStatusTransitions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	alive := ClusterObservation{ID: "b", Alive: true, AliveMembers: 2, LastSeen: t0, Epoch: 3, Seq: 42,
		Members: []v1.CoastguardClusterMember{{Name: "b-2", Alive: true}, {Name: "b-1", Alive: true, Writer: true}}, Leader: "b-1"}
	st, tr := BuildClusterStatus("a", alive, nil, t0, time.Minute)
	assert.Empty(t, tr, "first observation of a live cluster is no transition")
	assert.Equal(t, "3.42", st.Version)
	assert.Equal(t, "b-1", st.Members[0].Name, "members are sorted")
	assert.True(t, meta.IsStatusConditionTrue(st.Conditions, v1.ClusterConditionAlive))
	assert.True(t, meta.IsStatusConditionFalse(st.Conditions, v1.ClusterConditionStale))
	assert.True(t, meta.IsStatusConditionTrue(st.Conditions, v1.ClusterConditionSanityOK))

	// unseen, but within the threshold: not alive, not stale
	gone := alive
	gone.Alive, gone.AliveMembers = false, 0
	st2, tr := BuildClusterStatus("a", gone, st.Conditions, t0.Add(30*time.Second), time.Minute)
	assert.Empty(t, tr)
	assert.True(t, meta.IsStatusConditionFalse(st2.Conditions, v1.ClusterConditionStale))
	// the Alive transition time moved, SanityOK's did not
	assert.Equal(t, t0.Add(30*time.Second), meta.FindStatusCondition(st2.Conditions, v1.ClusterConditionAlive).LastTransitionTime.Time)
	assert.Equal(t, t0, meta.FindStatusCondition(st2.Conditions, v1.ClusterConditionSanityOK).LastTransitionTime.Time)

	// past the threshold: Stale, one event, and only once
	st3, tr := BuildClusterStatus("a", gone, st2.Conditions, t0.Add(2*time.Minute), time.Minute)
	require.Len(t, tr, 1)
	assert.Equal(t, EventClusterStale, tr[0].Reason)
	assert.True(t, meta.IsStatusConditionTrue(st3.Conditions, v1.ClusterConditionStale))
	_, tr = BuildClusterStatus("a", gone, st3.Conditions, t0.Add(3*time.Minute), time.Minute)
	assert.Empty(t, tr)

	// back: rejoined
	back := alive
	back.LastSeen = t0.Add(4 * time.Minute)
	st5, tr := BuildClusterStatus("a", back, st3.Conditions, t0.Add(4*time.Minute), time.Minute)
	require.Len(t, tr, 1)
	assert.Equal(t, EventClusterRejoined, tr[0].Reason)
	assert.True(t, meta.IsStatusConditionFalse(st5.Conditions, v1.ClusterConditionStale))

	// retired: event, not stale
	ret := gone
	ret.Retired = true
	st6, tr := BuildClusterStatus("a", ret, st5.Conditions, t0.Add(5*time.Minute), time.Minute)
	require.Len(t, tr, 1)
	assert.Equal(t, EventClusterRetired, tr[0].Reason)
	assert.True(t, meta.IsStatusConditionTrue(st6.Conditions, v1.ClusterConditionRetired))
	assert.True(t, meta.IsStatusConditionFalse(st6.Conditions, v1.ClusterConditionStale))

	// sanity problems
	bad := alive
	bad.SanityProblems = []string{"pod CIDR 10.0.0.0/16 overlaps a"}
	st7, _ := BuildClusterStatus("a", bad, nil, t0, time.Minute)
	c := meta.FindStatusCondition(st7.Conditions, v1.ClusterConditionSanityOK)
	require.NotNil(t, c)
	assert.Equal(t, "False", string(c.Status))
	assert.Contains(t, c.Message, "overlaps")

	// never seen
	st8, tr := BuildClusterStatus("a", ClusterObservation{ID: "c"}, nil, t0, time.Minute)
	assert.True(t, meta.IsStatusConditionTrue(st8.Conditions, v1.ClusterConditionStale))
	require.Len(t, tr, 1)
}
