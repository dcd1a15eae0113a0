//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioPodChangeLatency: 55 pod changes in A (create, re-IP, label
// change, delete), each timed from the API call on A's apiserver that makes
// it visible until B's informer sees the NetworkPolicy that reflects it.
func TestScenarioPodChangeLatency(t *testing.T) {
	env, _, _ := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, c, "web-c", "10.3.0.1", web)
	applyYAML(t, ctx, a, webPolicy("db", "{}"))
	w := watchNPs(t, b, "shop")
	_, err := w.waitFor(ctx, 30*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.3.0.1")) })
	require.NoError(t, err, "B enforces A's MCNP")

	var lat []time.Duration
	var kinds []string
	measure := func(kind string, write func() error, cond func([]string) bool) {
		t.Helper()
		start := time.Now()
		require.NoError(t, write(), kind)
		at, err := w.waitFor(ctx, 30*time.Second, cond)
		require.NoError(t, err, "%s not reflected in B", kind)
		lat = append(lat, at.Sub(start))
		kinds = append(kinds, kind)
	}
	ip := func(i int) string { return fmt.Sprintf("10.1.0.%d", 10+i) }
	reip := func(i int) string { return fmt.Sprintf("10.1.1.%d", 10+i) }
	const n = 20
	for i := range n {
		name := fmt.Sprintf("lat-%d", i)
		_, err := a.CreatePod(ctx, "shop", name, web)
		require.NoError(t, err)
		measure("create", func() error {
			_, err := a.SetPodStatus(ctx, "shop", name, ip(i), "Running")
			return err
		}, func(bl []string) bool { return slices.Contains(bl, ip(i)+"/32") })
	}
	for i := range n {
		measure("re-IP", func() error {
			_, err := a.SetPodStatus(ctx, "shop", fmt.Sprintf("lat-%d", i), reip(i), "Running")
			return err
		}, func(bl []string) bool {
			return slices.Contains(bl, reip(i)+"/32") && !slices.Contains(bl, ip(i)+"/32")
		})
	}
	for i := range 5 {
		measure("label", func() error {
			_, err := a.Client.CoreV1().Pods("shop").Patch(ctx, fmt.Sprintf("lat-%d", i), types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"app":"other"}}}`), metav1.PatchOptions{})
			return err
		}, func(bl []string) bool { return !slices.Contains(bl, reip(i)+"/32") })
	}
	for i := 5; i < 15; i++ {
		measure("delete", func() error { return a.DeletePod(ctx, "shop", fmt.Sprintf("lat-%d", i)) },
			func(bl []string) bool { return !slices.Contains(bl, reip(i)+"/32") })
	}
	require.GreaterOrEqual(t, len(lat), 50)

	// final state everywhere: C sees the same A pods B does
	want := []string{"10.3.0.1/32"}
	for i := 15; i < n; i++ {
		want = append(want, reip(i)+"/32")
	}
	slices.Sort(want)
	_, err = w.waitFor(ctx, 10*time.Second, func(bl []string) bool { return equal(bl, want) })
	require.NoError(t, err, "B's final ipBlocks")
	wantC := slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == "10.3.0.1/32" })
	waitNPs(t, ctx, c, harness.ManagedSelector, 15*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, wantC)
	}, "C's final ipBlocks")

	byKind := map[string][]time.Duration{}
	for i, k := range kinds {
		byKind[k] = append(byKind[k], lat[i])
	}
	for _, k := range []string{"create", "re-IP", "label", "delete"} {
		t.Logf("pod change latency A->B %-6s n=%2d p50=%sms max=%sms", k, len(byKind[k]), ms(percentile(byKind[k], 50)), ms(percentile(byKind[k], 100)))
	}
	t.Logf("pod change latency A->B all n=%d p50=%sms p99=%sms max=%sms", len(lat), ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100)))
	recordLatencies(lat)
}

// TestScenarioPolicyExtras: an invalid MCNP is refused by kubectl with a
// message naming the field, and the origin's MCNP status reports enforcement
// per cluster.
func TestScenarioPolicyExtras(t *testing.T) {
	env, _, _ := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}

	invalid := []struct{ yaml, field, msg string }{
		{strings.Replace(string(webPolicy("bad-port", "{}")), "port: 5432", "port: 70000", 1),
			"spec.ingress[0].ports", "port must be between 1 and 65535"},
		{strings.Replace(string(webPolicy("bad-proto", "{}")), "protocol: TCP", "protocol: ICMP", 1),
			"spec.ingress[0].ports", "protocol must be TCP, UDP or SCTP"},
		{strings.Replace(string(webPolicy("bad-peer", "{}")), "    - clusterSelector: {}\n      podSelector:\n        matchLabels: {app: web}\n",
			"    - ipBlock: {cidr: 10.0.0.0/8}\n      podSelector:\n        matchLabels: {app: web}\n", 1),
			"spec.ingress[0].from[0]", "ipBlock cannot be combined"},
	}
	for _, in := range invalid {
		out, errOut, err := a.KubectlInput(ctx, []byte(in.yaml), "apply", "-f", "-")
		require.Error(t, err, "kubectl accepted an invalid MCNP: %s", out)
		require.Contains(t, errOut, in.field, "error names the field")
		require.Contains(t, errOut, in.msg)
		t.Logf("rejected as expected: %s", strings.TrimSpace(errOut))
	}
	o, _, err := a.Kubectl(ctx, "-n", "shop", "get", "mcnp", "-o", "name")
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(o), "no invalid MCNP was stored")

	runPod(t, ctx, b, "web-b", "10.2.0.1", web)
	runPod(t, ctx, c, "web-c", "10.3.0.1", web)
	sel := fmt.Sprintf("{matchExpressions: [{key: cluster.clusterset.k8s.io, operator: In, values: [%s, %s]}]}", b.Name, c.Name)
	applyYAML(t, ctx, a, webPolicy("db", sel))

	var st apiv1.MultiClusterNetworkPolicyStatus
	var gen int64
	err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		o, _, err := a.Kubectl(ctx, "-n", "shop", "get", "mcnp", "db", "-o", "json")
		if err != nil {
			return false, err
		}
		var p apiv1.MultiClusterNetworkPolicy
		if err := json.Unmarshal([]byte(o), &p); err != nil {
			return false, err
		}
		st, gen = p.Status, p.Generation
		if len(st.Clusters) != 2 || st.ObservedGeneration != gen {
			return false, nil
		}
		for _, ce := range st.Clusters {
			if ce.Error != "" || ce.NetworkPolicies != 1 || ce.RemotePeers != 1 || ce.ObservedGeneration != gen {
				return false, nil
			}
		}
		return condTrue(st, apiv1.ConditionReady) && condTrue(st, apiv1.ConditionEnforced), nil
	})
	require.NoError(t, err, "MCNP status on the origin: %+v", st)
	var got []string
	for _, ce := range st.Clusters {
		got = append(got, ce.Cluster)
	}
	slices.Sort(got)
	require.Equal(t, []string{b.Name, c.Name}, got, "status.clusters lists exactly the enforcing clusters")
	require.Equal(t, "2/2", st.EnforcedSummary)
	t.Logf("status: summary %s, clusters %+v", st.EnforcedSummary, st.Clusters)

	// an edit bumps the generation; the status follows it in both clusters
	applyYAML(t, ctx, a, []byte(strings.Replace(string(webPolicy("db", sel)), "port: 5432", "port: 5433", 1)))
	var gen2 int64
	for _, cl := range []*harness.Cluster{b, c} {
		waitNPs(t, ctx, cl, harness.ManagedSelector, 15*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) == 1 && len(nps[0].Spec.Ingress) == 1 && len(nps[0].Spec.Ingress[0].Ports) == 1 &&
				nps[0].Spec.Ingress[0].Ports[0].Port.IntValue() == 5433
		}, "edited port")
	}
	err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		o, _, err := a.Kubectl(ctx, "-n", "shop", "get", "mcnp", "db", "-o", "json")
		if err != nil {
			return false, err
		}
		var p apiv1.MultiClusterNetworkPolicy
		if err := json.Unmarshal([]byte(o), &p); err != nil {
			return false, err
		}
		st, gen2 = p.Status, p.Generation
		if p.Generation <= gen || p.Status.ObservedGeneration != p.Generation || len(p.Status.Clusters) != 2 {
			return false, nil
		}
		for _, ce := range p.Status.Clusters {
			if ce.ObservedGeneration != p.Generation {
				return false, nil
			}
		}
		return condTrue(st, apiv1.ConditionEnforced), nil
	})
	require.NoError(t, err, "status after the edit to generation %d: %+v", gen2, st)
}

func condTrue(st apiv1.MultiClusterNetworkPolicyStatus, typ string) bool {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
