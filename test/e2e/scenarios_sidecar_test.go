//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioSidecarNamedPort: a remote db serves its named port "pg"
// from a native sidecar (a restartable init container), as upstream
// resolves named ports; an egress MCNP in the other cluster admitting
// role=db on "pg" renders that pod with the sidecar's port number.
func TestScenarioSidecarNamedPort(t *testing.T) {
	env, _, _ := startMesh(t, 2, meshOpts{})
	a, b := env.Clusters[0], env.Clusters[1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	always := corev1.ContainerRestartPolicyAlways
	_, err := a.Client.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0", Labels: map[string]string{"role": "db"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "proxy", Image: harness.PodImage, RestartPolicy: &always,
				Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 6543, Protocol: corev1.ProtocolTCP}}}},
			Containers: []corev1.Container{{Name: "db", Image: harness.PodImage}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = a.SetPodStatus(ctx, "shop", "db-0", "10.1.0.5", corev1.PodRunning)
	require.NoError(t, err)
	runPod(t, ctx, b, "web-0", "10.2.0.5", web)
	applyYAML(t, ctx, b, webEgress("{}", "{matchLabels: {role: db}}"))
	waitNPs(t, ctx, b, originSel(b.Name), 60*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
		for _, np := range nps {
			for _, r := range np.Spec.Egress {
				for _, p := range r.Ports {
					for _, to := range r.To {
						if to.IPBlock != nil && to.IPBlock.CIDR == "10.1.0.5/32" && p.Port != nil && p.Port.IntValue() == 6543 {
							return true
						}
					}
				}
			}
		}
		return false
	}, "the remote db is admitted on its sidecar's port 6543")
}
