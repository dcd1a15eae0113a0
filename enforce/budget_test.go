package enforce

import (
	"encoding/json"
	"fmt"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// Issue 29, item 3: a tenant's valid MCNP of about 37 KB, 256 ingress and
// 256 egress rules each selecting every pod of every cluster, at 20 000
// remote pods. It used to be built in full (10 M ipBlocks, ~2.7 GiB
// allocated) before the caps applied; now it is counted as it is built and
// stops at the cap: isolate-only and Degraded, within a fixed budget.

const tenantRemotePods = 20000

func tenantInventory(t testing.TB) *Inventory {
	inv := NewInventory()
	var cidrs []string
	for c := range 5 {
		cidrs = append(cidrs, fmt.Sprintf("c%d=10.%d.0.0/16", c, c))
	}
	nets, err := ParseClusterCIDRs(cidrs)
	require.NoError(t, err)
	inv.SetNetworks(nets)
	for c := range 5 {
		id := fmt.Sprintf("c%d", c)
		inv.SetCluster(Cluster{ID: id})
		inv.SetNamespace(id, Namespace{Name: "tenant"})
		if c == 0 {
			continue // the enforcing cluster
		}
		for i := range tenantRemotePods / 4 {
			inv.SetPod(id, Pod{Namespace: "tenant", Name: fmt.Sprintf("p%05d", i), Phase: corev1.PodRunning,
				Labels: map[string]string{"app": "x"}, IPs: []string{fmt.Sprintf("10.%d.%d.%d", c, i/250, i%250+1)}})
		}
	}
	return inv
}

func tenantPolicy(t testing.TB) Policy {
	all := apiv1.MultiClusterNetworkPolicyPeer{ClusterSelector: &metav1.LabelSelector{},
		NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{}}
	var spec apiv1.MultiClusterNetworkPolicySpec
	spec.ClusterSelector = &metav1.LabelSelector{}
	for i := range 256 {
		p := intstr.FromInt(1000 + i)
		ports := []networkingv1.NetworkPolicyPort{{Port: &p}}
		spec.Ingress = append(spec.Ingress, apiv1.MultiClusterNetworkPolicyIngressRule{From: []apiv1.MultiClusterNetworkPolicyPeer{all}, Ports: ports})
		spec.Egress = append(spec.Egress, apiv1.MultiClusterNetworkPolicyEgressRule{To: []apiv1.MultiClusterNetworkPolicyPeer{all}, Ports: ports})
	}
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	t.Logf("tenant MCNP spec: %d bytes, %d+%d rules", len(b), len(spec.Ingress), len(spec.Egress))
	return Policy{Origin: "c1", Namespace: "tenant", Name: "bomb", Generation: 1, Spec: spec}
}

var defaultGuards = Guards{MaxNetworkPoliciesPerMCNP: 64, MaxIPBlocksPerNetworkPolicy: 1000, MaxBytesPerMCNP: 8 << 20}

// measure runs fn and returns its duration, bytes allocated and the peak
// of live heap objects above the level before it (sampled every 2 ms).
func measure(fn func()) (time.Duration, uint64, uint64) {
	runtime.GC()
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(sample)
	base, alloc0 := sample[0].Value.Uint64(), sample[1].Value.Uint64()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			rtmetrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	fn()
	d := time.Since(start)
	close(done)
	wg.Wait()
	rtmetrics.Read(sample)
	peak = max(peak, sample[0].Value.Uint64())
	return d, sample[1].Value.Uint64() - alloc0, peak - min(peak, base)
}

func TestTenantMCNPBoundedBeforeWork(t *testing.T) {
	inv := tenantInventory(t)
	p := tenantPolicy(t)
	require.NoError(t, inv.SetPolicy(p))
	var res Result
	d, alloc, peak := measure(func() { res = Admit("c0", inv, p.Ref(), Admission{Guards: defaultGuards}) })
	t.Logf("budgeted: %v, %.1f MiB allocated, peak heap +%.1f MiB", d, float64(alloc)/(1<<20), float64(peak)/(1<<20))
	require.Equal(t, ReasonCapNetworkPoliciesPerMCNP, res.Degraded)
	require.Contains(t, res.DegradedDetails[0], "not built")
	require.Len(t, res.NetworkPolicies, 1)
	require.Empty(t, res.NetworkPolicies[0].Spec.Ingress)
	require.Empty(t, res.NetworkPolicies[0].Spec.Egress)
	require.Less(t, alloc, uint64(64<<20), "the over-cap MCNP was built")

	// The isolate-only object is the one the post-build cap check makes
	// (isolateOnly of a built result; built here where it is small).
	empty := NewInventory()
	empty.SetCluster(Cluster{ID: "c0"})
	empty.SetCluster(Cluster{ID: "c1"})
	empty.SetNamespace("c0", Namespace{Name: "tenant"})
	require.NoError(t, empty.SetPolicy(p))
	require.Equal(t, isolateOnly(Evaluate("c0", empty, p.Ref()), "", "").NetworkPolicies, res.NetworkPolicies)
}

// A policy within its caps is built exactly as without a budget.
func TestBudgetKeepsPoliciesWithinCaps(t *testing.T) {
	inv := tenantInventory(t)
	p := tenantPolicy(t)
	p.Spec.Ingress, p.Spec.Egress = p.Spec.Ingress[:1], p.Spec.Egress[:1]
	require.NoError(t, inv.SetPolicy(p))
	want := ApplyGuards("c0", p.Ref(), Evaluate("c0", inv, p.Ref()), defaultGuards)
	got := ApplyGuards("c0", p.Ref(), EvaluateBudget("c0", inv, p.Ref(), defaultGuards.Budget()), defaultGuards)
	require.Empty(t, got.Degraded)
	require.Equal(t, want, got)
	require.Len(t, got.NetworkPolicies, 40) // 2 rules x 20 000 ipBlocks / 1000 per part

	// Many distinct peers each selecting every pod: stopped by the peer
	// budget before their sets pile up.
	var spec apiv1.MultiClusterNetworkPolicySpec
	spec.ClusterSelector = &metav1.LabelSelector{}
	for i := range 64 {
		sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{fmt.Sprint(i)}}}}
		spec.Ingress = append(spec.Ingress, apiv1.MultiClusterNetworkPolicyIngressRule{From: []apiv1.MultiClusterNetworkPolicyPeer{
			{ClusterSelector: &metav1.LabelSelector{}, PodSelector: sel}, {ClusterSelector: &metav1.LabelSelector{}, PodSelector: sel, NamespaceSelector: &metav1.LabelSelector{}}}})
	}
	q := Policy{Origin: "c1", Namespace: "tenant", Name: "peers", Generation: 1, Spec: spec}
	require.NoError(t, inv.SetPolicy(q))
	res := ApplyGuards("c0", q.Ref(), EvaluateBudget("c0", inv, q.Ref(), Guards{MaxNetworkPoliciesPerMCNP: 64}.Budget()),
		Guards{MaxNetworkPoliciesPerMCNP: 64})
	require.Contains(t, []string{ReasonCapSelectedPeersPerMCNP, ReasonCapNetworkPoliciesPerMCNP}, res.Degraded)
	require.Len(t, res.NetworkPolicies, 1)
}

// BenchmarkTenantMCNP: time, allocation and peak heap of the tenant MCNP,
// budgeted (the daemon's path) and, for comparison, built in full.
func BenchmarkTenantMCNP(b *testing.B) {
	inv := tenantInventory(b)
	p := tenantPolicy(b)
	require.NoError(b, inv.SetPolicy(p))
	for _, c := range []struct {
		name string
		eval func() Result
	}{
		{"budgeted", func() Result { return EvaluateBudget("c0", inv, p.Ref(), defaultGuards.Budget()) }},
		{"unbudgeted", func() Result { return Evaluate("c0", inv, p.Ref()) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var peak uint64
			for b.Loop() {
				_, _, pk := measure(func() { _ = ApplyGuards("c0", p.Ref(), c.eval(), defaultGuards) })
				peak = max(peak, pk)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
		})
	}
}
