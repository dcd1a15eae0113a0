package reach

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SynthConfig generates a workload like seed 003's Table 4.1 (Kano's
// parameters): random key/value labels on pods, policies with one pod
// selector of 1..SelectLabels labels and 1..AllowFields peers of
// 1..AllowLabels labels each.
type SynthConfig struct {
	Clusters     int
	Pods         int // per cluster
	Policies     int // per cluster
	KeyLimit     int
	ValueLimit   int
	PodLabels    int
	SelectLabels int
	AllowFields  int
	AllowLabels  int
	// RemotePeers: fraction (0..1) of rules that also admit this many
	// random pods of other clusters by /32 ipBlock, as coastguard renders
	// remote peers.
	RemoteRuleFraction float64
	RemotePeers        int
	Seed               uint64
}

// Table41Setup5 is seed 003's largest setup: 750 pods, 300 policies, key
// limit 20, value limit 10, at most 5 pod labels, 3 selector labels, 3 allow
// fields of at most 3 labels.
func Table41Setup5(clusters int) SynthConfig {
	return SynthConfig{Clusters: clusters, Pods: 750, Policies: 300, KeyLimit: 20, ValueLimit: 10, PodLabels: 5,
		SelectLabels: 3, AllowFields: 3, AllowLabels: 3, RemoteRuleFraction: 0.2, RemotePeers: 20, Seed: 3}
}

// Synthesize returns the pods and policies of a workload.
func Synthesize(c SynthConfig) ([]Pod, map[string]Policy) {
	rng := rand.New(rand.NewPCG(c.Seed, 17))
	lbl := func(n int) map[string]string {
		m := map[string]string{}
		for len(m) < n {
			m[fmt.Sprintf("k%d", rng.IntN(c.KeyLimit))] = fmt.Sprintf("v%d", rng.IntN(c.ValueLimit))
		}
		return m
	}
	var pods []Pod
	for ci := 0; ci < c.Clusters; ci++ {
		for i := 0; i < c.Pods; i++ {
			pods = append(pods, Pod{Cluster: fmt.Sprintf("c%d", ci), Namespace: "bench", Name: fmt.Sprintf("p%d", i),
				Labels: lbl(1 + rng.IntN(c.PodLabels)), IP: netip.AddrFrom4([4]byte{10, byte(ci), byte(i >> 8), byte(i)})})
		}
	}
	pols := map[string]Policy{}
	for ci := 0; ci < c.Clusters; ci++ {
		cl := fmt.Sprintf("c%d", ci)
		for i := 0; i < c.Policies; i++ {
			egress := i%2 == 1
			np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("np%d", i)},
				Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: lbl(1 + rng.IntN(c.SelectLabels))}}}
			var peers []networkingv1.NetworkPolicyPeer
			for f := 0; f < 1+rng.IntN(c.AllowFields); f++ {
				peers = append(peers, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: lbl(1 + rng.IntN(c.AllowLabels))}})
			}
			if c.Clusters > 1 && rng.Float64() < c.RemoteRuleFraction {
				for k := 0; k < c.RemotePeers; k++ {
					oc := (ci + 1 + rng.IntN(c.Clusters-1)) % c.Clusters
					p := pods[oc*c.Pods+rng.IntN(c.Pods)]
					peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.IP.String() + "/32"}})
				}
			}
			if egress {
				np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
				np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: peers}}
			} else {
				np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
				np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peers}}
			}
			pols[cl+"/bench/"+np.Name] = Policy{Cluster: cl, NetworkPolicy: np}
		}
	}
	return pods, pols
}

// SynthPod returns one more random pod for cluster index ci (incremental
// benchmarks).
func SynthPod(c SynthConfig, ci, i int, seed uint64) Pod {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	m := map[string]string{}
	for n := 1 + rng.IntN(c.PodLabels); len(m) < n; {
		m[fmt.Sprintf("k%d", rng.IntN(c.KeyLimit))] = fmt.Sprintf("v%d", rng.IntN(c.ValueLimit))
	}
	return Pod{Cluster: fmt.Sprintf("c%d", ci), Namespace: "bench", Name: fmt.Sprintf("new%d", i), Labels: m,
		IP: netip.AddrFrom4([4]byte{10, byte(100 + ci), byte(i >> 8), byte(i)})}
}
