package reach

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// snapshot lists every allowed (src, dst, probe) triple.
func snapshot(e *Engine) map[string]bool {
	out := map[string]bool{}
	for _, q := range []Probe{{"TCP", 80}, {"TCP", 81}, {"TCP", 0}} {
		for k := range e.byKey {
			for _, d := range e.Row(k, q) {
				out[k+">"+d+"@"+q.String()] = true
			}
		}
	}
	return out
}

func fromScratch(pods map[string]Pod, pols map[string]Policy, ns map[string]map[string]string) *Engine {
	e := New()
	for k, l := range ns {
		c, n := splitNS(k)
		e.SetNamespace(c, n, l)
	}
	var ps []Pod
	for _, p := range pods {
		ps = append(ps, p)
	}
	_ = e.Load(ps, pols)
	return e
}

func splitNS(k string) (string, string) {
	for i := range k {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}

// TestIncrementalEqualsFullRecompute applies random pod, namespace and
// policy changes one at a time and checks the incrementally maintained
// matrix against one built from scratch after every step.
func TestIncrementalEqualsFullRecompute(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	clusters := []string{"a", "b"}
	nss := []string{"x", "y"}
	lv := func() map[string]string {
		m := map[string]string{}
		for i := 0; i < 1+rng.IntN(2); i++ {
			m[fmt.Sprintf("k%d", rng.IntN(3))] = fmt.Sprintf("v%d", rng.IntN(2))
		}
		return m
	}
	tcp := corev1.ProtocolTCP
	randPolicy := func(c string, i int) Policy {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: nss[rng.IntN(2)], Name: fmt.Sprintf("p%d", i)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: lv()}}}
		if rng.IntN(4) == 0 {
			np.Spec.PodSelector = metav1.LabelSelector{}
		}
		peer := func() networkingv1.NetworkPolicyPeer {
			switch rng.IntN(4) {
			case 0:
				return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("10.%d.0.0/24", rng.IntN(2))}}
			case 1:
				return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprint(rng.IntN(2))}}}
			case 2:
				return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: fmt.Sprintf("k%d", rng.IntN(3)), Operator: metav1.LabelSelectorOpNotIn, Values: []string{"v0"}}}}}
			}
			return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: lv()}}
		}
		ports := func() []networkingv1.NetworkPolicyPort {
			if rng.IntN(2) == 0 {
				return nil
			}
			p := intstr.FromInt32(int32(80 + rng.IntN(2)))
			return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
		}
		switch rng.IntN(3) {
		case 0:
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			for j := 0; j < rng.IntN(3); j++ {
				np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: ports(), From: []networkingv1.NetworkPolicyPeer{peer()}})
			}
		case 1:
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
			for j := 0; j < rng.IntN(3); j++ {
				np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: ports(), To: []networkingv1.NetworkPolicyPeer{peer()}})
			}
		default:
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{peer()}}}
			np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{Ports: ports(), To: []networkingv1.NetworkPolicyPeer{peer()}}}
		}
		return Policy{Cluster: c, NetworkPolicy: np}
	}
	e := New()
	pods := map[string]Pod{}
	pols := map[string]Policy{}
	nsl := map[string]map[string]string{}
	for step := 0; step < 300; step++ {
		c := clusters[rng.IntN(2)]
		switch op := rng.IntN(10); {
		case op < 4:
			ci := 0
			if c == "b" {
				ci = 1
			}
			n := rng.IntN(12)
			p := Pod{Cluster: c, Namespace: nss[rng.IntN(2)], Name: fmt.Sprintf("pod%d", n), Labels: lv(),
				IP: netip.AddrFrom4([4]byte{10, byte(ci), byte(rng.IntN(2)), byte(n)})}
			if old, ok := pods[c+"/"+p.Namespace+"/"+p.Name]; ok && rng.IntN(2) == 0 {
				p.Labels = old.Labels // IP change only
			}
			e.SetPod(p)
			pods[p.Key()] = p
		case op < 5:
			for k, p := range pods {
				e.RemovePod(p.Cluster, p.Namespace, p.Name)
				delete(pods, k)
				break
			}
		case op < 8:
			key := fmt.Sprintf("%s/%d", c, rng.IntN(6))
			p := randPolicy(c, rng.IntN(6))
			require.NoError(t, e.SetPolicy(key, p))
			pols[key] = p
		case op < 9:
			for k := range pols {
				e.RemovePolicy(k)
				delete(pols, k)
				break
			}
		default:
			n := nss[rng.IntN(2)]
			l := map[string]string{"team": fmt.Sprint(rng.IntN(2))}
			e.SetNamespace(c, n, l)
			nsl[c+"/"+n] = l
		}
		full := fromScratch(pods, pols, nsl)
		require.Equal(t, snapshot(full), snapshot(e), "step %d", step)
		require.Equal(t, full.Conflicts(), e.Conflicts(), "step %d", step)
	}
}

func np(ns, name string, sel map[string]string, types []networkingv1.PolicyType, in []networkingv1.NetworkPolicyIngressRule, out []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: types, Ingress: in, Egress: out}}
}

// TestConflictsScenario plants a half-open flow (b admits a's client by IP,
// a's egress policy does not allow it), a shadowed rule, a rule and a
// policy that select nothing, and an isolated pod.
func TestConflictsScenario(t *testing.T) {
	e := New()
	e.SetPod(Pod{Cluster: "a", Namespace: "app", Name: "client", Labels: map[string]string{"app": "client"}, IP: netip.MustParseAddr("10.0.0.1")})
	e.SetPod(Pod{Cluster: "b", Namespace: "app", Name: "api", Labels: map[string]string{"app": "api"}, IP: netip.MustParseAddr("10.1.0.1")})
	e.SetPod(Pod{Cluster: "b", Namespace: "app", Name: "web", Labels: map[string]string{"app": "web"}, IP: netip.MustParseAddr("10.1.0.2")})
	e.SetPod(Pod{Cluster: "b", Namespace: "app", Name: "vault", Labels: map[string]string{"app": "vault"}, IP: netip.MustParseAddr("10.1.0.3")})
	ing := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egr := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	ipPeer := func(c string) []networkingv1.NetworkPolicyPeer {
		return []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: c}}}
	}
	selPeer := func(l map[string]string) []networkingv1.NetworkPolicyPeer {
		return []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: l}}}
	}
	// b: api admits a/client by IP (as coastguard renders it)
	require.NoError(t, e.SetPolicy("b/api", Policy{Cluster: "b", Owner: "mcnp a/app/api", NetworkPolicy: np("app", "api", map[string]string{"app": "api"}, ing,
		[]networkingv1.NetworkPolicyIngressRule{{From: ipPeer("10.0.0.1/32")}, {From: selPeer(map[string]string{"app": "web"})}}, nil),
		IngressGroups: []string{"mcnp a/app/api ingress[0]", "mcnp a/app/api ingress[1]"}}))
	// b: web may be reached from the api's rule (same set) — a second policy whose rule is shadowed
	require.NoError(t, e.SetPolicy("b/api-dup", Policy{Cluster: "b", Owner: "mcnp a/app/api-dup", NetworkPolicy: np("app", "api-dup", map[string]string{"app": "api"}, ing,
		[]networkingv1.NetworkPolicyIngressRule{{From: selPeer(map[string]string{"app": "web"})}}, nil)}))
	// a: client may only talk to 10.9.0.0/16
	require.NoError(t, e.SetPolicy("a/client", Policy{Cluster: "a", NetworkPolicy: np("app", "client", map[string]string{"app": "client"}, egr, nil,
		[]networkingv1.NetworkPolicyEgressRule{{To: ipPeer("10.9.0.0/16")}})}))
	// b: vault fully isolated; a rule selecting nothing
	require.NoError(t, e.SetPolicy("b/vault", Policy{Cluster: "b", NetworkPolicy: np("app", "vault", map[string]string{"app": "vault"}, both,
		[]networkingv1.NetworkPolicyIngressRule{{From: selPeer(map[string]string{"app": "nobody"})}}, nil)}))
	require.NoError(t, e.SetPolicy("b/ghost", Policy{Cluster: "b", Owner: "mcnp b/app/ghost", NetworkPolicy: np("app", "ghost", map[string]string{"app": "ghost"}, ing, nil, nil)}))

	ok, err := e.Allowed("a/app/client", "b/app/api", Probe{Protocol: corev1.ProtocolTCP})
	require.NoError(t, err)
	assert.False(t, ok, "egress of the client denies it")
	ok, _ = e.Allowed("b/app/web", "b/app/api", Probe{Protocol: corev1.ProtocolTCP})
	assert.True(t, ok)

	rep := e.Conflicts()
	require.NotEmpty(t, rep.HalfOpen)
	h := rep.HalfOpen[0]
	assert.Equal(t, "ingress-allowed-egress-denied", h.Kind)
	assert.Equal(t, [2]string{"a/app/client", "b/app/api"}, h.Example)
	assert.Equal(t, []string{"mcnp a/app/api ingress[0]"}, h.AllowedBy)
	assert.Equal(t, []string{"networkpolicy a/app/client"}, h.DeniedBy)
	require.Len(t, rep.Redundant, 2, "the two identical web rules shadow each other")
	assert.Equal(t, "b/app/api-dup ingress[0]", rep.Redundant[0].Group)
	assert.Equal(t, []string{"mcnp a/app/api ingress[1]"}, rep.Redundant[0].ShadowedBy)
	assert.Equal(t, []string{"b/app/vault ingress[0]"}, rep.EmptyRules)
	assert.Equal(t, []string{"mcnp b/app/ghost"}, rep.EmptyPolicies)
	assert.Equal(t, []string{"b/app/vault"}, rep.IsolatedPods)
}

func benchSetup(b *testing.B, clusters int) (*Engine, SynthConfig) {
	cfg := Table41Setup5(clusters)
	pods, pols := Synthesize(cfg)
	e := New()
	require.NoError(b, e.Load(pods, pols))
	return e, cfg
}

func benchFull(b *testing.B, clusters int) {
	cfg := Table41Setup5(clusters)
	pods, pols := Synthesize(cfg)
	var e *Engine
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e = New()
		if err := e.Load(pods, pols); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportMem(b, e)
}

func reportMem(b *testing.B, e *Engine) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(e.Bytes())/(1<<20), "matrix-MiB")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(e.Reachable(e.Probes()[0])), "reachable-pairs")
}

func benchIncrementalPod(b *testing.B, clusters int) {
	e, cfg := benchSetup(b, clusters)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := SynthPod(cfg, i%clusters, i%4096, 9)
		e.SetPod(p)
		b.StopTimer()
		e.RemovePod(p.Cluster, p.Namespace, p.Name)
		b.StartTimer()
	}
	b.StopTimer()
	reportMem(b, e)
}

func benchIncrementalPolicy(b *testing.B, clusters int) {
	e, cfg := benchSetup(b, clusters)
	_, pols := Synthesize(SynthConfig{Clusters: clusters, Pods: 0, Policies: 64, KeyLimit: cfg.KeyLimit, ValueLimit: cfg.ValueLimit,
		PodLabels: cfg.PodLabels, SelectLabels: cfg.SelectLabels, AllowFields: cfg.AllowFields, AllowLabels: cfg.AllowLabels, Seed: 77})
	var extra []Policy
	for _, p := range pols {
		extra = append(extra, p)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := extra[i%len(extra)]
		if err := e.SetPolicy("extra", p); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		e.RemovePolicy("extra")
		b.StartTimer()
	}
}

func benchConflicts(b *testing.B, clusters int) {
	e, _ := benchSetup(b, clusters)
	b.ResetTimer()
	var rep Report
	for i := 0; i < b.N; i++ {
		rep = e.Conflicts()
	}
	b.ReportMetric(float64(len(rep.HalfOpen)), "halfopen-groups")
	b.ReportMetric(float64(len(rep.Redundant)), "redundant-rules")
}

// Seed 003, Table 4.1 setup 5 (750 pods, 300 policies): ~466 ms full,
// ~182 ms incremental pod add, <= 474 ms conflict detection.
func BenchmarkFull750x300(b *testing.B)              { benchFull(b, 1) }
func BenchmarkIncrementalPodAdd750x300(b *testing.B) { benchIncrementalPod(b, 1) }
func BenchmarkIncrementalPolicy750x300(b *testing.B) { benchIncrementalPolicy(b, 1) }
func BenchmarkConflicts750x300(b *testing.B)         { benchConflicts(b, 1) }
func BenchmarkFull3x750(b *testing.B)                { benchFull(b, 3) }
func BenchmarkIncrementalPodAdd3x750(b *testing.B)   { benchIncrementalPod(b, 3) }
func BenchmarkIncrementalPolicy3x750(b *testing.B)   { benchIncrementalPolicy(b, 3) }
func BenchmarkConflicts3x750(b *testing.B)           { benchConflicts(b, 3) }
