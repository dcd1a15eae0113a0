package kube

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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
