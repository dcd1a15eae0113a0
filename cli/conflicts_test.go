package cli

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// mcnpWorld is a random two-cluster inventory: pods serving "pg" (5432)
// and "http" (8080), MCNPs of either origin and user NetworkPolicies.
type mcnpWorld struct {
	pods  map[string][]corev1.Pod
	mcnps []enforce.Policy
	user  map[string][]networkingv1.NetworkPolicy
}

var (
	worldClusters = []string{"a", "b"}
	worldNS       = map[string]map[string]string{"shop": {"team": "shop"}, "ops": {"team": "ops"}}
	worldRoles    = []string{"api", "db", "web"}
	// probes: every port a rule below names, inside and at the ends of
	// its range, and one no rule names, per protocol.
	worldProbes = []struct {
		port  int
		proto corev1.Protocol
	}{{5432, corev1.ProtocolTCP}, {8080, corev1.ProtocolTCP}, {8000, corev1.ProtocolTCP}, {8100, corev1.ProtocolTCP},
		{9999, corev1.ProtocolTCP}, {53, corev1.ProtocolUDP}, {9999, corev1.ProtocolUDP}}
)

func randomPorts(rng *rand.Rand) []networkingv1.NetworkPolicyPort {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	p := func(proto *corev1.Protocol, port intstr.IntOrString, end *int32) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Protocol: proto, Port: &port, EndPort: end}}
	}
	end := int32(8100)
	switch rng.IntN(7) {
	case 0:
		return nil
	case 1:
		return p(&tcp, intstr.FromInt32(5432), nil)
	case 2:
		return p(nil, intstr.FromInt32(8080), nil) // TCP by default
	case 3:
		return p(&tcp, intstr.FromString("http"), nil)
	case 4:
		return p(&udp, intstr.FromInt32(53), nil)
	case 5:
		return p(&tcp, intstr.FromInt32(8000), nil) // the start of the range below
	}
	return p(&tcp, intstr.FromInt32(8000), &end)
}

func randomRole(rng *rand.Rand) *metav1.LabelSelector {
	if rng.IntN(4) == 0 {
		return &metav1.LabelSelector{}
	}
	return &metav1.LabelSelector{MatchLabels: map[string]string{"role": worldRoles[rng.IntN(len(worldRoles))]}}
}

func randomMCNPPeers(rng *rand.Rand) []v1.MultiClusterNetworkPolicyPeer {
	var out []v1.MultiClusterNetworkPolicyPeer
	for range 1 + rng.IntN(2) {
		pr := v1.MultiClusterNetworkPolicyPeer{PodSelector: randomRole(rng)}
		if rng.IntN(2) == 0 {
			pr.ClusterSelector = &metav1.LabelSelector{} // every cluster; nil: the enforcing one
		}
		if rng.IntN(3) == 0 {
			pr.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": []string{"shop", "ops"}[rng.IntN(2)]}}
		}
		out = append(out, pr)
	}
	return out
}

func randomMCNP(rng *rand.Rand, i int) enforce.Policy {
	p := enforce.Policy{Origin: worldClusters[rng.IntN(2)], Namespace: []string{"shop", "ops"}[rng.IntN(2)], Name: fmt.Sprintf("m%d", i)}
	s := &p.Spec
	s.PodSelector = *randomRole(rng)
	if rng.IntN(3) > 0 {
		s.ClusterSelector = &metav1.LabelSelector{}
	}
	for range rng.IntN(3) {
		s.Ingress = append(s.Ingress, v1.MultiClusterNetworkPolicyIngressRule{From: randomMCNPPeers(rng), Ports: randomPorts(rng)})
	}
	for range rng.IntN(3) {
		s.Egress = append(s.Egress, v1.MultiClusterNetworkPolicyEgressRule{To: randomMCNPPeers(rng), Ports: randomPorts(rng)})
	}
	if rng.IntN(2) == 0 {
		s.PolicyTypes = [][]networkingv1.PolicyType{{networkingv1.PolicyTypeIngress}, {networkingv1.PolicyTypeEgress},
			{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}[rng.IntN(3)]
	}
	return p
}

func randomUserNP(rng *rand.Rand, i int) networkingv1.NetworkPolicy {
	np := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: []string{"shop", "ops"}[rng.IntN(2)], Name: fmt.Sprintf("u%d", i)},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: *randomRole(rng),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
	peer := networkingv1.NetworkPolicyPeer{PodSelector: randomRole(rng)}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{peer}, Ports: randomPorts(rng)}}
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{peer}, Ports: randomPorts(rng)}}
	return np
}

func randomMCNPWorld(rng *rand.Rand) *mcnpWorld {
	w := &mcnpWorld{pods: map[string][]corev1.Pod{}, user: map[string][]networkingv1.NetworkPolicy{}}
	for ci, c := range worldClusters {
		for i := range 2 + rng.IntN(3) {
			p := pod([]string{"shop", "ops"}[rng.IntN(2)], fmt.Sprintf("p%d", i), fmt.Sprintf("10.%d.0.%d", ci+1, i+1),
				map[string]string{"role": worldRoles[rng.IntN(len(worldRoles))]})
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "http", ContainerPort: 8080})
			w.pods[c] = append(w.pods[c], p)
		}
		if rng.IntN(3) == 0 {
			w.user[c] = append(w.user[c], randomUserNP(rng, ci))
		}
	}
	for i := range 1 + rng.IntN(4) {
		w.mcnps = append(w.mcnps, randomMCNP(rng, i))
	}
	return w
}

// live builds the plugin's view of the world, with the NetworkPolicies the
// daemons would apply.
func (w *mcnpWorld) live(t *testing.T) *live {
	l := &live{inv: enforce.NewInventory(), pods: w.pods, ns: map[string]map[string]map[string]string{},
		netpols: map[string][]networkingv1.NetworkPolicy{}, byIP: map[netip.Addr]string{}}
	nets, err := enforce.ParseClusterCIDRs([]string{"a=10.1.0.0/16", "b=10.2.0.0/16"})
	require.NoError(t, err)
	l.inv.SetNetworks(nets)
	for _, c := range worldClusters {
		l.inv.SetCluster(enforce.Cluster{ID: c})
		l.ns[c] = worldNS
		for n, lbls := range worldNS {
			l.inv.SetNamespace(c, enforce.Namespace{Name: n, Labels: lbls})
		}
		for _, p := range w.pods[c] {
			l.inv.SetPod(c, enforce.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, IPs: []string{p.Status.PodIP},
				Phase: corev1.PodRunning, Ports: []enforce.Port{{Name: "pg", Port: 5432}, {Name: "http", Port: 8080}}})
			l.byIP[netip.MustParseAddr(p.Status.PodIP)] = c + "/" + p.Namespace + "/" + p.Name
		}
	}
	for _, p := range w.mcnps {
		require.NoError(t, l.inv.SetPolicy(p))
	}
	for _, c := range worldClusters {
		l.netpols[c] = append(enforce.Translate(c, l.inv), w.user[c]...)
	}
	return l
}

// flows is every pod-to-pod flow `verdict` (cyclonus' matcher) allows, on
// every probe port.
func flows(t *testing.T, l *live) []string {
	var out []string
	for _, sc := range worldClusters {
		for _, sp := range l.pods[sc] {
			for _, dc := range worldClusters {
				for _, dp := range l.pods[dc] {
					if sc == dc && sp.Name == dp.Name {
						continue
					}
					for _, pr := range worldProbes {
						v, err := verdict(l, Endpoint{sc, sp.Namespace, sp.Name}, Endpoint{dc, dp.Namespace, dp.Name}, pr.port, pr.proto)
						require.NoError(t, err)
						if v.Allowed {
							out = append(out, fmt.Sprintf("%s -> %s %d/%s", v.From, v.To, pr.port, pr.proto))
						}
					}
				}
			}
		}
	}
	return out
}

// without removes rule group g: an MCNP rule ("mcnp ORIGIN/NS/NAME
// ingress[i]"; the MCNP keeps its effective policyTypes, so it still
// isolates) or a user NetworkPolicy rule ("CLUSTER/NS/NAME egress[i]").
func (w *mcnpWorld) without(g string) *mcnpWorld {
	out := &mcnpWorld{pods: w.pods, user: map[string][]networkingv1.NetworkPolicy{}}
	for _, p := range w.mcnps {
		p.Spec = *p.Spec.DeepCopy()
		owner := "mcnp " + enforce.PolicyRef{Origin: p.Origin, Namespace: p.Namespace, Name: p.Name}.String()
		p.Spec.PolicyTypes = effectiveTypes(&p.Spec)
		p.Spec.Ingress = dropRule(p.Spec.Ingress, owner+" ingress", g)
		p.Spec.Egress = dropRule(p.Spec.Egress, owner+" egress", g)
		out.mcnps = append(out.mcnps, p)
	}
	for c, nps := range w.user {
		for _, np := range nps {
			np := *np.DeepCopy()
			name := c + "/" + np.Namespace + "/" + np.Name
			np.Spec.Ingress = dropRule(np.Spec.Ingress, name+" ingress", g)
			np.Spec.Egress = dropRule(np.Spec.Egress, name+" egress", g)
			out.user[c] = append(out.user[c], np)
		}
	}
	return out
}

func dropRule[R any](rules []R, prefix, g string) []R {
	var out []R
	for i, r := range rules {
		if fmt.Sprintf("%s[%d]", prefix, i) != g {
			out = append(out, r)
		}
	}
	return out
}

// TestConflictsRedundancyAgainstBruteForce: on random two-cluster
// inventories of MCNPs (rules of every kind of peer and port, translated
// per rule as conflicts does, remote peers as pod-IP ipBlocks) and user
// NetworkPolicies, every rule conflicts calls redundant names the rules
// that shadow it, and removing it changes no flow, as `verdict` evaluates
// every pod pair on every port class.
func TestConflictsRedundancyAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 11))
	cases, found := 1000, 0
	if testing.Short() {
		cases = 150
	}
	for c := range cases {
		w := randomMCNPWorld(rng)
		l := w.live(t)
		e, err := l.engine()
		require.NoError(t, err)
		rep := e.Conflicts()
		if len(rep.Redundant) == 0 {
			continue
		}
		before := flows(t, l)
		for _, x := range rep.Redundant {
			found++
			require.NotEmpty(t, x.ShadowedBy, "case %d: %s is redundant but shadowed by nothing", c, x.Group)
			require.NotContains(t, x.ShadowedBy, x.Group)
			after := flows(t, w.without(x.Group).live(t))
			require.Equal(t, before, after, "case %d: removing %s (shadowed by %v) changes flows", c, x.Group, x.ShadowedBy)
		}
	}
	t.Logf("%d redundant rules checked", found)
	require.Greater(t, found, 20, "the random inventories exercise redundancy")
}
