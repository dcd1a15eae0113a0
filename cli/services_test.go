package cli

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// The CLI's live view holds the exported Services as the daemons' do, so
// what-if and explain translate with the same address rules.
func TestLoadServicesFeedsTranslation(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.20", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 15432, TargetPort: intstr.FromString("pg")}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cache"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.21", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Port: 6379}}}})
	export := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
		"metadata": map[string]any{"name": "db", "namespace": "shop"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.ServiceExportResource: "ServiceExportList"}, export)

	inv := enforce.NewInventory()
	nets, err := enforce.ParseClusterCIDRs([]string{"c1=10.1.0.0/16", "c2=10.2.0.0/16", "c2:service=10.97.0.0/16"})
	require.NoError(t, err)
	inv.SetNetworks(nets)
	for _, c := range []string{"c1", "c2"} {
		inv.SetCluster(enforce.Cluster{ID: c})
		inv.SetNamespace(c, enforce.Namespace{Name: "shop"})
	}
	inv.SetPod("c2", enforce.Pod{Namespace: "shop", Name: "db-0", Labels: map[string]string{"role": "db"}, IPs: []string{"10.2.0.10"},
		Phase: corev1.PodRunning, Ports: []enforce.Port{{Name: "pg", Port: 5432}}})
	_, err = loadServices(context.Background(), &member{ID: "c2", Client: client, Dynamic: dyn}, inv)
	require.NoError(t, err)
	var spec apiv1.MultiClusterNetworkPolicySpec
	require.NoError(t, yaml.UnmarshalStrict([]byte(`
podSelector: {}
policyTypes: [Egress]
egress:
- to: [{clusterSelector: {}, podSelector: {matchLabels: {role: db}}}]
  ports: [{port: pg}]
`), &spec))
	require.NoError(t, inv.SetPolicy(enforce.Policy{Origin: "c1", Namespace: "shop", Name: "egress", Spec: spec}))
	out, err := yaml.Marshal(enforce.Translate("c1", inv))
	require.NoError(t, err)
	require.Contains(t, string(out), "10.97.0.20/32", "the exported Service's ClusterIP")
	require.NotContains(t, string(out), "10.97.0.21", "cache is not exported")
}

// A service peer is resolved by the CLI's live view as by the daemons:
// what-if and explain show the exported Service's backends and ClusterIP,
// and nothing for a Service that is not exported (Degraded).
func TestLoadServicesFeedServicePeers(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.20", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 15432, TargetPort: intstr.FromString("pg")}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cache"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.21", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Port: 6379}}}})
	export := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
		"metadata": map[string]any{"name": "db", "namespace": "shop"}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.ServiceExportResource: "ServiceExportList"}, export)

	inv := enforce.NewInventory()
	nets, err := enforce.ParseClusterCIDRs([]string{"c1=10.1.0.0/16", "c2=10.2.0.0/16", "c2:service=10.97.0.0/16"})
	require.NoError(t, err)
	inv.SetNetworks(nets)
	for _, c := range []string{"c1", "c2"} {
		inv.SetCluster(enforce.Cluster{ID: c})
		inv.SetNamespace(c, enforce.Namespace{Name: "shop"})
	}
	inv.SetPod("c2", enforce.Pod{Namespace: "shop", Name: "db-0", Labels: map[string]string{"role": "db"}, IPs: []string{"10.2.0.10"},
		Phase: corev1.PodRunning, Ports: []enforce.Port{{Name: "pg", Port: 5432}}})
	_, err = loadServices(context.Background(), &member{ID: "c2", Client: client, Dynamic: dyn}, inv)
	require.NoError(t, err)
	for _, tc := range []struct {
		svc      string
		want     []string
		degraded string
	}{
		{"db", []string{"10.2.0.10/32", "10.97.0.20/32"}, ""},
		{"cache", nil, enforce.ReasonServicePeerNotExported},
	} {
		var spec apiv1.MultiClusterNetworkPolicySpec
		require.NoError(t, yaml.UnmarshalStrict([]byte(`
podSelector: {}
policyTypes: [Egress]
egress:
- to: [{service: {name: `+tc.svc+`, clusterSelector: {}}}]
  ports: [{port: pg}]
`), &spec))
		require.NoError(t, inv.SetPolicy(enforce.Policy{Origin: "c1", Namespace: "shop", Name: "egress", Spec: spec}))
		res := enforce.Evaluate("c1", inv, enforce.PolicyRef{Origin: "c1", Namespace: "shop", Name: "egress"})
		require.Equal(t, tc.degraded, res.Degraded, tc.svc)
		out, err := yaml.Marshal(res.NetworkPolicies)
		require.NoError(t, err)
		for _, ip := range tc.want {
			require.Contains(t, string(out), ip, tc.svc)
		}
		if tc.want == nil {
			require.NotContains(t, string(out), "ipBlock", tc.svc)
		}
	}
}
