package kube

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func subObj(kind, ns, name string, spec map[string]any, allocated ...any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	if allocated != nil {
		u.Object["status"] = map[string]any{"allocatedIPs": allocated}
	}
	return u
}

func TestSubmarinerWatcherInfo(t *testing.T) {
	objs := []runtime.Object{
		subObj("Cluster", "submariner-operator", "c1", map[string]any{"cluster_id": "c1",
			"cluster_cidr": []any{"10.1.0.0/16"}, "service_cidr": []any{"10.96.0.0/16"}, "global_cidr": []any{"242.1.0.0/16"}}),
		subObj("Cluster", "submariner-operator", "c2", map[string]any{"cluster_id": "c2", "cluster_cidr": []any{"10.2.0.0/16"}}),
		subObj("ClusterGlobalEgressIP", "submariner-operator", "cluster-egress.submariner.io", nil, "242.1.0.2", "242.1.0.1", "bogus"),
		subObj("GlobalEgressIP", "shop", "ns", map[string]any{}, "242.1.1.1"),
		subObj("GlobalEgressIP", "shop", "api", map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}}}, "242.1.2.1"),
		subObj("GlobalEgressIP", "shop", "bad", map[string]any{"podSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Bogus"}}}}, "242.1.3.1"),
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		SubmarinerClusterResource: "ClusterList", ClusterGlobalEgressIPResource: "ClusterGlobalEgressIPList", GlobalEgressIPResource: "GlobalEgressIPList",
	}, objs...)
	client := fake.NewClientset()
	client.Resources = []*metav1.APIResourceList{{GroupVersion: "submariner.io/v1", APIResources: []metav1.APIResource{
		{Name: "clusters"}, {Name: "clusterglobalegressips"}, {Name: "globalegressips"}}}}
	w, err := NewSubmarinerWatcher(SubmarinerConfig{ClusterID: "c1", Dynamic: dyn, Discovery: client.Discovery(),
		Base: ClusterInfo{PodCIDRs: []string{"stale"}}})
	require.NoError(t, err)
	require.Equal(t, []string{"clusters", "clusterglobalegressips", "globalegressips"}, w.Watching())
	var changes atomic.Int32
	var podNS atomic.Value
	w.OnChange(func() { changes.Add(1) })
	w.OnPodEgressChange(func(ns string) { podNS.Store(ns) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.Start(ctx.Done())
	require.Eventually(t, w.HasSynced, 5*time.Second, 10*time.Millisecond)

	info := w.Info()
	require.Equal(t, []string{"10.1.0.0/16"}, info.PodCIDRs, "this cluster's Cluster object, not c2's")
	require.Equal(t, []string{"242.1.0.0/16"}, info.GlobalCIDRs)
	require.True(t, info.Globalnet)
	require.Equal(t, []string{"242.1.0.1", "242.1.0.2"}, info.ClusterEgressIPs, "sorted, invalid entries skipped")
	require.Equal(t, map[string][]string{"shop": {"242.1.1.1"}}, info.NamespaceEgressIPs, "only GlobalEgressIPs without podSelector")
	require.Equal(t, []string{"242.1.2.1"}, w.PodEgressIPs("shop", map[string]string{"app": "api"}))
	require.Empty(t, w.PodEgressIPs("shop", map[string]string{"app": "web"}), "an invalid podSelector is ignored, never widened")
	require.Empty(t, w.PodEgressIPs("other", map[string]string{"app": "api"}))
	require.NotNil(t, w.PodEgressIPsFunc())

	before := changes.Load()
	_, err = dyn.Resource(GlobalEgressIPResource).Namespace("billing").Create(ctx,
		subObj("GlobalEgressIP", "billing", "pay", map[string]any{"podSelector": map[string]any{}}, "242.1.4.1"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return changes.Load() > before && podNS.Load() == "billing" }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"242.1.4.1"}, w.PodEgressIPs("billing", nil), "an empty podSelector selects every pod")
}

func TestSubmarinerWatcherNothingServed(t *testing.T) {
	client := fake.NewClientset()
	w, err := NewSubmarinerWatcher(SubmarinerConfig{ClusterID: "c1", Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()),
		Discovery: client.Discovery(), Base: ClusterInfo{PodCIDRs: []string{"10.9.0.0/16"}}})
	require.NoError(t, err)
	require.Empty(t, w.Watching())
	require.True(t, w.HasSynced())
	require.Equal(t, []string{"10.9.0.0/16"}, w.Info().PodCIDRs, "the base (discovered at start) is kept")
	require.Nil(t, w.PodEgressIPsFunc())
	var nilW *SubmarinerWatcher
	require.Nil(t, nilW.PodEgressIPsFunc())
}
