//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// dataplaneEnv starts n clusters with the packet-level dataplane, or skips
// the test with one line naming what this machine lacks.
func dataplaneEnv(t *testing.T, n int, opts harness.Options) *harness.Env {
	t.Helper()
	if err := harness.CheckDataplaneSupport(); err != nil {
		t.Skipf("packet-level scenario skipped: %v", err)
	}
	opts.Dataplane = true
	if opts.Clusters == 0 && len(opts.Names) == 0 {
		opts.Clusters = n
	}
	return harness.Start(t, opts)
}

func tcpPort(name string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP}
}

func udpPort(name string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolUDP}
}

// TestDataplaneEngineEnforcesPlainNetworkPolicy checks the dataplane itself
// with no coastguard: pods reach each other within and across clusters
// (with their own source IPs), and an ordinary NetworkPolicy is enforced by
// the engine on packets.
func TestDataplaneEngineEnforcesPlainNetworkPolicy(t *testing.T) {
	scenario(t, 2)
	env := dataplaneEnv(t, 2, harness.Options{})
	dp := env.Dataplane()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := env.Clusters[0], env.Clusters[1]
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	_, err := a.RunPod(ctx, "shop", "db-0", "10.1.0.10", map[string]string{"role": "db"}, tcpPort("pg", 5432), udpPort("dns", 53))
	require.NoError(t, err)
	_, err = a.RunPod(ctx, "shop", "web-0", "10.1.0.11", web)
	require.NoError(t, err)
	_, err = b.RunPod(ctx, "shop", "web-1", "10.2.0.10", web)
	require.NoError(t, err)
	_, err = b.RunPod(ctx, "shop", "other-1", "10.2.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)

	all := func(_, _ harness.PodEndpoint, _ corev1.ContainerPort) bool { return true }
	m := dp.ProbeMatrix(ctx, all, nil)
	require.Empty(t, m.Unexpected(), "without policies everything connects:\n%s", m.Table(true))

	// An ordinary NetworkPolicy in cluster a admits only b's web-1 by
	// ipBlock, on TCP 5432.
	applyYAML(t, ctx, a, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db, namespace: shop}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - ipBlock: {cidr: 10.2.0.10/32}
    ports:
    - {protocol: TCP, port: 5432}
`))
	want := func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		if to.Name != "db-0" {
			return true
		}
		return from.Name == "web-1" && port.Protocol == corev1.ProtocolTCP
	}
	var last harness.Matrix
	err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = dp.ProbeMatrix(ctx, want, nil)
		return len(last.Unexpected()) == 0, nil
	})
	require.NoError(t, err, "engine enforcement:\n%s", last.Table(false))
	t.Logf("plain NetworkPolicy on packets:\n%s", last.Table(false))
}
