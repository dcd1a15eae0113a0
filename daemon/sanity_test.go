package daemon

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/model"
)

func TestSanityDuplicateClusterIDNeedsConfirmation(t *testing.T) {
	s, err := newSanity(prometheus.NewRegistry())
	require.NoError(t, err)
	two := []gossip.MemberInfo{
		{Name: "a-0", Cluster: "a", Writer: true, Alive: true},
		{Name: "a-1", Cluster: "a", Writer: false, Alive: true}, // standby: fine
		{Name: "b-0", Cluster: "b", Writer: true, Alive: true},
		{Name: "b-9", Cluster: "b", Writer: true, Alive: true}, // a second Lease holder for b
		{Name: "c-0", Cluster: "c", Writer: true, Alive: false},
		{Name: "c-1", Cluster: "c", Writer: true, Alive: true}, // dead old writer: fine
	}
	for range duplicateConfirmRounds - 1 {
		require.Empty(t, s.evaluate(two, nil), "a leader handover shows two writers for a few rounds")
	}
	f := s.evaluate(two, nil)
	require.Len(t, f, 1)
	require.Equal(t, CheckDuplicateClusterID, f[0].check)
	require.Contains(t, f[0].message, "cluster ID b is claimed by two clusters: gossip members b-0 and b-9")
	require.Empty(t, s.evaluate(two[:3], nil), "cleared when one writer is left")
	require.Empty(t, s.evaluate(two, nil), "and the streak restarts")
	require.GreaterOrEqual(t, time.Duration(duplicateConfirmRounds)*SanityInterval, 30*time.Second,
		"longer than a handover's writer flag takes through a lossy mesh (10 s seen)")
}

func TestSanityInventoryFindings(t *testing.T) {
	s, err := newSanity(prometheus.NewRegistry())
	require.NoError(t, err)
	f := s.evaluate(nil, []enforce.Finding{
		{Check: CheckPodIPOutsideCIDR, Clusters: []string{"b"}, Message: "m2"},
		{Check: CheckOverlappingPodCIDRs, Clusters: []string{"a", "b"}, Message: "m1"},
	})
	require.Len(t, f, 2)
	require.Equal(t, "overlapping_pod_cidrs/a,b", f[0].key)
	require.Equal(t, sanityEventReasonOverlap, f[0].reason)
	require.Equal(t, sanityEventReasonOutside, f[1].reason)
}

func TestOutputsSetDegraded(t *testing.T) {
	o := model.NewOutputs("a")
	ok := enforce.Result{Selected: true}
	coarse := enforce.Result{Selected: true, Degraded: enforce.ReasonGlobalnetCoarseIdentity}
	failed := enforce.Result{Selected: true, Error: "bad"}
	require.Equal(t, "", o.Report(enforce.PolicyRef{}, ok, 1).Degraded)
	require.True(t, o.SetSetDegraded(ReasonDuplicateClusterID))
	require.False(t, o.SetSetDegraded(ReasonDuplicateClusterID))
	require.Equal(t, ReasonDuplicateClusterID, o.Report(enforce.PolicyRef{}, ok, 1).Degraded)
	require.Equal(t, enforce.ReasonGlobalnetCoarseIdentity, o.Report(enforce.PolicyRef{}, coarse, 1).Degraded, "the policy's own reason wins")
	require.Equal(t, "", o.Report(enforce.PolicyRef{}, failed, 1).Degraded, "failed is not degraded")
	require.True(t, o.SetSetDegraded(""))
	require.Equal(t, "", o.Report(enforce.PolicyRef{}, ok, 1).Degraded)
}
