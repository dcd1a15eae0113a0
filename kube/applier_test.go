package kube

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
)

func genNP(ns, name, hash string) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:      map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{ContentHashAnnotation: hash},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.7/32"}},
			}}},
		},
	}
}

func userNP(ns, name string) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "a"}}}
}

func ptrNP(np networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy { return &np }

func TestDecide(t *testing.T) {
	gen := ptrNP(genNP("a", "p", "h1"))
	gen2 := ptrNP(genNP("a", "p", "h2"))
	user := ptrNP(userNP("a", "p"))
	other := ptrNP(genNP("a", "p", "h1"))
	other.Labels[ManagedByLabel] = "someone-else"
	terminating := ptrNP(genNP("a", "p", "h1"))
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	noHash := ptrNP(genNP("a", "p", ""))

	cases := []struct {
		name          string
		desired, live *networkingv1.NetworkPolicy
		want          Action
	}{
		{"nothing", nil, nil, ActionNone},
		{"create", gen, nil, ActionApply},
		{"unchanged", gen, ptrNP(genNP("a", "p", "h1")), ActionNone},
		{"hash differs", gen2, gen, ActionApply},
		{"live lost its hash", gen, noHash, ActionApply},
		{"stale generated", nil, gen, ActionDelete},
		{"user object, not desired", nil, user, ActionNone},
		{"user object holds desired name", gen, user, ActionConflict},
		{"other manager holds desired name", gen, other, ActionConflict},
		{"other manager, not desired", nil, other, ActionNone},
		{"terminating, desired", gen2, terminating, ActionNone},
		{"terminating, not desired", nil, terminating, ActionNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Decide(tc.desired, tc.live))
		})
	}
}

func TestPlan(t *testing.T) {
	desired := []networkingv1.NetworkPolicy{
		genNP("b", "new", "h1"),
		genNP("a", "same", "h1"),
		genNP("a", "changed", "h2"),
		genNP("a", "taken", "h1"),
	}
	live := []*networkingv1.NetworkPolicy{
		ptrNP(genNP("a", "same", "h1")),
		ptrNP(genNP("a", "changed", "h1")),
		ptrNP(genNP("a", "stale", "h1")),
		ptrNP(genNP("c", "stale", "h9")),
		ptrNP(userNP("a", "taken")),
		ptrNP(userNP("a", "mine")),
	}
	res, err := Plan(desired, live)
	require.NoError(t, err)
	var applied []string
	for _, np := range res.Apply {
		applied = append(applied, np.Namespace+"/"+np.Name)
	}
	assert.Equal(t, []string{"a/changed", "b/new"}, applied)
	assert.Equal(t, "h2", res.Apply[0].Annotations[ContentHashAnnotation])
	assert.Equal(t, []types.NamespacedName{{Namespace: "a", Name: "stale"}, {Namespace: "c", Name: "stale"}}, res.Delete)
	assert.Equal(t, []types.NamespacedName{{Namespace: "a", Name: "taken"}}, res.Conflicts)

	// empty desired deletes every generated object and nothing else
	res, err = Plan(nil, live)
	require.NoError(t, err)
	assert.Len(t, res.Delete, 4)
	assert.Empty(t, res.Apply)

	// applying the plan converges
	res, err = Plan(desired, []*networkingv1.NetworkPolicy{
		ptrNP(genNP("a", "same", "h1")), ptrNP(genNP("a", "changed", "h2")), ptrNP(genNP("b", "new", "h1")), ptrNP(userNP("a", "taken")),
	})
	require.NoError(t, err)
	assert.Empty(t, res.Apply)
	assert.Empty(t, res.Delete)
}

func TestPlanRejectsInvalidDesired(t *testing.T) {
	unlabelled := genNP("a", "x", "h")
	unlabelled.Labels = nil
	cases := map[string][]networkingv1.NetworkPolicy{
		"no label":  {unlabelled},
		"no hash":   {genNP("a", "x", "")},
		"no name":   {genNP("a", "", "h")},
		"no ns":     {genNP("", "x", "h")},
		"duplicate": {genNP("a", "x", "h"), genNP("a", "x", "h2")},
	}
	for name, desired := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Plan(desired, nil)
			assert.Error(t, err)
		})
	}
}

func TestApplyBodyOwnsOnlySpecAndMetadata(t *testing.T) {
	np := genNP("a", "p", "h")
	np.ResourceVersion = "7"
	np.UID = "uid"
	np.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	b, err := ApplyBody(&np)
	require.NoError(t, err)
	s := string(b)
	assert.Contains(t, s, `"apiVersion":"networking.k8s.io/v1"`)
	assert.Contains(t, s, `"kind":"NetworkPolicy"`)
	assert.Contains(t, s, `"10.1.0.7/32"`)
	assert.NotContains(t, s, "resourceVersion")
	assert.NotContains(t, s, "uid")
	assert.NotContains(t, s, "managedFields")
}

type applierRig struct {
	client  *fake.Clientset
	applier *Applier
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan error
}

func newApplierRig(t *testing.T, setup func(*fake.Clientset), objs ...runtime.Object) *applierRig {
	t.Helper()
	client := fake.NewClientset(objs...)
	if setup != nil {
		setup(client) // reactors must be in place before informers start
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	reg := prometheus.NewRegistry()
	a, err := NewApplier(client, factory.Networking().V1().NetworkPolicies(), ApplierOptions{
		Registerer:  reg,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 20*time.Millisecond),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	r := &applierRig{client: client, applier: a, reg: reg, cancel: cancel, done: make(chan error, 1)}
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	return r
}

func (r *applierRig) run(ctx context.Context) {
	go func() { r.done <- r.applier.Run(ctx) }()
}

func (r *applierRig) get(t *testing.T, ns, name string) (*networkingv1.NetworkPolicy, bool) {
	np, err := r.client.NetworkingV1().NetworkPolicies(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	require.NoError(t, err)
	return np, true
}

func countActions(c *fake.Clientset, verb, name string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() != verb || a.GetResource().Resource != "networkpolicies" {
			continue
		}
		switch x := a.(type) {
		case k8stesting.PatchAction:
			if name == "" || x.GetName() == name {
				n++
			}
		case k8stesting.DeleteAction:
			if name == "" || x.GetName() == name {
				n++
			}
		}
	}
	return n
}

func waitSettled(t *testing.T, a *Applier) {
	t.Helper()
	require.Eventually(t, a.Settled, 10*time.Second, 5*time.Millisecond, "applier never settled")
}

func TestApplierReconciles(t *testing.T) {
	sameLive := genNP("a", "same", "h1")
	changedLive := genNP("a", "changed", "h1")
	staleLive := genNP("a", "stale", "h1")
	taken := userNP("a", "taken")
	mine := userNP("a", "mine")
	r := newApplierRig(t, nil, &sameLive, &changedLive, &staleLive, &taken, &mine)
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{
		genNP("b", "new", "h1"), genNP("a", "same", "h1"), genNP("a", "changed", "h2"), genNP("a", "taken", "h1"),
	}))
	assert.False(t, r.applier.Settled(), "not settled before Run")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.run(ctx)
	waitSettled(t, r.applier)

	np, ok := r.get(t, "b", "new")
	require.True(t, ok, "new policy created")
	assert.Equal(t, "h1", np.Annotations[ContentHashAnnotation])
	assert.Equal(t, ManagedByValue, np.Labels[ManagedByLabel])
	require.Len(t, np.Spec.Ingress, 1)
	np, _ = r.get(t, "a", "changed")
	assert.Equal(t, "h2", np.Annotations[ContentHashAnnotation])
	_, ok = r.get(t, "a", "stale")
	assert.False(t, ok, "stale generated policy deleted")
	np, _ = r.get(t, "a", "taken")
	assert.Equal(t, taken.Labels, np.Labels, "user object untouched")
	assert.Nil(t, np.Annotations)
	_, ok = r.get(t, "a", "mine")
	assert.True(t, ok, "unrelated user object kept")

	assert.Equal(t, 0, countActions(r.client, "patch", "same"), "unchanged hash is not re-applied")
	assert.Equal(t, 0, countActions(r.client, "patch", "taken"))
	assert.Equal(t, 0, countActions(r.client, "delete", "mine"))
	assert.Equal(t, 2.0, testutil.ToFloat64(r.applier.metrics.Applies))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.applier.metrics.Deletes))
	assert.GreaterOrEqual(t, testutil.ToFloat64(r.applier.metrics.Conflicts), 1.0)
	n, err := testutil.GatherAndCount(r.reg, "coastguard_networkpolicy_op_duration_seconds")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "apply and delete histograms")

	// a new desired set: drop "new", change "same"
	before := countActions(r.client, "patch", "")
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "same", "h3"), genNP("a", "changed", "h2")}))
	require.Eventually(t, func() bool {
		_, ok := r.get(t, "b", "new")
		np, _ := r.get(t, "a", "same")
		return !ok && np.Annotations[ContentHashAnnotation] == "h3"
	}, 10*time.Second, 5*time.Millisecond)
	waitSettled(t, r.applier)
	assert.Equal(t, 1, countActions(r.client, "patch", "")-before, "only the changed object is applied")

	// someone deletes a generated object: it comes back
	require.NoError(t, r.client.NetworkingV1().NetworkPolicies("a").Delete(context.Background(), "changed", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, ok := r.get(t, "a", "changed"); return ok }, 10*time.Second, 5*time.Millisecond)

	// user edits a generated object's hash: it is re-applied
	np, _ = r.get(t, "a", "same")
	np.Annotations[ContentHashAnnotation] = "tampered"
	_, err = r.client.NetworkingV1().NetworkPolicies("a").Update(context.Background(), np, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		np, _ := r.get(t, "a", "same")
		return np.Annotations[ContentHashAnnotation] == "h3"
	}, 10*time.Second, 5*time.Millisecond)

	cancel()
	select {
	case err := <-r.done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assert.False(t, r.applier.Settled())
}

func TestApplierBacksOffOnErrors(t *testing.T) {
	var fails atomic.Int32
	fails.Store(3)
	r := newApplierRig(t, func(c *fake.Clientset) {
		c.PrependReactor("patch", "networkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
			if fails.Add(-1) >= 0 {
				return true, nil, apierrors.NewInternalError(errors.New("etcd hiccup"))
			}
			return false, nil, nil
		})
	})
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "p", "h1")}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.run(ctx)
	waitSettled(t, r.applier)
	_, ok := r.get(t, "a", "p")
	assert.True(t, ok, "applied after retries")
	assert.Equal(t, 3.0, testutil.ToFloat64(r.applier.metrics.Errors.WithLabelValues("apply")))
	assert.Equal(t, 1.0, testutil.ToFloat64(r.applier.metrics.Applies))
}

func TestApplierSetDesiredRejectsBadSetAtomically(t *testing.T) {
	r := newApplierRig(t, nil)
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "p", "h1")}))
	err := r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "q", "h1"), genNP("a", "bad", "")})
	require.Error(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.run(ctx)
	waitSettled(t, r.applier)
	_, ok := r.get(t, "a", "p")
	assert.True(t, ok, "previous desired set still in force")
	_, ok = r.get(t, "a", "q")
	assert.False(t, ok)
	assert.Equal(t, 1.0, testutil.ToFloat64(r.applier.metrics.Errors.WithLabelValues("plan")))
}

func TestApplierRestartsAcrossTerms(t *testing.T) {
	stale := genNP("a", "stale", "h1")
	r := newApplierRig(t, nil, &stale)
	for term := 0; term < 2; term++ {
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", fmt.Sprint("p", term), "h1")}))
		r.run(ctx)
		waitSettled(t, r.applier)
		_, ok := r.get(t, "a", fmt.Sprint("p", term))
		assert.True(t, ok)
		cancel()
		require.NoError(t, <-r.done)
	}
	_, ok := r.get(t, "a", "stale")
	assert.False(t, ok)
	_, ok = r.get(t, "a", "p0")
	assert.False(t, ok, "p0 deleted in the second term")
}

func TestApplierMetricsDoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := NewApplierMetrics(reg)
	require.NoError(t, err)
	_, err = NewApplierMetrics(reg)
	assert.Error(t, err)
}

func BenchmarkPlan(b *testing.B) {
	var desired []networkingv1.NetworkPolicy
	var live []*networkingv1.NetworkPolicy
	for i := 0; i < 300; i++ {
		d := genNP(fmt.Sprint("ns", i%20), fmt.Sprint("mcnp-", i), "h1")
		desired = append(desired, d)
		l := genNP(d.Namespace, d.Name, "h1")
		if i%10 == 0 {
			l.Annotations[ContentHashAnnotation] = "old"
		}
		live = append(live, &l)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := Plan(desired, live)
		if err != nil || len(res.Apply) != 30 {
			b.Fatal(err, len(res.Apply))
		}
	}
}
