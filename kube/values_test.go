package kube

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func fullPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "42",
			Labels:          map[string]string{"app": "web", "tier": "front"},
			Annotations:     map[string]string{"big": strings.Repeat("x", 1000)},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
			OwnerReferences: []metav1.OwnerReference{{Name: "rs"}},
		},
		Spec: corev1.PodSpec{
			HostNetwork: true,
			NodeName:    "node-a",
			Volumes:     []corev1.Volume{{Name: "v"}},
			Containers: []corev1.Container{
				{Name: "app", Image: "img", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
				{Name: "sidecar", Image: "img2"},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.5",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}, {IP: "fd00::5"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, Message: "probe failed", LastTransitionTime: metav1.Now()}},
			HostIP: "192.168.0.1",
		},
	}
}

func TestTransformPodStripsEverythingElse(t *testing.T) {
	p := fullPod()
	out, err := TransformPod(p)
	require.NoError(t, err)
	s := out.(*corev1.Pod)
	assert.Equal(t, "web-1", s.Name)
	assert.Equal(t, "shop", s.Namespace)
	assert.EqualValues(t, "u1", s.UID)
	assert.Equal(t, "42", s.ResourceVersion)
	assert.Equal(t, p.Labels, s.Labels)
	assert.Nil(t, s.Annotations)
	assert.Nil(t, s.ManagedFields)
	assert.Nil(t, s.OwnerReferences)
	assert.Empty(t, s.Spec.NodeName)
	assert.Nil(t, s.Spec.Volumes)
	assert.True(t, s.Spec.HostNetwork)
	require.Len(t, s.Spec.Containers, 1, "containers without ports are dropped")
	assert.Empty(t, s.Spec.Containers[0].Image)
	assert.Nil(t, s.Spec.Containers[0].Env)
	assert.Len(t, s.Spec.Containers[0].Ports, 2)
	assert.Equal(t, corev1.PodRunning, s.Status.Phase)
	assert.Equal(t, p.Status.PodIPs, s.Status.PodIPs)
	assert.Equal(t, []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}, s.Status.Conditions,
		"only the Ready condition's status is kept")
	assert.Empty(t, s.Status.HostIP)
	// the stripped pod converts to exactly the same value
	assert.Equal(t, mustPodValue(t, p), mustPodValue(t, s))

	tomb, err := TransformPod(cache.DeletedFinalStateUnknown{Key: "shop/web-1", Obj: p})
	require.NoError(t, err)
	assert.Nil(t, tomb.(cache.DeletedFinalStateUnknown).Obj.(*corev1.Pod).Annotations)

	ns := &corev1.Namespace{}
	same, err := TransformPod(ns)
	require.NoError(t, err)
	assert.Same(t, ns, same)
}

func TestPodToValue(t *testing.T) {
	v := mustPodValue(t, fullPod())
	assert.Equal(t, []string{"10.0.0.5", "fd00::5"}, v.IPs)
	assert.Equal(t, "Running", v.Phase)
	assert.True(t, v.HostNetwork)
	assert.True(t, v.NotReady, "Ready=False")
	assert.Equal(t, []crdt.NamedPort{{Name: "http", Port: 8080}, {Port: 53, Protocol: "UDP"}}, v.Ports)
	assert.Equal(t, map[string]string{"app": "web", "tier": "front"}, v.Labels)

	legacy := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.1.1.1", Phase: corev1.PodPending}}
	assert.Equal(t, []string{"10.1.1.1"}, mustPodValue(t, legacy).IPs)
	assert.Nil(t, mustPodValue(t, &corev1.Pod{}).IPs)
	assert.Nil(t, mustPodValue(t, &corev1.Pod{}).Labels)
}

func mustPodValue(t *testing.T, p *corev1.Pod) crdt.PodValue {
	t.Helper()
	v, err := PodToValue(p)
	require.NoError(t, err)
	return v
}

// A pod address that is not an IP is refused by the converter (so by the
// daemon and by render alike), never replicated.
func TestPodToValueRefusesInvalidIP(t *testing.T) {
	for _, st := range []corev1.PodStatus{
		{PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "not-an-ip"}}},
		{PodIP: "10.0.0.300"},
	} {
		_, err := PodToValue(&corev1.Pod{Status: st})
		require.Error(t, err)
		require.Contains(t, err.Error(), "is not an IP address")
	}
}

func TestEncodeValueIsDeterministicAndDecodable(t *testing.T) {
	labels := map[string]string{}
	for i := 0; i < 50; i++ {
		labels[fmt.Sprintf("k%02d", i)] = fmt.Sprint(i)
	}
	first, err := crdt.EncodeValue(&crdt.PodValue{Labels: labels, IPs: []string{"10.0.0.1"}})
	require.NoError(t, err)
	for i := 0; i < 20; i++ {
		again, err := crdt.EncodeValue(&crdt.PodValue{Labels: labels, IPs: []string{"10.0.0.1"}})
		require.NoError(t, err)
		require.True(t, bytes.Equal(first, again), "encoding must not depend on map order")
	}
	var back crdt.PodValue
	require.NoError(t, crdt.DecodeValue(first, &back))
	assert.Equal(t, labels, back.Labels)
	assert.EqualValues(t, crdt.ValueFormat, back.Format)

	_, err = crdt.EncodeValue(&crdt.PolicyValue{Spec: make([]byte, crdt.MaxValueBytes)})
	assert.ErrorIs(t, err, crdt.ErrValueTooLarge)
	_, err = crdt.EncodeValue(struct{}{})
	assert.Error(t, err)
}

func mcnp(ns, name string, spec any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.submariner.io/v1",
		"kind":       "MultiClusterNetworkPolicy",
		"metadata":   map[string]any{"name": name, "namespace": ns, "uid": "uid-" + name, "generation": int64(3)},
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func TestPolicyToValue(t *testing.T) {
	spec := map[string]any{
		"podSelector": map[string]any{"matchLabels": map[string]any{"role": "db", "app": "x"}},
		"ingress":     []any{map[string]any{"from": []any{map[string]any{"clusterSelector": map[string]any{}}}}},
	}
	v, err := policyToValue(mcnp("default", "p", spec))
	require.NoError(t, err)
	assert.Equal(t, "uid-p", v.UID)
	assert.EqualValues(t, 3, v.Generation)
	assert.JSONEq(t, `{"ingress":[{"from":[{"clusterSelector":{}}]}],"podSelector":{"matchLabels":{"app":"x","role":"db"}}}`, string(v.Spec))
	for i := 0; i < 10; i++ {
		again, err := policyToValue(mcnp("default", "p", spec))
		require.NoError(t, err)
		require.Equal(t, v.Spec, again.Spec)
	}

	_, err = policyToValue(mcnp("default", "nospec", nil))
	assert.ErrorContains(t, err, "default/nospec has no spec")
	_, err = policyToValue(mcnp("default", "bad", "string"))
	assert.ErrorContains(t, err, "not an object")
}

func TestClusterPropertyFrom(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "region"}, "spec": map[string]any{"value": "eu"}}}
	p, err := clusterPropertyFrom(u)
	require.NoError(t, err)
	assert.Equal(t, clusterProperty{Name: "region", Value: "eu"}, p)
	_, err = clusterPropertyFrom(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}})
	assert.ErrorContains(t, err, "no spec.value")
	_, err = clusterPropertyFrom(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}, "spec": map[string]any{"value": int64(3)}}})
	assert.Error(t, err)
}

func TestClusterValueFrom(t *testing.T) {
	props := []clusterProperty{
		{Name: "region", Value: "eu-west"},
		{Name: ClusterIDLabel, Value: "other"},
		{Name: "clusterset.k8s.io", Value: "set1"},
		{Name: "bad key!", Value: "x"},
		{Name: "long", Value: strings.Repeat("v", 100)},
	}
	info := ClusterInfo{PodCIDRs: []string{"10.0.0.0/16"}, Globalnet: true, NamespaceEgressIPs: map[string][]string{"a": {"242.0.0.1"}}, GossipName: "c1-pod"}
	v, errs := clusterValueFrom("c1", props, info)
	assert.Equal(t, map[string]string{ClusterIDLabel: "c1", "region": "eu-west", "clusterset.k8s.io": "set1"}, v.Labels)
	assert.Len(t, errs, 3, "%v", errs)
	assert.Equal(t, []string{"10.0.0.0/16"}, v.PodCIDRs)
	assert.True(t, v.Globalnet)
	assert.Equal(t, "c1-pod", v.GossipName)
	info.NamespaceEgressIPs["a"][0] = "mutated"
	assert.Equal(t, "242.0.0.1", v.NamespaceEgressIPs["a"][0], "value must not alias the input")

	_, errs = clusterValueFrom("", nil, ClusterInfo{})
	assert.Len(t, errs, 1)
}

func TestStripManagedFields(t *testing.T) {
	u := mcnp("a", "p", map[string]any{})
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	out, err := stripManagedFields(u)
	require.NoError(t, err)
	assert.Nil(t, out.(*unstructured.Unstructured).GetManagedFields())
	assert.Equal(t, "p", out.(*unstructured.Unstructured).GetName())
	u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	tomb, err := stripManagedFields(cache.DeletedFinalStateUnknown{Obj: u})
	require.NoError(t, err)
	assert.Nil(t, tomb.(cache.DeletedFinalStateUnknown).Obj.(*unstructured.Unstructured).GetManagedFields())
	s, err := stripManagedFields("not an object")
	require.NoError(t, err)
	assert.Equal(t, "not an object", s)
}

// Named ports of restartable init containers (native sidecars) are
// replicated, after those of spec.containers, as upstream resolves them;
// ordinary init containers' ports are not (they have exited by then).
func TestSidecarNamedPortsReplicated(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := fullPod()
	p.Spec.InitContainers = []corev1.Container{
		{Name: "setup", Image: "i", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 7000, Protocol: corev1.ProtocolTCP}}},
		{Name: "mesh", Image: "i", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}},
		{Name: "logs", Image: "i", RestartPolicy: &always},
	}
	want := []crdt.NamedPort{{Name: "http", Port: 8080}, {Port: 53, Protocol: "UDP"}, {Name: "metrics", Port: 9090}}
	assert.Equal(t, want, mustPodValue(t, p).Ports)

	out, err := TransformPod(p)
	require.NoError(t, err)
	s := out.(*corev1.Pod)
	require.Len(t, s.Spec.InitContainers, 1, "only sidecars with ports are kept")
	assert.Equal(t, "mesh", s.Spec.InitContainers[0].Name)
	assert.Empty(t, s.Spec.InitContainers[0].Image)
	assert.Equal(t, want, mustPodValue(t, s).Ports, "the stripped pod converts to the same value")
}

// Readiness: only a Ready condition that is not True makes a pod not
// ready; a pod without one (no kubelet has reported yet, or an older
// fixture) counts as ready, the stricter reading for Service addresses.
func TestPodToValueReadiness(t *testing.T) {
	for _, tc := range []struct {
		conds    []corev1.PodCondition
		notReady bool
	}{
		{nil, false},
		{[]corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}}, false},
		{[]corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}, false},
		{[]corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}, true},
		{[]corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionUnknown}}, true},
	} {
		p := fullPod()
		p.Status.Conditions = tc.conds
		assert.Equal(t, tc.notReady, mustPodValue(t, p).NotReady, "%v", tc.conds)
		s, err := TransformPod(p)
		require.NoError(t, err)
		assert.Equal(t, tc.notReady, mustPodValue(t, s.(*corev1.Pod)).NotReady, "after the informer's transform: %v", tc.conds)
	}
}
