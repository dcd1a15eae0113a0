package reach

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A brute-force NetworkPolicy evaluator, independent of the engine: it
// checks every (source, destination, port, protocol) of a small inventory
// against every policy, as the Kubernetes API documents it. Every pod
// serves a container port named "http" on 80/TCP.

type flowWorld struct {
	pods []Pod
	ns   map[string]map[string]string // namespace -> labels (cluster "a")
	pols map[string]*networkingv1.NetworkPolicy
}

var flowPorts = []struct {
	proto corev1.Protocol
	port  int32
}{{"TCP", 80}, {"TCP", 85}, {"TCP", 443}, {"TCP", 9999}, {"UDP", 53}, {"UDP", 80}, {"SCTP", 7}}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		panic(err)
	}
	return s.Matches(labels.Set(l))
}

func (w *flowWorld) peerMatches(np *networkingv1.NetworkPolicy, peer networkingv1.NetworkPolicyPeer, other Pod) bool {
	if peer.IPBlock != nil {
		p := netip.MustParsePrefix(peer.IPBlock.CIDR)
		if !other.IP.IsValid() || !p.Contains(other.IP) {
			return false
		}
		for _, ex := range peer.IPBlock.Except {
			if netip.MustParsePrefix(ex).Contains(other.IP) {
				return false
			}
		}
		return true
	}
	if peer.NamespaceSelector == nil {
		if other.Namespace != np.Namespace {
			return false
		}
	} else if !selects(peer.NamespaceSelector, w.ns[other.Namespace]) {
		return false
	}
	return peer.PodSelector == nil || selects(peer.PodSelector, other.Labels)
}

func portMatches(ports []networkingv1.NetworkPolicyPort, proto corev1.Protocol, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if protoOf(p.Protocol) != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if p.Port.StrVal == "http" && proto == corev1.ProtocolTCP && port == 80 {
				return true
			}
		case p.EndPort != nil:
			if port >= p.Port.IntVal && port <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == port:
			return true
		}
	}
	return false
}

func hasType(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	return slices.Contains(np.Spec.PolicyTypes, t)
}

// allowed: the source's egress and the destination's ingress both admit.
func (w *flowWorld) allowed(pols map[string]*networkingv1.NetworkPolicy, s, t Pod, proto corev1.Protocol, port int32) bool {
	egressOK, ingressOK := true, true
	for _, np := range pols {
		if np.Namespace == s.Namespace && selects(&np.Spec.PodSelector, s.Labels) && hasType(np, networkingv1.PolicyTypeEgress) {
			if egressOK {
				egressOK = false // isolated: some rule must admit
			}
		}
		if np.Namespace == t.Namespace && selects(&np.Spec.PodSelector, t.Labels) && hasType(np, networkingv1.PolicyTypeIngress) {
			ingressOK = false
		}
	}
	for _, np := range pols {
		if !egressOK && np.Namespace == s.Namespace && selects(&np.Spec.PodSelector, s.Labels) && hasType(np, networkingv1.PolicyTypeEgress) {
			for _, r := range np.Spec.Egress {
				if (len(r.To) == 0 || slices.ContainsFunc(r.To, func(p networkingv1.NetworkPolicyPeer) bool { return w.peerMatches(np, p, t) })) &&
					portMatches(r.Ports, proto, port) {
					egressOK = true
				}
			}
		}
		if !ingressOK && np.Namespace == t.Namespace && selects(&np.Spec.PodSelector, t.Labels) && hasType(np, networkingv1.PolicyTypeIngress) {
			for _, r := range np.Spec.Ingress {
				if (len(r.From) == 0 || slices.ContainsFunc(r.From, func(p networkingv1.NetworkPolicyPeer) bool { return w.peerMatches(np, p, s) })) &&
					portMatches(r.Ports, proto, port) {
					ingressOK = true
				}
			}
		}
	}
	return egressOK && ingressOK
}

func (w *flowWorld) flows(pols map[string]*networkingv1.NetworkPolicy) map[string]bool {
	out := map[string]bool{}
	for _, s := range w.pods {
		for _, t := range w.pods {
			if s.Name == t.Name && s.Namespace == t.Namespace {
				continue
			}
			for _, fp := range flowPorts {
				if w.allowed(pols, s, t, fp.proto, fp.port) {
					out[fmt.Sprintf("%s>%s@%d/%s", s.Key(), t.Key(), fp.port, fp.proto)] = true
				}
			}
		}
	}
	return out
}

func groupName(name string, egress bool, i int) string {
	if egress {
		return fmt.Sprintf("%s egress[%d]", name, i)
	}
	return fmt.Sprintf("%s ingress[%d]", name, i)
}

func (w *flowWorld) engine(t *testing.T) *Engine {
	e := New()
	for n, l := range w.ns {
		e.SetNamespace("a", n, l)
	}
	pols := map[string]Policy{}
	for name, np := range w.pols {
		p := Policy{Cluster: "a", Owner: "np " + name, NetworkPolicy: np}
		for i := range np.Spec.Ingress {
			p.IngressGroups = append(p.IngressGroups, groupName(name, false, i))
		}
		for i := range np.Spec.Egress {
			p.EgressGroups = append(p.EgressGroups, groupName(name, true, i))
		}
		pols[name] = p
	}
	require.NoError(t, e.Load(w.pods, pols))
	return e
}

// without returns the policies with the rule of group g removed.
func (w *flowWorld) without(g string) map[string]*networkingv1.NetworkPolicy {
	out := map[string]*networkingv1.NetworkPolicy{}
	for name, np := range w.pols {
		c := np.DeepCopy()
		c.Spec.Ingress, c.Spec.Egress = nil, nil
		for i, r := range np.Spec.Ingress {
			if groupName(name, false, i) != g {
				c.Spec.Ingress = append(c.Spec.Ingress, r)
			}
		}
		for i, r := range np.Spec.Egress {
			if groupName(name, true, i) != g {
				c.Spec.Egress = append(c.Spec.Egress, r)
			}
		}
		out[name] = c
	}
	return out
}

func randomWorld(rng *rand.Rand) *flowWorld {
	w := &flowWorld{ns: map[string]map[string]string{"x": {"team": "shop"}, "y": {"team": "pay"}}, pols: map[string]*networkingv1.NetworkPolicy{}}
	apps := []string{"f", "b", "d"}
	for i := range 3 + rng.IntN(4) {
		w.pods = append(w.pods, Pod{Cluster: "a", Namespace: []string{"x", "y"}[rng.IntN(2)], Name: fmt.Sprintf("p%d", i),
			Labels: map[string]string{"app": apps[rng.IntN(3)]}, IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})})
	}
	sel := func() *metav1.LabelSelector {
		if rng.IntN(3) == 0 {
			return &metav1.LabelSelector{}
		}
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": apps[rng.IntN(3)]}}
	}
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	p80, p443, p53, named := intstr.FromInt32(80), intstr.FromInt32(443), intstr.FromInt32(53), intstr.FromString("http")
	end := int32(90)
	portChoices := [][]networkingv1.NetworkPolicyPort{
		nil, nil,
		{{Protocol: &tcp, Port: &p80}},
		{{Protocol: &tcp, Port: &p80}},
		{{Protocol: &tcp, Port: &p443}, {Protocol: &udp, Port: &p53}},
		{{Protocol: &tcp, Port: &named}},
		{{Protocol: &tcp, Port: &p80, EndPort: &end}},
		{{Protocol: &tcp}},
		{{Protocol: &sctp}},
	}
	peers := func() []networkingv1.NetworkPolicyPeer {
		var out []networkingv1.NetworkPolicyPeer
		for range rng.IntN(3) {
			switch rng.IntN(5) {
			case 0:
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: sel()})
			case 1:
				out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": []string{"shop", "pay"}[rng.IntN(2)]}}, PodSelector: sel()})
			case 2:
				out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}})
			case 3:
				ip := w.pods[rng.IntN(len(w.pods))].IP
				out = append(out, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(ip, 32).String()}})
			default:
				out = append(out, networkingv1.NetworkPolicyPeer{PodSelector: sel()})
			}
		}
		return out
	}
	for i := range 1 + rng.IntN(4) {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: []string{"x", "y"}[rng.IntN(2)], Name: fmt.Sprintf("n%d", i)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: *sel()}}
		switch rng.IntN(3) {
		case 0:
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		case 1:
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		default:
			np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		}
		for range rng.IntN(3) {
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: peers(), Ports: portChoices[rng.IntN(len(portChoices))]})
		}
		for range rng.IntN(3) {
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: peers(), Ports: portChoices[rng.IntN(len(portChoices))]})
		}
		w.pols[np.Name] = np
	}
	return w
}

// TestRedundancyAgainstBruteForce: on random small inventories, every rule
// the conflict report calls redundant names the rules that shadow it, and
// removing it changes no flow, as a brute-force evaluation of every flow
// decides.
func TestRedundancyAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 7))
	found := 0
	for c := range 1500 {
		w := randomWorld(rng)
		rep := w.engine(t).Conflicts()
		if len(rep.Redundant) == 0 {
			continue
		}
		before := w.flows(w.pols)
		for _, x := range rep.Redundant {
			found++
			require.NotEmpty(t, x.ShadowedBy, "case %d: %s is redundant but shadowed by nothing", c, x.Group)
			require.NotContains(t, x.ShadowedBy, x.Group)
			after := w.flows(w.without(x.Group))
			require.Equal(t, before, after, "case %d: removing %s (shadowed by %v) changes flows", c, x.Group, x.ShadowedBy)
		}
	}
	require.Greater(t, found, 50, "the random inventories exercise redundancy")
}

// The demo's shape (issue 31): the only rule admitting frontends to
// backends names its port ("http"); nothing else admits those flows, so it
// is not redundant, even though the matrix has no class for named ports.
func TestNamedPortOnlyRuleIsNotRedundant(t *testing.T) {
	named := intstr.FromString("http")
	tcp := corev1.ProtocolTCP
	w := &flowWorld{ns: map[string]map[string]string{"shop": nil}, pols: map[string]*networkingv1.NetworkPolicy{
		"backend-allow-frontends": {ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "backend-allow-frontends"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "backend"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "frontend"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &named}}}}}}}}
	w.pods = []Pod{
		{Cluster: "a", Namespace: "shop", Name: "fe", Labels: map[string]string{"app": "frontend"}, IP: netip.MustParseAddr("10.0.0.1")},
		{Cluster: "a", Namespace: "shop", Name: "be", Labels: map[string]string{"app": "backend"}, IP: netip.MustParseAddr("10.0.0.2")},
	}
	rep := w.engine(t).Conflicts()
	require.Empty(t, rep.Redundant)
	require.NotEqual(t, w.flows(w.pols), w.flows(w.without("backend-allow-frontends ingress[0]")), "the rule admits flows")
}
