package kube

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func TestLeaseName(t *testing.T) {
	n, err := LeaseName("cluster-a")
	require.NoError(t, err)
	assert.Equal(t, "coastguard-cluster-a", n)
	for _, bad := range []string{"", "Upper", "a_b", strings.Repeat("x", 250)} {
		_, err := LeaseName(bad)
		assert.Error(t, err, bad)
	}
}

func TestEpochHint(t *testing.T) {
	assert.EqualValues(t, 1, EpochHint(0))
	assert.EqualValues(t, 8, EpochHint(7))
	assert.EqualValues(t, 1, EpochHint(-3))
	assert.EqualValues(t, crdt.MaxEpoch, EpochHint(1<<30))
}

func TestNewIdentityUnique(t *testing.T) {
	a, b := NewIdentity("pod-0"), NewIdentity("pod-0")
	assert.NotEqual(t, a, b)
	assert.True(t, strings.HasPrefix(a, "pod-0_"))
}

func TestNewElectorValidates(t *testing.T) {
	ok := LeaderConfig{Client: fake.NewClientset(), Namespace: "ns", ClusterID: "c1", Identity: "me", OnStartedLeading: func(context.Context, uint32) {}}
	_, err := NewElector(ok)
	require.NoError(t, err)
	for name, mut := range map[string]func(*LeaderConfig){
		"no client":      func(c *LeaderConfig) { c.Client = nil },
		"no namespace":   func(c *LeaderConfig) { c.Namespace = "" },
		"no identity":    func(c *LeaderConfig) { c.Identity = "" },
		"no callback":    func(c *LeaderConfig) { c.OnStartedLeading = nil },
		"bad cluster":    func(c *LeaderConfig) { c.ClusterID = "Bad_ID" },
		"lease <= renew": func(c *LeaderConfig) { c.LeaseDuration, c.RenewDeadline = time.Second, time.Second },
		"renew too short": func(c *LeaderConfig) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 3*time.Second, time.Second, time.Second
		},
	} {
		c := ok
		mut(&c)
		_, err := NewElector(c)
		assert.Error(t, err, name)
	}
}

type candidate struct {
	e       *Elector
	hints   chan uint32
	stopped atomic.Int32
	cancel  context.CancelFunc
	done    chan struct{}
	writes  atomic.Int32
}

func startCandidate(t *testing.T, client *fake.Clientset, id string) *candidate {
	t.Helper()
	c := &candidate{hints: make(chan uint32, 4), done: make(chan struct{})}
	e, err := NewElector(LeaderConfig{
		Client: client, Namespace: "coastguard-system", ClusterID: "c1", Identity: id,
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond,
		OnStartedLeading: func(ctx context.Context, hint uint32) {
			c.hints <- hint
			<-ctx.Done()
		},
		OnStoppedLeading: func() { c.stopped.Add(1) },
	})
	require.NoError(t, err)
	c.e = e
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { defer close(c.done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func (c *candidate) expectLead(t *testing.T, timeout time.Duration) uint32 {
	t.Helper()
	select {
	case h := <-c.hints:
		require.Eventually(t, c.e.IsLeader, time.Second, 5*time.Millisecond)
		return h
	case <-time.After(timeout):
		t.Fatalf("%s never became leader", c.e.cfg.Identity)
	}
	return 0
}

func leaseTransitions(t *testing.T, client *fake.Clientset) int32 {
	l, err := client.CoordinationV1().Leases("coastguard-system").Get(context.Background(), "coastguard-c1", metav1.GetOptions{})
	require.NoError(t, err)
	return *l.Spec.LeaseTransitions
}

func TestElectorHandoverOnRelease(t *testing.T) {
	client := fake.NewClientset()
	a := startCandidate(t, client, "a")
	assert.EqualValues(t, 1, a.expectLead(t, 5*time.Second))
	b := startCandidate(t, client, "b")
	time.Sleep(500 * time.Millisecond)
	assert.False(t, b.e.IsLeader(), "standby must not lead while the Lease is held")

	fenced := a.e.Fenced(WriterFunc(func(crdt.Kind, string, []byte, bool) error { a.writes.Add(1); return nil }))
	require.NoError(t, fenced.Write(crdt.KindPod, "x/y", []byte("v"), false))

	a.cancel() // graceful shutdown releases the Lease
	<-a.done
	assert.False(t, a.e.IsLeader())
	assert.GreaterOrEqual(t, a.stopped.Load(), int32(1))
	assert.ErrorIs(t, fenced.Write(crdt.KindPod, "x/y", []byte("v"), false), ErrNotLeader)
	assert.EqualValues(t, 1, a.writes.Load())

	// the Lease was released, not left to expire
	l, err := client.CoordinationV1().Leases("coastguard-system").Get(context.Background(), "coastguard-c1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, "a", ptr.Deref(l.Spec.HolderIdentity, ""), "a released the Lease on shutdown")
	hint := b.expectLead(t, 5*time.Second)
	assert.EqualValues(t, 2, hint, "epoch hint follows leaseTransitions")
	assert.EqualValues(t, 1, leaseTransitions(t, client))
}

// TestElectorReleasesWhenTermEndsEarly: a leader whose term callback
// returns while the Lease is still held (it could not persist its epoch, as
// a daemon with a full disk or a lost store did in the nemesis) releases the
// Lease, so the standby leads instead of the cluster having a Lease holder
// that enforces nothing.
func TestElectorReleasesWhenTermEndsEarly(t *testing.T) {
	client := fake.NewClientset()
	gaveUp := make(chan struct{}, 4)
	e, err := NewElector(LeaderConfig{
		Client: client, Namespace: "coastguard-system", ClusterID: "c1", Identity: "a",
		LeaseDuration: 30 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 200 * time.Millisecond,
		OnStartedLeading: func(context.Context, uint32) { gaveUp <- struct{}{} }, // returns at once
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-gaveUp:
	case <-time.After(5 * time.Second):
		t.Fatal("a never became leader")
	}
	b := startCandidate(t, client, "b")
	// With a 30 s LeaseDuration, b can only lead this fast if a released it.
	b.expectLead(t, 5*time.Second)
	assert.False(t, e.IsLeader())
}

func TestElectorStepsDownWhenRenewFails(t *testing.T) {
	client := fake.NewClientset()
	var failA atomic.Bool
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if failA.Load() && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "a" {
			return true, nil, apierrors.NewServiceUnavailable("partitioned")
		}
		return false, nil, nil
	})
	a := startCandidate(t, client, "a")
	assert.EqualValues(t, 1, a.expectLead(t, 5*time.Second))
	b := startCandidate(t, client, "b")

	failA.Store(true)
	// a must stop within its renew deadline (1s) plus a retry period
	require.Eventually(t, func() bool { return !a.e.IsLeader() }, 3*time.Second, 10*time.Millisecond)
	// OnStoppedLeading runs after the term's context ends (IsLeader false
	// first): on a loaded machine the callback may trail it (CI saw 0)
	require.Eventually(t, func() bool { return a.stopped.Load() >= 1 }, 3*time.Second, 10*time.Millisecond, "OnStoppedLeading was called")
	// b acquires after the lease expires
	hint := b.expectLead(t, 6*time.Second)
	assert.EqualValues(t, 2, hint)
	// a, now a standby, does not get it back while b renews
	time.Sleep(500 * time.Millisecond)
	assert.False(t, a.e.IsLeader())
	assert.True(t, b.e.IsLeader())
}

func TestElectorRetriesLeaseReadBack(t *testing.T) {
	client := fake.NewClientset()
	var gets atomic.Int32
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		// the elector's own acquire path also GETs; fail a few reads
		if n := gets.Add(1); n >= 2 && n <= 3 {
			return true, nil, errors.New("transient")
		}
		return false, nil, nil
	})
	a := startCandidate(t, client, "a")
	assert.EqualValues(t, 1, a.expectLead(t, 6*time.Second))
}
