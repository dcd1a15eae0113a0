package kube

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
)

// An MCNP whose entry is not proven by its origin's signed state mark
// (issue 29): its generated objects are neither changed nor deleted, and
// one that does not exist yet is created isolation-only (fail closed),
// through the decision-time check and the polled set alike; all are
// reconciled as usual once it is proven.
func TestApplierLeavesUnprovenPoliciesAlone(t *testing.T) {
	stale := liveNP("a", "stale", "h1")   // its MCNP's deletion is not proven
	change := liveNP("a", "change", "h1") // its new content is not proven
	r := newApplierRig(t, nil, &stale, &change)
	var checkOn atomic.Bool
	checkOn.Store(true)
	r.applier.SetUnprovenCheck(func(ref string) bool { return checkOn.Load() && ref == "eu-1/b/new" })
	r.applier.SetUnproven(map[string]struct{}{"eu-1/a/stale": {}, "eu-1/a/change": {}})
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("b", "new", "h1"), genNP("a", "change", "h2"),
		genNP("a", "other", "h1")}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.run(ctx)
	waitSettled(t, r.applier)

	_, ok := r.get(t, "a", "other")
	require.True(t, ok, "a proven MCNP is applied")
	np, ok := r.get(t, "b", "new")
	require.True(t, ok, "an unproven MCNP (decision-time check) is enforced")
	require.Equal(t, "isolation-only", np.Annotations[unprovenAnnotation])
	require.Empty(t, np.Spec.Ingress, "isolation-only: the pods it selects are allowed nothing")
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
	_, ok = r.get(t, "a", "stale")
	require.True(t, ok, "an unproven deletion is not applied")
	np, _ = r.get(t, "a", "change")
	require.Equal(t, "h1", np.Annotations[ContentHashAnnotation], "an unproven change is not applied")
	require.Empty(t, np.Annotations[unprovenAnnotation], "a proven object is not replaced by a stand-in")
	assert.Equal(t, 1, countActions(r.client, "patch", "new"), "the stand-in is applied once (its informer event re-decides it)")
	assert.Equal(t, 2.0, testutil.ToFloat64(r.applier.metrics.Unproven))

	// proven: the check says no, and the next poll (whose set never held
	// "new") re-decides what was left alone
	checkOn.Store(false)
	r.applier.SetUnproven(map[string]struct{}{})
	require.Eventually(t, func() bool {
		created, _ := r.get(t, "b", "new")
		_, kept := r.get(t, "a", "stale")
		np, _ := r.get(t, "a", "change")
		return created.Annotations[ContentHashAnnotation] == "h1" && !kept && np.Annotations[ContentHashAnnotation] == "h2"
	}, 10*time.Second, 5*time.Millisecond)
	assert.Zero(t, testutil.ToFloat64(r.applier.metrics.Unproven))
	np, _ = r.get(t, "b", "new")
	assert.Empty(t, np.Annotations[unprovenAnnotation], "the proven object replaced the stand-in")
	assert.Len(t, np.Spec.Ingress, 1)
	assert.Zero(t, testutil.ToFloat64(r.applier.metrics.Repairs), "replacing a stand-in is no repair")
}
