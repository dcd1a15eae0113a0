//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// mesh starts n clusters with the CRDs and one coastguardd each.
func mesh(t *testing.T, n int) (*harness.Env, []*harness.Daemon) {
	t.Helper()
	env, _, ds := startMesh(t, n, meshOpts{})
	return env, ds
}

// ipBlocks returns every ipBlock CIDR of the generated policies in ns.
func ipBlocks(ctx context.Context, c *harness.Cluster, ns string) ([]string, []networkingv1.NetworkPolicy, error) {
	nps, err := c.ListNetworkPolicies(ctx, ns, harness.ManagedSelector)
	if err != nil {
		return nil, nil, err
	}
	return blocksOf(nps...), nps, nil
}

func waitBlocks(t *testing.T, ctx context.Context, c *harness.Cluster, ns string, timeout time.Duration, cond func([]string, []networkingv1.NetworkPolicy) bool, what string) {
	t.Helper()
	var last []string
	err := harness.Eventually(ctx, timeout, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		b, nps, err := ipBlocks(ctx, c, ns)
		if err != nil {
			return false, err
		}
		last = b
		return cond(b, nps), nil
	})
	require.NoError(t, err, "%s in %s: last ipBlocks %v", what, c.Name, last)
}

// TestPolicyAndPodFlows covers the proposal's flows 2 and 3 on real
// apiservers: an MCNP applied in one cluster is enforced where its
// clusterSelector says, remote pods become ipBlocks and follow pod changes,
// and edits/deletes of the MCNP follow everywhere.
func TestPolicyAndPodFlows(t *testing.T) {
	env, _ := mesh(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	_, err := b.RunPod(ctx, "shop", "web-b", "10.2.0.5", map[string]string{"app": "web"})
	require.NoError(t, err)
	_, err = c.RunPod(ctx, "shop", "web-c", "10.3.0.7", map[string]string{"app": "web"})
	require.NoError(t, err)
	_, err = c.RunPod(ctx, "shop", "other-c", "10.3.0.8", map[string]string{"app": "other"})
	require.NoError(t, err)

	// policy created in A, enforced in B and C (not A)
	sel := fmt.Sprintf("{matchExpressions: [{key: cluster.clusterset.k8s.io, operator: In, values: [%s, %s]}]}", b.Name, c.Name)
	out, errOut, err := a.KubectlInput(ctx, webPolicy("db-from-web", sel), "apply", "-f", "-")
	require.NoError(t, err, "%s %s", out, errOut)

	waitBlocks(t, ctx, b, "shop", 30*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return slices.Equal(bl, []string{"10.3.0.7/32"})
	}, "B allows C's web pod as an ipBlock")
	waitBlocks(t, ctx, c, "shop", 30*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
		return slices.Equal(bl, []string{"10.2.0.5/32"}) && len(nps) == 1
	}, "C allows B's web pod")
	nps, err := a.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
	require.NoError(t, err)
	require.Empty(t, nps, "A is not selected by the clusterSelector")

	// pod change in C reaches B: new pod, re-IP, label change, delete
	_, err = c.RunPod(ctx, "shop", "web-c2", "10.3.0.9", map[string]string{"app": "web"})
	require.NoError(t, err)
	waitBlocks(t, ctx, b, "shop", 10*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return slices.Equal(bl, []string{"10.3.0.7/32", "10.3.0.9/32"})
	}, "new pod")
	_, err = c.SetPodStatus(ctx, "shop", "web-c2", "10.3.0.19", "Running")
	require.NoError(t, err)
	waitBlocks(t, ctx, b, "shop", 10*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return slices.Equal(bl, []string{"10.3.0.19/32", "10.3.0.7/32"})
	}, "re-IP")
	_, stderr, err := c.Kubectl(ctx, "-n", "shop", "label", "pod", "other-c", "app=web", "--overwrite")
	require.NoError(t, err, stderr)
	waitBlocks(t, ctx, b, "shop", 10*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return slices.Equal(bl, []string{"10.3.0.19/32", "10.3.0.7/32", "10.3.0.8/32"})
	}, "label change")
	require.NoError(t, c.DeletePod(ctx, "shop", "web-c"))
	waitBlocks(t, ctx, b, "shop", 10*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return slices.Equal(bl, []string{"10.3.0.19/32", "10.3.0.8/32"})
	}, "pod delete")

	// status on the origin shows enforcement in 2/2
	err = harness.Eventually(ctx, 20*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		o, _, err := a.Kubectl(ctx, "-n", "shop", "get", "mcnp", "db-from-web", "-o", "jsonpath={.status.enforcedSummary}")
		return strings.TrimSpace(o) == "2/2", err
	})
	require.NoError(t, err, "status enforcedSummary")

	// edit: enforce everywhere ({}), A gains a policy with both remote pods
	out, errOut, err = a.KubectlInput(ctx, webPolicy("db-from-web", "{}"), "apply", "-f", "-")
	require.NoError(t, err, "%s %s", out, errOut)
	waitBlocks(t, ctx, a, "shop", 15*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return slices.Equal(bl, []string{"10.2.0.5/32", "10.3.0.19/32", "10.3.0.8/32"})
	}, "A after edit")

	// delete: generated policies vanish everywhere
	_, stderr, err = a.Kubectl(ctx, "-n", "shop", "delete", "mcnp", "db-from-web")
	require.NoError(t, err, stderr)
	for _, cl := range env.Clusters {
		waitBlocks(t, ctx, cl, "shop", 15*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) == 0
		}, "after MCNP delete")
	}
}
