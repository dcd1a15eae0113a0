//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioNamespaceMissing: an MCNP enforced everywhere while one
// cluster lacks its namespace is not Ready: ENFORCED is 2/3 and the
// condition names that cluster. Once the namespace is created there, the
// policy is generated and the status becomes 3/3.
func TestScenarioNamespaceMissing(t *testing.T) {
	env, _, _ := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range []*harness.Cluster{a, b} {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a1", "10.1.0.1", web)
	applyYAML(t, ctx, a, webPolicy("from-a", "{}"))

	status := func() (apiv1.MultiClusterNetworkPolicyStatus, int64, error) {
		o, _, err := a.Kubectl(ctx, "-n", "shop", "get", "mcnp", "from-a", "-o", "json")
		if err != nil {
			return apiv1.MultiClusterNetworkPolicyStatus{}, 0, err
		}
		var p apiv1.MultiClusterNetworkPolicy
		err = json.Unmarshal([]byte(o), &p)
		return p.Status, p.Generation, err
	}
	var st apiv1.MultiClusterNetworkPolicyStatus
	err := harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, gen, err := status()
		st = s
		r := meta.FindStatusCondition(s.Conditions, apiv1.ConditionReady)
		return err == nil && s.ObservedGeneration == gen && s.EnforcedSummary == "2/3" && r != nil && r.Reason == "NamespaceMissing", err
	})
	require.NoError(t, err, "status while %s lacks the namespace: %+v", c.Name, st)
	ready := meta.FindStatusCondition(st.Conditions, apiv1.ConditionReady)
	require.NotNil(t, ready)
	require.Equal(t, "False", string(ready.Status), "a cluster without the namespace enforces nothing")
	require.Equal(t, "NamespaceMissing", ready.Reason)
	require.Contains(t, ready.Message, "namespace missing in: "+c.Name)
	for _, ce := range st.Clusters {
		require.Equal(t, ce.Cluster == c.Name, strings.HasPrefix(ce.Degraded, "NamespaceMissing"), "row %+v", ce)
	}

	require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	waitNPs(t, ctx, c, harness.ManagedSelector, 30*time.Second, func(bl []string, nps []networkingv1.NetworkPolicy) bool {
		return len(nps) == 1 && equal(bl, cidrs("10.1.0.1"))
	}, "the policy is generated once the namespace exists")
	err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, _, err := status()
		st = s
		return err == nil && s.EnforcedSummary == "3/3" && condTrue(s, apiv1.ConditionReady), err
	})
	require.NoError(t, err, "status once the namespace exists: %+v", st)
}
