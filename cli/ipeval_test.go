package cli

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ipEval decides flows with an IP peer exactly as cyclonus' matcher (which
// verdict uses) does, over random NetworkPolicies: ipBlocks with excepts,
// selector peers, rules without peers, numeric, named and ranged ports,
// protocols, policyTypes.
func TestIPEvalMatchesCyclonus(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 4))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	protos := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}
	randPorts := func() []networkingv1.NetworkPolicyPort {
		var out []networkingv1.NetworkPolicyPort
		for range rng.IntN(3) {
			pr := protos[rng.IntN(2)]
			p := networkingv1.NetworkPolicyPort{}
			if rng.IntN(2) == 0 {
				p.Protocol = &pr
			}
			switch rng.IntN(4) {
			case 0:
			case 1:
				v := intstr.FromString(pick("pg", "http"))
				p.Port = &v
			case 2:
				v := intstr.FromInt32(int32(5430 + rng.IntN(5)))
				p.Port = &v
			default:
				v := intstr.FromInt32(int32(5430 + rng.IntN(3)))
				end := v.IntVal + int32(rng.IntN(3))
				p.Port, p.EndPort = &v, &end
			}
			out = append(out, p)
		}
		return out
	}
	randPeers := func() []networkingv1.NetworkPolicyPeer {
		var out []networkingv1.NetworkPolicyPeer
		for range rng.IntN(3) {
			switch rng.IntN(3) {
			case 0:
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "api"}}})
			default:
				b := &networkingv1.IPBlock{CIDR: pick("10.1.0.0/16", "10.1.0.1/32", "10.1.0.2/32", "10.97.0.0/16", "10.97.0.20/32", "0.0.0.0/0")}
				if rng.IntN(3) == 0 {
					b.Except = []string{pick("10.1.0.1/32", "10.97.0.20/32", "10.1.0.0/24")}
				}
				out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: b})
			}
		}
		return out
	}
	pods := []*corev1.Pod{}
	for i, l := range []map[string]string{{"role": "db"}, {"role": "db", "tier": "primary"}, {"role": "api"}} {
		p := readyPod("shop", fmt.Sprintf("p%d", i), fmt.Sprintf("10.2.0.%d", i+1), l)
		pods = append(pods, &p)
	}
	ips := []string{"10.1.0.1", "10.1.0.2", "10.1.1.9", "10.97.0.20", "10.97.3.3"}
	for iter := 0; iter < 400; iter++ {
		var nps []networkingv1.NetworkPolicy
		for j := range 1 + rng.IntN(4) {
			np := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: pick("shop", "shop", "other"), Name: fmt.Sprintf("np%d", j)}}
			np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"role": pick("db", "api")}}
			if rng.IntN(3) == 0 {
				np.Spec.PodSelector.MatchLabels["tier"] = "primary"
			}
			if rng.IntN(4) == 0 {
				np.Spec.PodSelector = metav1.LabelSelector{}
			}
			for range rng.IntN(3) {
				np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: randPorts(), From: randPeers()})
			}
			for range rng.IntN(3) {
				np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: randPorts(), To: randPeers()})
			}
			switch rng.IntN(4) {
			case 0:
				np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			case 1:
				np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
			case 2:
				np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
			}
			nps = append(nps, np)
		}
		var all []*networkingv1.NetworkPolicy
		for i := range nps {
			all = append(all, withTypes(nps[i]))
		}
		ref := matcher.BuildNetworkPolicies(false, all)
		e := newIPEval(nps)
		l := &live{ns: map[string]map[string]map[string]string{"b": {"shop": nil}}}
		for range 20 {
			pod := pods[rng.IntN(len(pods))]
			ip := ips[rng.IntN(len(ips))]
			port := 5429 + rng.IntN(6)
			name := pick("", "pg", "http")
			proto := protos[rng.IntN(2)]
			ingress := rng.IntN(2) == 0
			if !ingress {
				name = "" // an IP destination has no port names
			}
			tp := l.trafficPeer("b", pod, true)
			peer := &matcher.TrafficPeer{IP: ip}
			tr := &matcher.Traffic{Source: tp, Destination: peer, ResolvedPort: port, ResolvedPortName: name, Protocol: proto}
			if ingress {
				tr.Source, tr.Destination = peer, tp
			}
			want := ref.IsIngressOrEgressAllowed(tr, ingress)
			got := e.eval(pod, netip.MustParseAddr(ip), port, name, proto, ingress)
			msg := fmt.Sprintf("iter %d pod %s ip %s port %d/%s name %q ingress %v\n%+v", iter, pod.Name, ip, port, proto, name, ingress, nps)
			require.Equal(t, want.IsAllowed(), got.allowed, msg)
			require.Equal(t, len(want.AllowingTargets)+len(want.DenyingTargets) > 0, got.isolated, msg)
		}
	}
}
