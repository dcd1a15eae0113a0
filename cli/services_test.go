package cli

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// The CLI's live view holds the exported Services as the daemons' do, so
// what-if and explain translate with the same address rules.
func TestLoadServicesFeedsTranslation(t *testing.T) {
	export := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
		"metadata": map[string]any{"name": "db", "namespace": "shop"}}}
	inv := servicesLive(t, []runtime.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.20", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 15432, TargetPort: intstr.FromString("pg")}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cache"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.21", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Port: 6379}}}},
	}, export)
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
	export := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
		"metadata": map[string]any{"name": "db", "namespace": "shop"}}}
	inv := servicesLive(t, []runtime.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.20", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 15432, TargetPort: intstr.FromString("pg")}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cache"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.21", Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Port: 6379}}}},
	}, export)
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

// servicesLive is the CLI's inventory of c1 and c2 (namespace shop in
// both) where c2 runs pod db-0 (role=db, port pg 5432) and holds svcs and
// export.
func servicesLive(t *testing.T, svcs []runtime.Object, export *unstructured.Unstructured) *enforce.Inventory {
	t.Helper()
	shop := func() runtime.Object { return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}} }
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0", Labels: map[string]string{"role": "db"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.2.0.10", PodIPs: []corev1.PodIP{{IP: "10.2.0.10"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	ms := []*member{
		fakeMember("c1", []runtime.Object{shop()}, nil),
		fakeMember("c2", append([]runtime.Object{shop(), pod}, svcs...), []runtime.Object{export}),
	}
	o := &Options{Namespace: "coastguard-system", ErrOut: io.Discard,
		ClusterCIDRs: []string{"c1=10.1.0.0/16", "c2=10.2.0.0/16", "c2:service=10.97.0.0/16"}}
	l, err := o.load(context.Background(), ms)
	require.NoError(t, err)
	return l.inv
}
