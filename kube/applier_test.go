package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

func genNP(ns, name, hash string) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:      map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{ContentHashAnnotation: hash, OriginAnnotation: "eu-1/" + ns + "/" + name},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.7/32"}},
			}}},
		},
	}
}

// liveNP is genNP as stored after coastguard applied it: its field manager
// holds an Apply entry.
func liveNP(ns, name, hash string) networkingv1.NetworkPolicy {
	np := genNP(ns, name, hash)
	mf := func(manager string, op metav1.ManagedFieldsOperationType) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "networking.k8s.io/v1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}
	}
	np.ManagedFields = []metav1.ManagedFieldsEntry{
		mf("kubectl-edit", metav1.ManagedFieldsOperationUpdate),
		mf(FieldManager, metav1.ManagedFieldsOperationApply),
	}
	return np
}

func userNP(ns, name string) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "a"}}}
}

func ptrNP(np networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy { return &np }

func TestOwned(t *testing.T) {
	ours := ptrNP(liveNP("a", "p", "h1"))
	foreign := ptrNP(genNP("a", "p", "h1")) // label + annotations, never applied by us
	foreign.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate}}
	updateOnly := ptrNP(liveNP("a", "p", "h1")) // our manager name, but an Update
	updateOnly.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}
	unlabelled := ptrNP(liveNP("a", "p", "h1"))
	delete(unlabelled.Labels, ManagedByLabel)
	noOrigin := ptrNP(liveNP("a", "p", "h1"))
	delete(noOrigin.Annotations, OriginAnnotation)
	desired := ptrNP(genNP("a", "p", "h1"))

	cases := []struct {
		name          string
		desired, live *networkingv1.NetworkPolicy
		want          bool
	}{
		{"no live", desired, nil, false},
		{"written by us, desired", desired, ours, true},
		{"written by us, undesired, origin annotated", nil, ours, true},
		{"label removed, desired: re-adopted", desired, unlabelled, true},
		{"label removed, undesired: still ours to delete", nil, unlabelled, true},
		{"origin annotation wiped, desired: ours to restore", desired, noOrigin, true},
		{"origin annotation wiped, undesired: not deleted", nil, noOrigin, false},
		{"labelled but never written by us", desired, foreign, false},
		{"labelled, never written, undesired", nil, foreign, false},
		{"our manager name via Update is not an apply", desired, updateOnly, false},
		{"user object", desired, ptrNP(userNP("a", "p")), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Owned(tc.desired, tc.live))
		})
	}
}

func TestDecide(t *testing.T) {
	gen := ptrNP(genNP("a", "p", "h1"))
	gen2 := ptrNP(genNP("a", "p", "h2"))
	gen2.Spec.Ingress[0].From[0].IPBlock.CIDR = "10.1.0.8/32" // 10.1.0.7 is dropped: narrower
	grown := ptrNP(genNP("a", "p", "h3"))                     // 10.1.0.8 added: wider
	grown.Spec.Ingress[0].From = append(grown.Spec.Ingress[0].From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.8/32"}})
	portNarrowed := ptrNP(genNP("a", "p", "h4")) // same peers, now only port 80: narrower
	portNarrowed.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(80))}}
	live := ptrNP(liveNP("a", "p", "h1"))
	user := ptrNP(userNP("a", "p"))
	other := ptrNP(liveNP("a", "p", "h1"))
	other.ManagedFields = nil
	other.Labels[ManagedByLabel] = "someone-else"
	foreign := ptrNP(genNP("a", "p", "h1"))
	terminating := ptrNP(liveNP("a", "p", "h1"))
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	noHash := ptrNP(liveNP("a", "p", ""))
	// a hand edit that keeps the hash: spec.ingress replaced by allow-all
	edited := ptrNP(liveNP("a", "p", "h1"))
	edited.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
	unlabelled := ptrNP(liveNP("a", "p", "h1"))
	delete(unlabelled.Labels, ManagedByLabel)
	relabelled := ptrNP(liveNP("a", "p", "h1"))
	relabelled.Labels["extra"] = "x" // labels coastguard does not own are not drift
	annEdited := ptrNP(liveNP("a", "p", "h1"))
	annEdited.Annotations[OriginAnnotation] = "eu-9/a/p"
	// server defaults: protocol TCP and policyTypes are not drift
	withPort := ptrNP(genNP("a", "p", "h1"))
	withPort.Spec.PolicyTypes = nil
	withPort.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(80))}}
	defaulted := ptrNP(liveNP("a", "p", "h1"))
	defaulted.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt32(80)), Protocol: ptr.To(corev1.ProtocolTCP)}}

	cases := []struct {
		name          string
		desired, live *networkingv1.NetworkPolicy
		hold          bool
		want          Action
	}{
		{"nothing", nil, nil, false, ActionNone},
		{"create", gen, nil, false, ActionApply},
		{"create while held", gen, nil, true, ActionApply},
		{"unchanged", gen, live, false, ActionNone},
		{"hash differs", gen2, live, false, ActionApply},
		{"hash differs while held: could shrink", gen2, live, true, ActionHold},
		{"narrower ports while held", portNarrowed, live, true, ActionHold},
		{"wider while held: a new peer is added at once", grown, live, true, ActionApply},
		{"live lost its hash", gen, noHash, false, ActionApply},
		{"hand edit keeping the hash", gen, edited, false, ActionApply},
		{"hand edit repaired while held", gen, edited, true, ActionApply},
		{"label removed: re-adopted", gen, unlabelled, false, ActionApply},
		{"origin annotation edited", gen, annEdited, false, ActionApply},
		{"extra label is not drift", gen, relabelled, false, ActionNone},
		{"server defaults are not drift", withPort, defaulted, false, ActionNone},
		{"stale generated", nil, live, false, ActionDelete},
		{"stale generated while held", nil, live, true, ActionHold},
		{"stale, label removed", nil, unlabelled, false, ActionDelete},
		{"user object, not desired", nil, user, false, ActionNone},
		{"user object holds desired name", gen, user, false, ActionConflict},
		{"other manager holds desired name", gen, other, false, ActionConflict},
		{"other manager, not desired", nil, other, false, ActionNone},
		{"foreign labelled, desired name", gen, foreign, false, ActionForeign},
		{"foreign labelled, not desired: never deleted", nil, foreign, false, ActionForeign},
		{"terminating, desired", gen2, terminating, false, ActionNone},
		{"terminating, not desired", nil, terminating, false, ActionNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, DecideGated(tc.desired, tc.live, tc.hold))
		})
	}
}

// One invalid or colliding desired object affects only its own name and
// origin; everything else is installed (SetDesired's index).
func TestIndexDesiredIsolatesInvalid(t *testing.T) {
	unlabelled := genNP("a", "x", "h")
	unlabelled.Labels = nil
	dupA := genNP("a", "x", "h")
	dupB := genNP("a", "x", "h2")
	dupB.Annotations[OriginAnnotation] = "eu-2/a/big.p2-3675f42a7e"
	badName := genNP("a", "Bad_Name", "h")
	cases := map[string][]networkingv1.NetworkPolicy{
		"no label":  {unlabelled},
		"no hash":   {genNP("a", "x", "")},
		"no name":   {genNP("a", "", "h")},
		"no ns":     {genNP("", "x", "h")},
		"bad name":  {badName},
		"duplicate": {dupA, dupB},
	}
	for name, bad := range cases {
		for i := range bad {
			if bad[i].Annotations[OriginAnnotation] != "eu-2/a/big.p2-3675f42a7e" {
				bad[i].Annotations[OriginAnnotation] = "eu-1/a/x" // the MCNP that generated live a/x
			}
		}
		t.Run(name, func(t *testing.T) {
			desired := append([]networkingv1.NetworkPolicy{genNP("a", "good", "h1")}, bad...)
			res := indexDesired(desired)
			require.Len(t, res.want, 1, "the valid object is still applied")
			assert.Contains(t, res.want, types.NamespacedName{Namespace: "a", Name: "good"})
			if name != "no name" && name != "no ns" && name != "bad name" {
				assert.Contains(t, res.broken, types.NamespacedName{Namespace: "a", Name: "x"}, "the live object of a refused name is not deleted")
			}
			assert.NotEmpty(t, res.rejected)
			assert.NotContains(t, res.rejected, "eu-1/a/good")
			if name == "duplicate" {
				assert.Contains(t, res.rejected, "eu-1/a/x")
				assert.Contains(t, res.rejected, "eu-2/a/big.p2-3675f42a7e")
				assert.Contains(t, res.rejected["eu-1/a/x"][0], "eu-2/a/big.p2-3675f42a7e")
			}
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
	return newApplierRigOpts(t, setup, ApplierOptions{}, objs...)
}

func newApplierRigOpts(t *testing.T, setup func(*fake.Clientset), opts ApplierOptions, objs ...runtime.Object) *applierRig {
	t.Helper()
	client := fake.NewClientset(objs...)
	if setup != nil {
		setup(client) // reactors must be in place before informers start
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	opts.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 20*time.Millisecond)
	a, err := NewApplier(client, factory.Networking().V1().NetworkPolicies(), opts)
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
	sameLive := liveNP("a", "same", "h1")
	changedLive := liveNP("a", "changed", "h1")
	staleLive := liveNP("a", "stale", "h1")
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

func TestApplierIsolatesBadObjects(t *testing.T) {
	var notified sync.Map
	r := newApplierRigOpts(t, nil, ApplierOptions{OnFailure: func(o string) { notified.Store(o, true) }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.run(ctx)
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "p", "h1"), genNP("a", "bad", "h1")}))
	waitSettled(t, r.applier)
	_, ok := r.get(t, "a", "bad")
	require.True(t, ok)
	err := r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "p", "h1"), genNP("a", "q", "h1"), genNP("a", "bad", "")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "eu-1/a/bad")
	waitSettled(t, r.applier)
	require.Eventually(t, func() bool { _, ok := r.get(t, "a", "q"); return ok }, 10*time.Second, 5*time.Millisecond, "the valid new object is applied")
	_, ok = r.get(t, "a", "bad")
	assert.True(t, ok, "the live object of the refused one is neither deleted nor changed")
	f := r.applier.Failures()
	assert.Len(t, f, 1)
	assert.Contains(t, f["eu-1/a/bad"], "lacks annotation")
	_, ok = notified.Load("eu-1/a/bad")
	assert.True(t, ok, "the failing origin is notified")
	assert.Equal(t, 1.0, testutil.ToFloat64(r.applier.metrics.Errors.WithLabelValues("plan")))

	// fixed: the failure clears
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "p", "h1"), genNP("a", "q", "h1"), genNP("a", "bad", "h2")}))
	waitSettled(t, r.applier)
	assert.Empty(t, r.applier.Failures())
}

func TestApplierRestartsAcrossTerms(t *testing.T) {
	stale := liveNP("a", "stale", "h1")
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

// Drift repair through the informer: a hand edit that keeps the hash, a
// removed managed-by label, a deleted policy; a foreign labelled policy is
// left alone and counted; the gate holds deletes and content changes.
func TestApplierRepairsDriftAndRespectsForeign(t *testing.T) {
	foreign := genNP("a", "foreign", "h1") // created by someone else with our label
	r := newApplierRig(t, nil, &foreign)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.run(ctx)
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("a", "p", "h1"), genNP("a", "q", "h1")}))
	waitSettled(t, r.applier)
	np, ok := r.get(t, "a", "p")
	require.True(t, ok)
	require.True(t, WrittenByUs(np), "fake apiserver records our field manager: %+v", np.ManagedFields)
	nps := r.client.NetworkingV1().NetworkPolicies("a")

	// hand edit: allow-all ingress, hash annotation untouched
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
	_, err := nps.Update(ctx, np, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		np, _ := r.get(t, "a", "p")
		return len(np.Spec.Ingress) == 1 && len(np.Spec.Ingress[0].From) == 1
	}, 10*time.Second, 5*time.Millisecond, "hand edit reverted")

	// label removed: re-adopted
	np, _ = r.get(t, "a", "p")
	delete(np.Labels, ManagedByLabel)
	_, err = nps.Update(ctx, np, metav1.UpdateOptions{FieldManager: "kubectl-label"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { np, _ := r.get(t, "a", "p"); return IsManaged(np) }, 10*time.Second, 5*time.Millisecond, "label restored")
	assert.GreaterOrEqual(t, testutil.ToFloat64(r.applier.metrics.Repairs), 2.0)

	// the foreign policy is never deleted, and is counted
	waitSettled(t, r.applier)
	_, ok = r.get(t, "a", "foreign")
	assert.True(t, ok)
	assert.Equal(t, 1.0, testutil.ToFloat64(r.applier.metrics.Foreign))
	assert.Equal(t, 0, countActions(r.client, "delete", "foreign"))
	assert.Equal(t, 0, countActions(r.client, "patch", "foreign"))

	// gate closed: dropping q and changing p's content are held, a new
	// policy is created, a deleted one recreated
	r.applier.SetHold(true)
	changed := genNP("a", "p", "h2")
	changed.Spec.Ingress = nil
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{changed, genNP("a", "n", "h1")}))
	require.Eventually(t, func() bool { _, ok := r.get(t, "a", "n"); return ok }, 10*time.Second, 5*time.Millisecond)
	waitSettled(t, r.applier)
	assert.Equal(t, 2, r.applier.Held())
	_, ok = r.get(t, "a", "q")
	assert.True(t, ok, "not deleted while held")
	np, _ = r.get(t, "a", "p")
	assert.Equal(t, "h1", np.Annotations[ContentHashAnnotation], "not shrunk while held")
	require.NoError(t, nps.Delete(ctx, "n", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, ok := r.get(t, "a", "n"); return ok }, 10*time.Second, 5*time.Millisecond, "recreated while held")

	r.applier.SetHold(false)
	require.Eventually(t, func() bool {
		_, okQ := r.get(t, "a", "q")
		np, _ := r.get(t, "a", "p")
		return !okQ && np.Annotations[ContentHashAnnotation] == "h2"
	}, 10*time.Second, 5*time.Millisecond, "released")
	assert.Equal(t, 0, r.applier.Held())
}
