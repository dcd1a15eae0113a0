package kube

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func TestServiceToValue(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			ClusterIP:  "10.97.0.20",
			ClusterIPs: []string{"10.97.0.20", "fd00:97::20"},
			Selector:   map[string]string{"role": "db"},
			Ports: []corev1.ServicePort{
				{Name: "pg", Port: 15432, TargetPort: intstr.FromString("pg"), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9187)},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			},
		},
	}
	v, err := ServiceToValue(svc)
	require.NoError(t, err)
	require.Equal(t, crdt.ServiceValue{
		ClusterIPs: []string{"10.97.0.20", "fd00:97::20"},
		Selector:   map[string]string{"role": "db"},
		Ports: []crdt.ServicePort{
			{Name: "pg", Port: 15432, TargetPortName: "pg"},
			{Name: "metrics", Port: 9090, TargetPort: 9187},
			{Name: "dns", Port: 53, TargetPort: 53, Protocol: "UDP"},
		},
	}, v)

	headless := svc.DeepCopy()
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	v, err = ServiceToValue(headless)
	require.NoError(t, err)
	require.True(t, v.Headless)
	require.Empty(t, v.ClusterIPs)

	bad := svc.DeepCopy()
	bad.Spec.ClusterIPs = []string{"not-an-ip"}
	_, err = ServiceToValue(bad)
	require.ErrorContains(t, err, `"not-an-ip" is not an IP address`)
}

// exportDiscovery serves ServiceExport when served is set.
type exportDiscovery struct {
	discovery.DiscoveryInterface
	served bool
}

func (d *exportDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if d.served && gv == ServiceExportResource.GroupVersion().String() {
		return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: "serviceexports", Kind: "ServiceExport"}}}, nil
	}
	return d.DiscoveryInterface.ServerResourcesForGroupVersion(gv)
}

func serviceExport(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
		"metadata": map[string]any{"name": name, "namespace": ns}}}
}

// Only Services with a ServiceExport are entries, and none while the
// ServiceExport resource is not served; an export created later is
// picked up.
func TestInventoryReplicatesOnlyExportedServices(t *testing.T) {
	svc := func(name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	}
	for _, served := range []bool{false, true} {
		client := fake.NewClientset(svc("db", "10.96.0.10"), svc("cache", "10.96.0.11"))
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
			MCNPResource: "MultiClusterNetworkPolicyList", ServiceExportResource: "ServiceExportList",
		}, serviceExport("shop", "db"), serviceExport("shop", "gone"))
		inv, err := NewInventory(InventoryConfig{
			ClusterID: "c1", Client: client, Dynamic: dyn, Discovery: &exportDiscovery{DiscoveryInterface: client.Discovery(), served: served},
			Writer: &memReplica{}, Persisted: func() (Snapshot, error) { return Snapshot{}, nil },
			ClusterInfo: func() ClusterInfo { return ClusterInfo{} },
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		inv.Start(ctx)
		require.NoError(t, inv.WaitForSync(ctx))
		services := func() []string {
			snap, failed, err := inv.Desired()
			require.NoError(t, err)
			require.Empty(t, failed)
			return slices.Sorted(maps.Keys(snap[crdt.KindService]))
		}
		if !served {
			require.Empty(t, services(), "no ServiceExport resource: nothing is exported")
			cancel()
			continue
		}
		require.Equal(t, []string{"shop/db"}, services(), "cache has no export; the export of gone has no Service")
		snap, _, _ := inv.Desired()
		b, _ := snap.Get(crdt.KindService, "shop/db")
		var v crdt.ServiceValue
		require.NoError(t, crdt.DecodeValue(b, &v))
		require.Equal(t, []string{"10.96.0.10"}, v.ClusterIPs)
		_, err = dyn.Resource(ServiceExportResource).Namespace("shop").Create(ctx, serviceExport("shop", "cache"), metav1.CreateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return slices.Equal([]string{"shop/cache", "shop/db"}, services()) }, 5*time.Second, 5*time.Millisecond)
		cancel()
	}
}

func serviceGlobalIngressIP(ns, name, target, svc, allocated string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1", "kind": "GlobalIngressIP",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"target": target},
	}}
	if svc != "" {
		u.Object["spec"].(map[string]any)["serviceRef"] = map[string]any{"name": svc}
	}
	if allocated != "" {
		u.Object["status"] = map[string]any{"allocatedIP": allocated}
	}
	return u
}

// Under Globalnet the Service entry carries the global ingress IP that a
// GlobalIngressIP (target ClusterIPService, serviceRef = the Service)
// allocates, read through the Submariner watcher on fake apiservers; a
// headless Service's per-pod GlobalIngressIPs and other Services' are not
// its; an invalid allocatedIP fails the conversion (the entry keeps its
// last value, the error is counted); a new GlobalIngressIP calls back
// with the Service it names. The entry also carries
// publishNotReadyAddresses, and a pod's entry its readiness.
func TestInventoryServiceGlobalIPsAndReadiness(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dbSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Selector: map[string]string{"role": "db"}, PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{{Port: 5432}}}}
	cache := dbSvc.DeepCopy()
	cache.Name, cache.Spec.ClusterIP, cache.Spec.PublishNotReadyAddresses = "cache", "10.96.0.11", false
	notReady := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-1", Labels: map[string]string{"role": "db"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.11",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	client := fake.NewClientset(dbSvc, cache, notReady)
	client.Resources = []*metav1.APIResourceList{{GroupVersion: "submariner.io/v1", APIResources: []metav1.APIResource{{Name: "globalingressips"}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		MCNPResource: "MultiClusterNetworkPolicyList", ServiceExportResource: "ServiceExportList", GlobalIngressIPResource: "GlobalIngressIPList",
	}, serviceExport("shop", "db"), serviceExport("shop", "cache"),
		serviceGlobalIngressIP("shop", "db", globalIngressIPTargetService, "db", "242.2.0.9"),
		serviceGlobalIngressIP("shop", "db-0-pod", "HeadlessServicePod", "", "242.2.0.20"),
		serviceGlobalIngressIP("shop", "cache", globalIngressIPTargetService, "cache", ""),
		serviceGlobalIngressIP("billing", "db", globalIngressIPTargetService, "db", "242.2.0.30"))
	w, err := NewSubmarinerWatcher(SubmarinerConfig{ClusterID: "c2", Dynamic: dyn, Discovery: client.Discovery()})
	require.NoError(t, err)
	require.Equal(t, []string{"globalingressips"}, w.Watching())
	changed := make(chan string, 16)
	w.OnServiceGlobalIPChange(func(ns, name string) { changed <- ns + "/" + name })
	w.Start(ctx.Done())
	require.Eventually(t, w.HasSynced, 5*time.Second, 10*time.Millisecond)
	reg := prometheus.NewRegistry()
	inv, err := NewInventory(InventoryConfig{
		ClusterID: "c2", Client: client, Dynamic: dyn, Discovery: &exportDiscovery{DiscoveryInterface: client.Discovery(), served: true},
		Writer: &memReplica{}, Persisted: func() (Snapshot, error) { return Snapshot{}, nil },
		ClusterInfo: func() ClusterInfo { return ClusterInfo{} }, ServiceGlobalIPs: w.ServiceGlobalIPsFunc(), Registerer: reg,
	})
	require.NoError(t, err)
	inv.Start(ctx)
	require.NoError(t, inv.WaitForSync(ctx))
	value := func(snap Snapshot, name string) crdt.ServiceValue {
		b, ok := snap.Get(crdt.KindService, name)
		require.True(t, ok, name)
		var v crdt.ServiceValue
		require.NoError(t, crdt.DecodeValue(b, &v))
		return v
	}
	snap, failed, err := inv.Desired()
	require.NoError(t, err)
	require.Empty(t, failed)
	db := value(snap, "shop/db")
	require.Equal(t, []string{"242.2.0.9"}, db.GlobalIPs, "only its own ClusterIPService GlobalIngressIP of its namespace")
	require.True(t, db.PublishNotReady)
	require.Empty(t, value(snap, "shop/cache").GlobalIPs, "not allocated yet")
	b, ok := snap.Get(crdt.KindPod, "shop/db-1")
	require.True(t, ok)
	var pv crdt.PodValue
	require.NoError(t, crdt.DecodeValue(b, &pv))
	require.True(t, pv.NotReady)

	// allocation arrives: the callback names the Service
	drain(changed)
	_, err = dyn.Resource(GlobalIngressIPResource).Namespace("shop").Update(ctx,
		serviceGlobalIngressIP("shop", "cache", globalIngressIPTargetService, "cache", "242.2.0.10"), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(changed) > 0 && <-changed == "shop/cache" }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		snap, _, _ := inv.Desired()
		return slices.Equal(value(snap, "shop/cache").GlobalIPs, []string{"242.2.0.10"})
	}, 5*time.Second, 10*time.Millisecond)

	// a bogus allocation: the conversion fails, the error is counted
	_, err = dyn.Resource(GlobalIngressIPResource).Namespace("shop").Update(ctx,
		serviceGlobalIngressIP("shop", "cache", globalIngressIPTargetService, "cache", "242.2.0.x"), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, failed, _ := inv.Desired()
		return slices.Contains(failed, InventoryKey{Kind: crdt.KindService, Name: "shop/cache"})
	}, 5*time.Second, 10*time.Millisecond)
	_, ferr := w.ServiceGlobalIPs("shop", "cache")
	require.ErrorContains(t, ferr, `GlobalIngressIP shop/cache: status.allocatedIP: "242.2.0.x" is not an IP address`)
	require.Positive(t, testutil.ToFloat64(inv.metrics.errors.WithLabelValues("service")))
}

func drain(ch chan string) {
	for len(ch) > 0 {
		<-ch
	}
}
