package kube

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// memReplica stands in for store.Replica: it records own writes.
type memReplica struct {
	mu     sync.Mutex
	own    Snapshot
	writes []Write
	fail   atomic.Bool
}

func newMemReplica() *memReplica { return &memReplica{own: Snapshot{}} }

func (m *memReplica) Write(kind crdt.Kind, name string, value []byte, deleted bool) error {
	if m.fail.Load() {
		return errors.New("disk full")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes = append(m.writes, Write{Kind: kind, Name: name, Value: append([]byte(nil), value...), Deleted: deleted})
	if deleted {
		m.own.Delete(kind, name)
	} else {
		m.own.Set(kind, name, append([]byte(nil), value...))
	}
	return nil
}

func (m *memReplica) Persisted() (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := Snapshot{}
	for k, mm := range m.own {
		for n, v := range mm {
			out.Set(k, n, v)
		}
	}
	return out, nil
}

func (m *memReplica) get(kind crdt.Kind, name string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.own.Get(kind, name)
}

func (m *memReplica) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.writes)
}

// switchDiscovery serves ClusterProperty only when enabled.
type switchDiscovery struct {
	discovery.DiscoveryInterface
	served atomic.Bool
}

func (d *switchDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if d.served.Load() && gv == ClusterPropertyResource.GroupVersion().String() {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "clusterproperties", Kind: "ClusterProperty"}}}, nil
	}
	return d.DiscoveryInterface.ServerResourcesForGroupVersion(gv)
}

func runningPod(ns, name, ip string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func clusterProp(name, value string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"value": value},
	}}
}

type invRig struct {
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	disc   *switchDiscovery
	rep    *memReplica
	inv    *Inventory
	reg    *prometheus.Registry
	ctx    context.Context
}

func newInvRig(t *testing.T, rep *memReplica, kubeObjs []runtime.Object, dynObjs []runtime.Object, withProps bool) *invRig {
	t.Helper()
	client := fake.NewClientset(kubeObjs...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		MCNPResource:            "MultiClusterNetworkPolicyList",
		ClusterPropertyResource: "ClusterPropertyList",
	}, dynObjs...)
	disc := &switchDiscovery{DiscoveryInterface: client.Discovery()}
	disc.served.Store(withProps)
	reg := prometheus.NewRegistry()
	inv, err := NewInventory(InventoryConfig{
		ClusterID: "c1", Client: client, Dynamic: dyn, Discovery: disc,
		Writer: rep, Persisted: rep.Persisted,
		ClusterInfo:    func() ClusterInfo { return ClusterInfo{PodCIDRs: []string{"10.0.0.0/16"}, GossipName: "c1-0"} },
		FullSyncPeriod: 100 * time.Millisecond,
		RateLimiter:    workqueue.NewTypedItemExponentialFailureRateLimiter[InventoryKey](time.Millisecond, 20*time.Millisecond),
		Registerer:     reg,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inv.Start(ctx)
	require.NoError(t, inv.WaitForSync(ctx))
	// the fakes drop events that happen between LIST and WATCH; wait for the watches
	require.Eventually(t, func() bool {
		return hasWatch(client.Actions(), "pods") && hasWatch(client.Actions(), "namespaces") && hasWatch(dyn.Actions(), "multiclusternetworkpolicies")
	}, 5*time.Second, 5*time.Millisecond)
	return &invRig{client: client, dyn: dyn, disc: disc, rep: rep, inv: inv, reg: reg, ctx: ctx}
}

func hasWatch(actions []k8stesting.Action, resource string) bool {
	for _, a := range actions {
		if a.GetVerb() == "watch" && a.GetResource().Resource == resource {
			return true
		}
	}
	return false
}

func encoded(t *testing.T, v any) []byte {
	t.Helper()
	b, err := crdt.EncodeValue(v)
	require.NoError(t, err)
	return b
}

func (r *invRig) runWriter(t *testing.T, ctx context.Context) chan error {
	done := make(chan error, 1)
	go func() { done <- r.inv.RunWriter(ctx) }()
	return done
}

func (r *invRig) eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, 5*time.Millisecond, msg)
}

func podValue(t *testing.T, p *corev1.Pod) []byte {
	v, err := PodToValue(p)
	require.NoError(t, err)
	return encoded(t, &v)
}

func TestInventoryJoinFlowAndLiveUpdates(t *testing.T) {
	rep := newMemReplica()
	// state persisted before the daemon went down
	rep.own.Set(crdt.KindPod, "shop/gone", []byte("old"))
	rep.own.Set(crdt.KindPod, "shop/web", []byte("stale"))
	rep.own.Set(crdt.KindNamespace, "deleted-ns", []byte("old"))
	rep.own.Set(crdt.KindPolicy, "shop/removed", []byte("old"))
	web := runningPod("shop", "web", "10.0.0.5", map[string]string{"app": "web"})
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pending"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"env": "prod"}}}
	pol := mcnp("shop", "allow", map[string]any{"podSelector": map[string]any{}})
	pol.SetAPIVersion("networking.submariner.io/v1")
	r := newInvRig(t, rep, []runtime.Object{web, pending, shop}, []runtime.Object{pol, clusterProp("region", "eu")}, true)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := r.runWriter(t, ctx)
	r.eventually(t, func() bool { _, ok := rep.get(crdt.KindNamespace, "deleted-ns"); return !ok }, "join flow tombstones")

	persisted, _ := rep.Persisted()
	assert.Equal(t, podValue(t, web), persisted[crdt.KindPod]["shop/web"])
	_, ok := persisted.Get(crdt.KindPod, "shop/gone")
	assert.False(t, ok)
	_, ok = persisted.Get(crdt.KindPod, "shop/pending")
	assert.False(t, ok, "pods without IP are not replicated")
	_, ok = persisted.Get(crdt.KindPolicy, "shop/removed")
	assert.False(t, ok)
	var pv crdt.PolicyValue
	require.NoError(t, crdt.DecodeValue(persisted[crdt.KindPolicy]["shop/allow"], &pv))
	assert.JSONEq(t, `{"podSelector":{}}`, string(pv.Spec))
	var nv crdt.NamespaceValue
	require.NoError(t, crdt.DecodeValue(persisted[crdt.KindNamespace]["shop"], &nv))
	assert.Equal(t, map[string]string{"env": "prod"}, nv.Labels)
	var cv crdt.ClusterValue
	r.eventually(t, func() bool {
		b, ok := rep.get(crdt.KindCluster, "")
		return ok && crdt.DecodeValue(b, &cv) == nil && cv.Labels["region"] == "eu"
	}, "cluster entry with ClusterProperty labels")
	assert.Equal(t, "c1", cv.Labels[ClusterIDLabel])
	assert.Equal(t, []string{"10.0.0.0/16"}, cv.PodCIDRs)

	// tombstones were written for exactly the three vanished entries
	tombs := 0
	rep.mu.Lock()
	for _, w := range rep.writes {
		if w.Deleted {
			tombs++
		}
	}
	rep.mu.Unlock()
	assert.Equal(t, 3, tombs)

	pods := r.client.CoreV1().Pods("shop")
	bg := context.Background()
	// label change -> write
	web2 := web.DeepCopy()
	web2.Labels["version"] = "2"
	_, err := pods.Update(bg, web2, metav1.UpdateOptions{})
	require.NoError(t, err)
	r.eventually(t, func() bool { b, _ := rep.get(crdt.KindPod, "shop/web"); return string(b) == string(podValue(t, web2)) }, "label update replicated")

	// irrelevant change (annotation) -> no write
	before := rep.count()
	web3 := web2.DeepCopy()
	web3.Annotations = map[string]string{"noise": "1"}
	_, err = pods.Update(bg, web3, metav1.UpdateOptions{})
	require.NoError(t, err)
	// the pending pod gets an IP -> one write; that also proves the annotation event was processed before it
	p2 := pending.DeepCopy()
	p2.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.9"}
	_, err = pods.UpdateStatus(bg, p2, metav1.UpdateOptions{})
	require.NoError(t, err)
	r.eventually(t, func() bool { _, ok := rep.get(crdt.KindPod, "shop/pending"); return ok }, "pod with new IP replicated")
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, before+1, rep.count(), "annotation-only change must not write")

	// pod finishes -> tombstone
	p3 := p2.DeepCopy()
	p3.Status.Phase = corev1.PodSucceeded
	_, err = pods.UpdateStatus(bg, p3, metav1.UpdateOptions{})
	require.NoError(t, err)
	r.eventually(t, func() bool { _, ok := rep.get(crdt.KindPod, "shop/pending"); return !ok }, "finished pod tombstoned")

	// delete -> tombstone
	require.NoError(t, pods.Delete(bg, "web", metav1.DeleteOptions{}))
	r.eventually(t, func() bool { _, ok := rep.get(crdt.KindPod, "shop/web"); return !ok }, "deleted pod tombstoned")

	// policy change and namespace label change
	pol2 := pol.DeepCopy()
	require.NoError(t, unstructured.SetNestedField(pol2.Object, map[string]any{"matchLabels": map[string]any{"a": "b"}}, "spec", "podSelector"))
	_, err = r.dyn.Resource(MCNPResource).Namespace("shop").Update(bg, pol2, metav1.UpdateOptions{})
	require.NoError(t, err)
	r.eventually(t, func() bool {
		b, _ := rep.get(crdt.KindPolicy, "shop/allow")
		var v crdt.PolicyValue
		return crdt.DecodeValue(b, &v) == nil && string(v.Spec) == `{"podSelector":{"matchLabels":{"a":"b"}}}`
	}, "policy update replicated")

	// the periodic full sync finds nothing to do
	n := rep.count()
	syncs := testutil.ToFloat64(r.inv.metrics.fullSyncs)
	r.eventually(t, func() bool { return testutil.ToFloat64(r.inv.metrics.fullSyncs) >= syncs+2 }, "periodic full sync")
	assert.Equal(t, n, rep.count(), "steady state: full sync writes nothing")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("RunWriter did not stop")
	}
}

func TestInventoryKeepsUnconvertibleEntries(t *testing.T) {
	rep := newMemReplica()
	rep.own.Set(crdt.KindPolicy, "shop/broken", []byte("last good"))
	broken := mcnp("shop", "broken", nil)
	r := newInvRig(t, rep, nil, []runtime.Object{broken}, false)
	rec := record.NewFakeRecorder(8)
	r.inv.cfg.Recorder = rec
	require.NoError(t, r.inv.FullSync())
	select {
	case e := <-rec.Events:
		assert.Contains(t, e, "Warning InvalidPolicy")
		assert.Contains(t, e, "has no spec")
	default:
		t.Error("no Event for the invalid policy")
	}
	b, ok := rep.get(crdt.KindPolicy, "shop/broken")
	assert.True(t, ok, "a policy that fails to convert is not tombstoned")
	assert.Equal(t, "last good", string(b))
	assert.GreaterOrEqual(t, testutil.ToFloat64(r.inv.metrics.errors.WithLabelValues("policy")), 1.0)
	// without ClusterProperty the cluster entry has just the ID label
	var cv crdt.ClusterValue
	cb, ok := rep.get(crdt.KindCluster, "")
	require.True(t, ok)
	require.NoError(t, crdt.DecodeValue(cb, &cv))
	assert.Equal(t, map[string]string{ClusterIDLabel: "c1"}, cv.Labels)
}

func TestInventoryPicksUpClusterPropertyCRDLater(t *testing.T) {
	rep := newMemReplica()
	r := newInvRig(t, rep, nil, []runtime.Object{clusterProp("zone", "z1")}, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.runWriter(t, ctx)
	r.eventually(t, func() bool { _, ok := rep.get(crdt.KindCluster, ""); return ok }, "cluster entry")
	r.disc.served.Store(true) // CRD installed; the next full sync notices
	r.eventually(t, func() bool {
		b, _ := rep.get(crdt.KindCluster, "")
		var cv crdt.ClusterValue
		return crdt.DecodeValue(b, &cv) == nil && cv.Labels["zone"] == "z1"
	}, "ClusterProperty label appears")
}

func TestInventoryStopsWhenNotLeader(t *testing.T) {
	rep := newMemReplica()
	r := newInvRig(t, rep, nil, nil, false)
	r.inv.cfg.Writer = WriterFunc(func(crdt.Kind, string, []byte, bool) error { return ErrNotLeader })
	select {
	case err := <-r.runWriter(t, context.Background()):
		assert.ErrorIs(t, err, ErrNotLeader)
	case <-time.After(5 * time.Second):
		t.Fatal("RunWriter kept going without leadership")
	}
}

func TestInventoryRetriesFailedWrites(t *testing.T) {
	rep := newMemReplica()
	rep.fail.Store(true)
	r := newInvRig(t, rep, []runtime.Object{runningPod("a", "p", "10.0.0.1", nil)}, nil, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.runWriter(t, ctx)
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, 0, rep.count())
	rep.fail.Store(false)
	r.eventually(t, func() bool { _, ok := rep.get(crdt.KindPod, "a/p"); return ok }, "write retried after failure")
}

func TestInventoryConfigValidation(t *testing.T) {
	_, err := NewInventory(InventoryConfig{})
	assert.Error(t, err)
	_, err = NewInventory(InventoryConfig{ClusterID: "c1", Client: fake.NewClientset()})
	assert.Error(t, err)
	inv, err := NewInventory(InventoryConfig{ClusterID: "c1", Client: fake.NewClientset(), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Writer: newMemReplica(), Persisted: newMemReplica().Persisted})
	require.NoError(t, err)
	assert.Error(t, inv.RunWriter(context.Background()), "RunWriter before Start")
}

func TestResourceServed(t *testing.T) {
	client := fake.NewClientset()
	disc := &switchDiscovery{DiscoveryInterface: client.Discovery()}
	ok, err := ClusterPropertyServed(disc)
	require.NoError(t, err)
	assert.False(t, ok)
	disc.served.Store(true)
	ok, err = ClusterPropertyServed(disc)
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestPodRelevant(t *testing.T) {
	assert.True(t, podRelevant(runningPod("a", "b", "1.2.3.4", nil)))
	assert.False(t, podRelevant(&corev1.Pod{}))
	p := runningPod("a", "b", "1.2.3.4", nil)
	p.Status.Phase = corev1.PodFailed
	assert.False(t, podRelevant(p))
}

func TestInventoryFullSyncAfterWatchFailure(t *testing.T) {
	old := RelistSyncDelay
	RelistSyncDelay = 10 * time.Millisecond
	defer func() { RelistSyncDelay = old }()
	client := fake.NewClientset()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{MCNPResource: "MultiClusterNetworkPolicyList"})
	rep := newMemReplica()
	inv, err := NewInventory(InventoryConfig{ClusterID: "c1", Client: client, Dynamic: dyn, Writer: rep, Persisted: rep.Persisted, FullSyncPeriod: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv.Start(ctx)
	go func() { _ = inv.RunWriter(ctx) }()
	require.Eventually(t, func() bool { return testutil.ToFloat64(inv.metrics.fullSyncs) == 1 }, 10*time.Second, 5*time.Millisecond)
	// the reflector reports a broken watch (it relists next): a full sync follows
	r := cache.NewReflector(&cache.ListWatch{}, &corev1.Pod{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
	inv.onWatchError(ctx, r, errors.New("watch broken"))
	require.Eventually(t, func() bool { return testutil.ToFloat64(inv.metrics.fullSyncs) == 2 }, 10*time.Second, 5*time.Millisecond)
}

// Republish (a new leader's takeover) rewrites every desired entry, also
// those whose replicated value is already equal, and still tombstones what
// is no longer desired; FullSync writes only the difference.
func TestInventoryRepublishRewritesEverything(t *testing.T) {
	rep := newMemReplica()
	rep.own.Set(crdt.KindPod, "shop/gone", []byte("stale"))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	r := newInvRig(t, rep, []runtime.Object{ns}, nil, false)
	require.NoError(t, r.inv.FullSync())
	_, ok := rep.get(crdt.KindPod, "shop/gone")
	require.False(t, ok)
	n := rep.count()
	require.NoError(t, r.inv.FullSync())
	require.Equal(t, n, rep.count(), "FullSync: nothing changed, nothing written")

	rep.own.Set(crdt.KindPod, "shop/gone-too", []byte("stale"))
	require.NoError(t, r.inv.Republish())
	rewritten := map[string]bool{}
	for _, w := range rep.writes[n:] {
		rewritten[w.Kind.String()+"/"+w.Name] = !w.Deleted
	}
	require.Equal(t, map[string]bool{"cluster/": true, "namespace/shop": true, "pod/shop/gone-too": false}, rewritten)
}
