package cli

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

func TestParse(t *testing.T) {
	e, err := ParseEndpoint("eu-1/shop/web-0")
	require.NoError(t, err)
	assert.Equal(t, Endpoint{"eu-1", "shop", "web-0"}, e)
	for _, bad := range []string{"", "a/b", "a//c", "a/b/c/d"} {
		_, err := ParseEndpoint(bad)
		assert.Error(t, err, bad)
	}
	n, p, err := ParsePort("5432")
	require.NoError(t, err)
	assert.Equal(t, 5432, n)
	assert.Equal(t, corev1.ProtocolTCP, p)
	_, p, err = ParsePort("53/udp")
	require.NoError(t, err)
	assert.Equal(t, corev1.ProtocolUDP, p)
	for _, bad := range []string{"0", "70000", "x", "80/ICMP"} {
		_, _, err := ParsePort(bad)
		assert.Error(t, err, bad)
	}
}

func pod(ns, name, ip string, l map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432}}}}},
		Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Phase: corev1.PodRunning}}
}

// fixture: MCNP "db" (origin a, every cluster) admits api pods of every
// cluster to db pods on 5432; cluster b has a user egress policy limiting
// its api pods to 10.1.0.0/16 (cluster a).
func fixture(t *testing.T) *live {
	l := &live{inv: enforce.NewInventory(), pods: map[string][]corev1.Pod{}, ns: map[string]map[string]map[string]string{},
		netpols: map[string][]networkingv1.NetworkPolicy{}, mcnps: map[string][]v1.MultiClusterNetworkPolicy{}, byIP: map[netip.Addr]string{}}
	l.pods["a"] = []corev1.Pod{pod("shop", "api", "10.1.0.1", map[string]string{"role": "api"}), pod("shop", "db", "10.1.0.2", map[string]string{"role": "db"})}
	l.pods["b"] = []corev1.Pod{pod("shop", "api", "10.2.0.1", map[string]string{"role": "api"}), pod("shop", "db", "10.2.0.2", map[string]string{"role": "db"})}
	port := intstr.FromInt32(5432)
	tcp := corev1.ProtocolTCP
	spec := v1.MultiClusterNetworkPolicySpec{ClusterSelector: &metav1.LabelSelector{},
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}},
		Ingress: []v1.MultiClusterNetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			From: []v1.MultiClusterNetworkPolicyPeer{{ClusterSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "api"}}}}}}}
	l.mcnps["a"] = []v1.MultiClusterNetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}, Spec: spec}}
	nets, err := enforce.ParseClusterCIDRs([]string{"a=10.1.0.0/16", "b=10.2.0.0/16"})
	require.NoError(t, err)
	l.inv.SetNetworks(nets) // pod-IP ownership: the CIDRs the daemons trust
	for _, c := range []string{"a", "b"} {
		l.inv.SetCluster(enforce.Cluster{ID: c})
		l.ns[c] = map[string]map[string]string{"shop": nil}
		l.inv.SetNamespace(c, enforce.Namespace{Name: "shop"})
		for _, p := range l.pods[c] {
			l.inv.SetPod(c, enforce.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, IPs: []string{p.Status.PodIP}, Phase: corev1.PodRunning})
			l.byIP[netip.MustParseAddr(p.Status.PodIP)] = c + "/" + p.Namespace + "/" + p.Name
		}
	}
	require.NoError(t, l.inv.SetPolicy(enforce.Policy{Origin: "a", Namespace: "shop", Name: "db", Spec: spec}))
	for _, c := range []string{"a", "b"} {
		l.netpols[c] = enforce.Translate(c, l.inv) // as the daemons applied them
	}
	l.netpols["b"] = append(l.netpols["b"], networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "egress"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "api"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/16"}}}}}}})
	return l
}

func TestVerdictNamesDecidingRules(t *testing.T) {
	l := fixture(t)
	v, err := verdict(l, Endpoint{"a", "shop", "api"}, Endpoint{"b", "shop", "db"}, 5432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.True(t, v.Allowed)
	assert.False(t, v.Egress.Isolated, "nothing selects a/api for egress")
	require.Len(t, v.Ingress.Decisions, 1)
	d := v.Ingress.Decisions[0]
	assert.True(t, d.Generated)
	assert.Equal(t, "a/shop/db", d.Origin)
	assert.Equal(t, []string{"ingress[0]"}, d.Rules)
	assert.Equal(t, "ip 10.1.0.1", v.Ingress.PeerAs)

	// wrong port: the generated policy selects db but no rule admits it
	v, err = verdict(l, Endpoint{"a", "shop", "api"}, Endpoint{"b", "shop", "db"}, 5433, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.False(t, v.Allowed)
	assert.False(t, v.Ingress.Decisions[0].Allows)

	// b/api -> a/db: egress allowed by the user policy (10.1/16)
	v, err = verdict(l, Endpoint{"b", "shop", "api"}, Endpoint{"a", "shop", "db"}, 5432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.True(t, v.Allowed)
	assert.Equal(t, []string{"egress[0]"}, v.Egress.Decisions[0].Rules)
	assert.False(t, v.Egress.Decisions[0].Generated)

	// b/api -> b/db: ingress admits (same cluster, as a pod), egress denies
	v, err = verdict(l, Endpoint{"b", "shop", "api"}, Endpoint{"b", "shop", "db"}, 5432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.True(t, v.Ingress.Allowed)
	assert.False(t, v.Egress.Allowed)
	assert.False(t, v.Allowed)
	assert.Equal(t, "pod", v.Ingress.PeerAs)

	_, err = verdict(l, Endpoint{"b", "shop", "nope"}, Endpoint{"b", "shop", "db"}, 5432, corev1.ProtocolTCP)
	assert.Error(t, err)
}

func TestConflictsFromLiveView(t *testing.T) {
	l := fixture(t)
	e, err := l.engine()
	require.NoError(t, err)
	rep := e.Conflicts()
	for _, h := range crossCluster(rep.HalfOpen) {
		// on 5432 every cross-cluster flow is allowed on both ends or on neither
		assert.NotEqual(t, "5432/TCP", h.Port, "%+v", h)
	}
	found := false
	// b/api -> b/db is half-open but intra-cluster: filtered
	for _, h := range rep.HalfOpen {
		if h.From == "b/shop" && h.To == "b/shop" && h.Port == "5432/TCP" {
			assert.Equal(t, "ingress-allowed-egress-denied", h.Kind)
			assert.Equal(t, []string{"mcnp a/shop/db ingress[0]"}, h.AllowedBy)
			found = true
		}
	}
	assert.True(t, found)
}

func TestWhatIfAndExplain(t *testing.T) {
	l := fixture(t)
	cand := l.mcnps["a"][0].DeepCopy()
	p := intstr.FromInt32(6000)
	cand.Spec.Ingress[0].Ports[0].Port = &p
	wi := whatIf(l, "a", cand)
	assert.True(t, wi.Exists)
	require.Len(t, wi.Clusters, 2)
	for _, c := range wi.Clusters {
		assert.Equal(t, []string{"shop/" + enforce.GeneratedName("a", "db", 0)}, c.Changed, c.Cluster)
		assert.Contains(t, c.Diff, "6000")
	}

	l = fixture(t)
	ex, err := explain(l, "shop", "db")
	require.NoError(t, err)
	require.Len(t, ex.Clusters, 2)
	for _, c := range ex.Clusters {
		assert.True(t, c.Enforced)
		assert.Equal(t, "in sync", c.Live)
		require.Len(t, c.Peers, 1)
		assert.Equal(t, []string{"a/shop/api", "b/shop/api"}, c.Peers[0].Pods)
	}
	_, err = explain(l, "shop", "missing")
	assert.Error(t, err)
}
