package kube

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// A leader writing above its hint raises leaseTransitions so that the next
// holder's hint (client-go adds one on acquisition) lies above its epoch.
// Seed 29003 of the nemesis: a leader at hint 8 wrote at epoch 9 (its
// replica had seen epoch 8), and the next leader got hint 9 and wrote at
// epoch 9 too.
func TestRecordEpochFencesTheNextLeader(t *testing.T) {
	client := fake.NewClientset()
	e, err := NewElector(LeaderConfig{Client: client, Namespace: "ns", ClusterID: "c1", Identity: "me",
		OnStartedLeading: func(context.Context, uint32) {}})
	require.NoError(t, err)
	ctx := context.Background()
	leases := client.CoordinationV1().Leases("ns")
	_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("me"), LeaseTransitions: ptr.To[int32](7)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, uint32(8), EpochHint(7), "this term's hint")

	require.NoError(t, e.RecordEpoch(ctx, 9)) // the writer went above its hint
	l, err := leases.Get(ctx, e.name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, int32(9), *l.Spec.LeaseTransitions)
	require.Greater(t, EpochHint(*l.Spec.LeaseTransitions+1), uint32(9), "another identity acquires: it starts above the fenced epoch")
	// Seed 29006: the same identity, restarted with its store lost (moved
	// aside as corrupt), acquires again without a transition and must not
	// reuse its own epoch either.
	require.Greater(t, EpochHint(*l.Spec.LeaseTransitions), uint32(9), "the same identity re-acquires: it starts above too")

	require.NoError(t, e.RecordEpoch(ctx, 5), "an epoch already below the fence changes nothing")
	l, _ = leases.Get(ctx, e.name, metav1.GetOptions{})
	require.Equal(t, int32(9), *l.Spec.LeaseTransitions)

	l.Spec.HolderIdentity = ptr.To("someone-else")
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.ErrorContains(t, e.RecordEpoch(ctx, 12), `held by "someone-else"`, "a deposed leader must not write")
}
