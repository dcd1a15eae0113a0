package enforce

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNoPoliciesGenerateNothing(t *testing.T) {
	inv := base(t)
	inv.SetPod("eu-2", pod("shop", "a", l("app", "x"), "10.2.0.1"))
	for _, c := range inv.Clusters() {
		require.Empty(t, Translate(c, inv))
	}
}

func TestEnforcingClusters(t *testing.T) {
	cases := []struct {
		name     string
		selector string // spec.clusterSelector YAML line, "" = absent
		want     []string
	}{
		{"absent means origin only", "", []string{"eu-1"}},
		{"empty selects every cluster", "clusterSelector: {}", []string{"eu-1", "eu-2", "us-1"}},
		{"matchLabels", "clusterSelector: {matchLabels: {region: eu}}", []string{"eu-1", "eu-2"}},
		{"cluster id label", "clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: us-1}}", []string{"us-1"}},
		{"In", "clusterSelector: {matchExpressions: [{key: region, operator: In, values: [us, ap]}]}", []string{"us-1"}},
		{"NotIn", "clusterSelector: {matchExpressions: [{key: region, operator: NotIn, values: [us]}]}", []string{"eu-1", "eu-2"}},
		{"Exists", "clusterSelector: {matchExpressions: [{key: tier, operator: Exists}]}", []string{"eu-2"}},
		{"DoesNotExist", "clusterSelector: {matchExpressions: [{key: tier, operator: DoesNotExist}]}", []string{"eu-1", "us-1"}},
		{"no match", "clusterSelector: {matchLabels: {region: ap}}", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv := base(t)
			inv.SetCluster(Cluster{ID: "eu-2", Labels: l("region", "eu", "tier", "gold")})
			mustSet(t, inv, pol(t, "eu-1", "shop", "p", tc.selector+"\npodSelector: {}"))
			var got []string
			for _, c := range inv.Clusters() {
				res := Evaluate(c, inv, PolicyRef{"eu-1", "shop", "p"})
				require.Equal(t, res.Selected, len(res.NetworkPolicies) > 0)
				if len(Translate(c, inv)) > 0 {
					got = append(got, c)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMissingNamespaceIsSkipped(t *testing.T) {
	inv := base(t)
	inv.RemoveNamespace("us-1", "shop")
	inv.SetPod("us-1", pod("shop", "orphan", nil, "10.3.0.1")) // pod without namespace object
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", "clusterSelector: {}\npodSelector: {}"))
	res := Evaluate("us-1", inv, PolicyRef{"eu-1", "shop", "p"})
	require.True(t, res.Selected)
	require.True(t, res.SkippedNoNamespace)
	require.Empty(t, res.NetworkPolicies)
	require.Len(t, Translate("eu-2", inv), 1)
}

func TestPeerClusterDimension(t *testing.T) {
	mk := func(t *testing.T, peer string) *Inventory {
		inv := base(t)
		inv.SetPod("eu-1", pod("shop", "fe", l("app", "fe"), "10.1.0.1"))
		inv.SetPod("eu-2", pod("shop", "fe", l("app", "fe"), "10.2.0.1"))
		inv.SetPod("us-1", pod("shop", "fe", l("app", "fe"), "10.3.0.1"))
		inv.SetPod("us-1", pod("shop", "other", l("app", "other"), "10.3.0.2"))
		mustSet(t, inv, pol(t, "eu-1", "shop", "p", "podSelector: {matchLabels: {app: db}}\ningress:\n- from:\n  - "+peer))
		return inv
	}
	feSel := &metav1.LabelSelector{MatchLabels: l("app", "fe")}
	cases := []struct {
		name       string
		peer       string
		wantNative []networkingv1.NetworkPolicyPeer
		wantCIDRs  []string
	}{
		{"absent clusterSelector = enforcing cluster only", "podSelector: {matchLabels: {app: fe}}",
			[]networkingv1.NetworkPolicyPeer{{PodSelector: feSel}}, nil},
		{"{} = all clusters incl. enforcing", "{clusterSelector: {}, podSelector: {matchLabels: {app: fe}}}",
			[]networkingv1.NetworkPolicyPeer{{PodSelector: feSel}}, []string{"10.2.0.1/32", "10.3.0.1/32"}},
		{"selector not matching enforcing = remote only", "{clusterSelector: {matchLabels: {region: us}}, podSelector: {matchLabels: {app: fe}}}",
			nil, []string{"10.3.0.1/32"}},
		{"selector matching enforcing", "{clusterSelector: {matchLabels: {region: eu}}, podSelector: {matchLabels: {app: fe}}}",
			[]networkingv1.NetworkPolicyPeer{{PodSelector: feSel}}, []string{"10.2.0.1/32"}},
		{"only clusterSelector = all pods of same namespace", "{clusterSelector: {matchLabels: {region: us}}}",
			nil, []string{"10.3.0.1/32", "10.3.0.2/32"}},
		{"only clusterSelector incl. enforcing -> podSelector {}", "{clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-1}}}",
			[]networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}, nil},
		{"NotIn on pods", "{clusterSelector: {}, podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [fe]}]}}",
			[]networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "NotIn", Values: []string{"fe"}}}}}},
			[]string{"10.3.0.2/32"}},
		{"DoesNotExist on pods", "{clusterSelector: {matchLabels: {region: us}}, podSelector: {matchExpressions: [{key: app, operator: DoesNotExist}]}}",
			nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv := mk(t, tc.peer)
			nps := Translate("eu-1", inv)
			require.Len(t, nps, 1)
			np := nps[0]
			if tc.wantNative == nil && tc.wantCIDRs == nil {
				require.Empty(t, np.Spec.Ingress, "rule with no peers must be dropped")
				require.Equal(t, []networkingv1.PolicyType{"Ingress"}, np.Spec.PolicyTypes)
				return
			}
			require.Len(t, np.Spec.Ingress, 1)
			assert.Equal(t, tc.wantNative, natives(np.Spec.Ingress[0].From))
			assert.Equal(t, tc.wantCIDRs, cidrs(np.Spec.Ingress[0].From))
		})
	}
}

func TestRemoteNamespaceSelectorUsesRemoteLabels(t *testing.T) {
	inv := base(t)
	// "payments" is labelled team=pay in eu-2 only; us-1 has it unlabelled
	// and labels a differently named namespace team=pay.
	inv.SetNamespace("eu-1", Namespace{Name: "payments"})
	inv.SetNamespace("eu-2", Namespace{Name: "payments", Labels: l("team", "pay")})
	inv.SetNamespace("us-1", Namespace{Name: "payments"})
	inv.SetNamespace("us-1", Namespace{Name: "billing", Labels: l("team", "pay")})
	inv.SetPod("eu-2", pod("payments", "api", l("app", "api"), "10.2.1.1"))
	inv.SetPod("us-1", pod("payments", "api", l("app", "api"), "10.3.1.1"))
	inv.SetPod("us-1", pod("billing", "api", l("app", "api"), "10.3.2.1"))
	inv.SetPod("eu-2", pod("shop", "api", l("app", "api"), "10.2.2.1"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {}
ingress:
- from:
  - clusterSelector: {}
    namespaceSelector: {matchLabels: {team: pay}}
    podSelector: {matchLabels: {app: api}}`))
	nps := Translate("eu-1", inv)
	require.Len(t, nps, 1)
	from := nps[0].Spec.Ingress[0].From
	require.Equal(t, []string{"10.2.1.1/32", "10.3.2.1/32"}, cidrs(from))
	require.Equal(t, []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: l("team", "pay")},
		PodSelector:       &metav1.LabelSelector{MatchLabels: l("app", "api")},
	}}, natives(from))

	// kubernetes.io/metadata.name works for remote namespaces too.
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {}
ingress:
- from:
  - clusterSelector: {matchLabels: {region: us}}
    namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [payments]}]}`))
	nps = Translate("eu-1", inv)
	require.Equal(t, []string{"10.3.1.1/32"}, cidrs(nps[0].Spec.Ingress[0].From))
}

func TestEligiblePeerPods(t *testing.T) {
	inv := base(t)
	add := func(name string, mut func(*Pod), ips ...string) {
		p := pod("shop", name, l("app", "x"), ips...)
		if mut != nil {
			mut(&p)
		}
		inv.SetPod("eu-2", p)
	}
	add("running", nil, "10.2.0.1")
	add("pending-with-ip", func(p *Pod) { p.Phase = corev1.PodPending }, "10.2.0.2")
	add("unknown-phase", func(p *Pod) { p.Phase = "" }, "10.2.0.3")
	add("no-ip", nil)
	add("host-network", func(p *Pod) { p.HostNetwork = true }, "192.168.0.10")
	add("succeeded", func(p *Pod) { p.Phase = corev1.PodSucceeded }, "10.2.0.4")
	add("failed", func(p *Pod) { p.Phase = corev1.PodFailed }, "10.2.0.5")
	add("bad-ip", nil, "not-an-ip")
	add("dual-stack", nil, "10.2.0.6", "fd00::6")
	add("v6", nil, "fd00::10")
	add("v4-mapped", nil, "::ffff:10.2.0.7")
	add("dup-ip", nil, "10.2.0.1")
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", "podSelector: {}\negress: [{to: [{clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-2}}}]}]"))
	res := Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "p"})
	require.Equal(t, []string{"10.2.0.1/32", "10.2.0.2/32", "10.2.0.3/32", "10.2.0.6/32", "10.2.0.7/32", "fd00::6/128", "fd00::10/128"},
		cidrs(res.NetworkPolicies[0].Spec.Egress[0].To))
	require.Equal(t, 7, res.RemotePeers)
	require.Equal(t, []networkingv1.PolicyType{"Ingress", "Egress"}, res.NetworkPolicies[0].Spec.PolicyTypes)
}

func TestNeverWiden(t *testing.T) {
	inv := base(t)
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {matchLabels: {app: db}}
policyTypes: [Ingress, Egress]
ingress:
- from: [{clusterSelector: {matchLabels: {region: ap}}}]
- from: [{clusterSelector: {matchLabels: {region: us}}, podSelector: {matchLabels: {app: none}}}]
egress:
- to: [{clusterSelector: {matchLabels: {region: us}}}]
  ports: [{port: 53, protocol: UDP}]`))
	nps := Translate("eu-1", inv)
	require.Len(t, nps, 1)
	np := nps[0]
	require.Nil(t, np.Spec.Ingress)
	require.Nil(t, np.Spec.Egress)
	require.Equal(t, []networkingv1.PolicyType{"Ingress", "Egress"}, np.Spec.PolicyTypes, "pods stay isolated")
	y := toYAML(t, nps)
	require.NotContains(t, y, "from:")
	require.NotContains(t, y, "to:")

	// An explicitly empty from (allow all) is the user's intent: kept.
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {}
ingress: [{ports: [{port: 80}]}]`))
	nps = Translate("eu-1", inv)
	require.Len(t, nps[0].Spec.Ingress, 1)
	require.Nil(t, nps[0].Spec.Ingress[0].From)
	require.Equal(t, int32(80), nps[0].Spec.Ingress[0].Ports[0].Port.IntVal)

	// A mix keeps only the peers that translate.
	inv.SetPod("us-1", pod("shop", "a", nil, "10.3.0.1"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {}
ingress:
- from:
  - clusterSelector: {matchLabels: {region: ap}}
  - clusterSelector: {matchLabels: {region: us}}`))
	nps = Translate("eu-1", inv)
	require.Equal(t, []string{"10.3.0.1/32"}, cidrs(nps[0].Spec.Ingress[0].From))
	require.Len(t, nps[0].Spec.Ingress[0].From, 1)
}

func TestPolicyTypes(t *testing.T) {
	inv := base(t)
	inv.SetPod("us-1", pod("shop", "a", nil, "10.3.0.1"))
	cases := []struct {
		name        string
		spec        string
		wantTypes   []networkingv1.PolicyType
		wantIngress int
		wantEgress  int
	}{
		{"default ingress only", "podSelector: {}\ningress: [{}]", []networkingv1.PolicyType{"Ingress"}, 1, 0},
		{"egress implied by rules", "podSelector: {}\negress: [{}]", []networkingv1.PolicyType{"Ingress", "Egress"}, 0, 1},
		{"explicit egress only ignores ingress rules", "podSelector: {}\npolicyTypes: [Egress]\ningress: [{}]\negress: [{}]", []networkingv1.PolicyType{"Egress"}, 0, 1},
		{"explicit order normalised", "podSelector: {}\npolicyTypes: [Egress, Ingress]", []networkingv1.PolicyType{"Ingress", "Egress"}, 0, 0},
		{"no rules isolates ingress", "podSelector: {}", []networkingv1.PolicyType{"Ingress"}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mustSet(t, inv, pol(t, "eu-1", "shop", "p", tc.spec))
			np := Translate("eu-1", inv)[0]
			require.Equal(t, tc.wantTypes, np.Spec.PolicyTypes)
			require.Len(t, np.Spec.Ingress, tc.wantIngress)
			require.Len(t, np.Spec.Egress, tc.wantEgress)
		})
	}
}

func TestPortsPassThrough(t *testing.T) {
	inv := base(t)
	inv.SetPod("us-1", pod("shop", "a", nil, "10.3.0.1"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {}
ingress:
- from: [{clusterSelector: {}}, {ipBlock: {cidr: 172.17.0.0/16, except: [172.17.1.0/24]}}]
  ports:
  - {port: http}
  - {port: 1000, endPort: 2000, protocol: UDP}
  - {port: 3868, protocol: SCTP}
  - {protocol: UDP}
egress:
- to: [{ipBlock: {cidr: "2001:db8::/32"}}]
  ports: [{port: 443}]`))
	np := Translate("eu-1", inv)[0]
	in := np.Spec.Ingress[0]
	require.Equal(t, []networkingv1.NetworkPolicyPeer{
		{PodSelector: &metav1.LabelSelector{}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "172.17.0.0/16", Except: []string{"172.17.1.0/24"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.3.0.1/32"}},
	}, in.From)
	udp, sctp := corev1.ProtocolUDP, corev1.ProtocolSCTP
	http, p1000, p3868 := intstr.FromString("http"), intstr.FromInt32(1000), intstr.FromInt32(3868)
	end := int32(2000)
	require.Equal(t, []networkingv1.NetworkPolicyPort{
		{Port: &http}, // ingress named port: destination is local, CNI resolves it
		{Protocol: &udp, Port: &p1000, EndPort: &end},
		{Protocol: &sctp, Port: &p3868},
		{Protocol: &udp},
	}, in.Ports)
	require.Equal(t, "2001:db8::/32", np.Spec.Egress[0].To[0].IPBlock.CIDR)
}

func TestEgressNamedPortExpansion(t *testing.T) {
	inv := base(t)
	tcpPorts := func(name string, port int32) []Port { return []Port{{Name: name, Port: port}} }
	p1 := pod("shop", "api-a", l("app", "api"), "10.2.0.1")
	p1.Ports = tcpPorts("http", 8080)
	p2 := pod("shop", "api-b", l("app", "api"), "10.3.0.1")
	p2.Ports = tcpPorts("http", 9090)
	p3 := pod("shop", "api-c", l("app", "api"), "10.3.0.2")
	p3.Ports = tcpPorts("http", 8080)
	p4 := pod("shop", "no-http", l("app", "api"), "10.3.0.3")
	p4.Ports = tcpPorts("metrics", 9100)
	p5 := pod("shop", "udp-http", l("app", "api"), "10.3.0.4")
	p5.Ports = []Port{{Name: "http", Port: 7070, Protocol: corev1.ProtocolUDP}}
	for c, p := range map[string]Pod{"eu-2": p1, "us-1": p2} {
		inv.SetPod(c, p)
	}
	inv.SetPod("us-1", p3)
	inv.SetPod("us-1", p4)
	inv.SetPod("us-1", p5)
	local := pod("shop", "api-local", l("app", "api"), "10.1.0.1")
	local.Ports = tcpPorts("http", 1111)
	inv.SetPod("eu-1", local)

	t.Run("named only", func(t *testing.T) {
		mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {matchLabels: {app: fe}}
egress:
- to: [{clusterSelector: {}, podSelector: {matchLabels: {app: api}}}]
  ports: [{port: http}]`))
		eg := Translate("eu-1", inv)[0].Spec.Egress
		tcp := corev1.ProtocolTCP
		http, p8080, p9090 := intstr.FromString("http"), intstr.FromInt32(8080), intstr.FromInt32(9090)
		require.Len(t, eg, 3)
		// Local peers stay native with the named port (local CNI resolves it).
		require.Equal(t, []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: l("app", "api")}}}, eg[0].To)
		require.Equal(t, []networkingv1.NetworkPolicyPort{{Port: &http}}, eg[0].Ports)
		// Remote pods grouped by their resolved numeric ports; pods without
		// a TCP port named http are left out (never widen to all ports).
		require.Equal(t, []string{"10.2.0.1/32", "10.3.0.2/32"}, cidrs(eg[1].To))
		require.Equal(t, []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p8080}}, eg[1].Ports)
		require.Equal(t, []string{"10.3.0.1/32"}, cidrs(eg[2].To))
		require.Equal(t, []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p9090}}, eg[2].Ports)
	})
	t.Run("named plus numeric, protocol-aware", func(t *testing.T) {
		mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {}
egress:
- to: [{clusterSelector: {matchLabels: {region: us}}, podSelector: {matchLabels: {app: api}}}]
  ports: [{port: http, protocol: UDP}, {port: 53, protocol: UDP}]`))
		eg := Translate("eu-1", inv)[0].Spec.Egress
		udp := corev1.ProtocolUDP
		p53, p7070 := intstr.FromInt32(53), intstr.FromInt32(7070)
		require.Len(t, eg, 2)
		require.Equal(t, []string{"10.3.0.1/32", "10.3.0.2/32", "10.3.0.3/32"}, cidrs(eg[0].To))
		require.Equal(t, []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &p53}}, eg[0].Ports)
		require.Equal(t, []string{"10.3.0.4/32"}, cidrs(eg[1].To))
		require.Equal(t, []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &p53}, {Protocol: &udp, Port: &p7070}}, eg[1].Ports)
	})
	t.Run("no matching named port anywhere drops the rule", func(t *testing.T) {
		mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {}
egress:
- to: [{clusterSelector: {matchLabels: {region: us}}}]
  ports: [{port: grpc}]`))
		np := Translate("eu-1", inv)[0]
		require.Empty(t, np.Spec.Egress)
		require.Equal(t, []networkingv1.PolicyType{"Ingress", "Egress"}, np.Spec.PolicyTypes)
	})
}

func TestSplitting(t *testing.T) {
	inv := base(t)
	const n = 2500
	for i := 0; i < n; i++ {
		inv.SetPod("us-1", pod("shop", fmt.Sprintf("p%04d", i), l("app", "x"), fmt.Sprintf("10.3.%d.%d", i/250, i%250+1)))
	}
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", `
podSelector: {matchLabels: {app: db}}
ingress:
- from: [{clusterSelector: {}}]
  ports: [{port: 5432}]
egress:
- to: [{clusterSelector: {}}]`))
	res := Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "p"})
	nps := res.NetworkPolicies
	require.Equal(t, n, res.RemotePeers)
	require.Equal(t, 5, len(nps)) // 2×2500 ipBlocks (+ 2 native peers), 1000 per part
	names := map[string]bool{}
	seenIn, seenEg := map[string]int{}, map[string]int{}
	for i, np := range nps {
		require.Equal(t, l("app", "db"), np.Spec.PodSelector.MatchLabels)
		require.Equal(t, []networkingv1.PolicyType{"Ingress", "Egress"}, np.Spec.PolicyTypes)
		require.Equal(t, fmt.Sprintf("%d/5", i+1), np.Annotations[AnnotationPart])
		names[np.Name] = true
		blocks := 0
		for _, r := range np.Spec.Ingress {
			require.NotEmpty(t, r.From)
			require.Equal(t, int32(5432), r.Ports[0].Port.IntVal)
			for _, c := range cidrs(r.From) {
				seenIn[c]++
				blocks++
			}
		}
		for _, r := range np.Spec.Egress {
			require.NotEmpty(t, r.To)
			for _, c := range cidrs(r.To) {
				seenEg[c]++
				blocks++
			}
		}
		require.LessOrEqual(t, blocks, MaxIPBlocks)
		require.Empty(t, validation.IsDNS1123Subdomain(np.Name))
	}
	require.Len(t, names, 5)
	require.Len(t, seenIn, n)
	require.Len(t, seenEg, n)
	for _, c := range seenIn {
		require.Equal(t, 1, c)
	}
	require.Equal(t, GeneratedName("eu-1", "p", 0), nps[0].Name)
	require.True(t, strings.HasPrefix(nps[0].Name, "mcnp-eu-1.p-"), nps[0].Name)
}

func TestSplittingBySize(t *testing.T) {
	inv := base(t)
	// 640 ipBlocks with 64 excepts each (the CRD's limit): ~1.3 KB each,
	// ~800 KB in total.
	var b strings.Builder
	b.WriteString("podSelector: {}\ningress:\n")
	for r := 0; r < 32; r++ {
		b.WriteString("- from:\n")
		for i := 0; i < 20; i++ {
			n := r*20 + i
			fmt.Fprintf(&b, "  - ipBlock:\n      cidr: 10.%d.%d.0/24\n      except:\n", n/256, n%256)
			for j := 0; j < 64; j++ {
				fmt.Fprintf(&b, "      - 10.%d.%d.%d/32\n", n/256, n%256, j)
			}
		}
	}
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", b.String()))
	nps := Translate("eu-1", inv)
	require.Greater(t, len(nps), 1)
	total := 0
	for _, np := range nps {
		b, err := json.Marshal(&np)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), MaxPolicyBytes)
		for _, r := range np.Spec.Ingress {
			total += len(r.From)
		}
	}
	require.Equal(t, 640, total, "every ipBlock lands in exactly one part")
}

func TestDeterminism(t *testing.T) {
	build := func(reverse bool) *Inventory {
		inv := NewInventory()
		inv.SetNetworks(nets(t, "a=10.97.0.0/16", "a=fd00::61:0/112", "b=10.98.0.0/16", "b=fd00::62:0/112", "c=10.99.0.0/16", "c=fd00::63:0/112"))
		clusters := []string{"a", "b", "c"}
		if reverse {
			clusters = []string{"c", "b", "a"}
		}
		for _, c := range clusters {
			inv.SetCluster(Cluster{ID: c, Labels: l("env", "prod")})
			inv.SetNamespace(c, Namespace{Name: "ns"})
			for i := 0; i < 50; i++ {
				j := i
				if reverse {
					j = 49 - i
				}
				p := pod("ns", fmt.Sprintf("p%d", j), l("app", fmt.Sprint(j%3)), fmt.Sprintf("10.%d.0.%d", c[0], j+1), fmt.Sprintf("fd00::%x:%x", c[0], j+1))
				p.Ports = []Port{{Name: "web", Port: 8000 + int32(j%4)}}
				inv.SetPod(c, p)
			}
		}
		for i := 0; i < 5; i++ {
			j := i
			if reverse {
				j = 4 - i
			}
			mustSet(t, inv, pol(t, []string{"a", "b", "c"}[j%3], "ns", fmt.Sprintf("pol-%d", j), `
clusterSelector: {}
podSelector: {matchLabels: {app: "0"}}
ingress: [{from: [{clusterSelector: {}, podSelector: {matchLabels: {app: "1"}}}]}]
egress: [{to: [{clusterSelector: {matchLabels: {env: prod}}}], ports: [{port: web}, {port: 53, protocol: UDP}]}]`))
		}
		return inv
	}
	a := toYAML(t, Translate("b", build(false)))
	for i := 0; i < 3; i++ {
		require.Equal(t, a, toYAML(t, Translate("b", build(i%2 == 0))))
	}
	require.Contains(t, a, "fd00::63:1/128")
}

func TestMetadata(t *testing.T) {
	inv := base(t)
	long := strings.Repeat("a", 200) + "." + strings.Repeat("b", 52)
	mustSet(t, inv, pol(t, "eu-1", "shop", long, "podSelector: {}"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "short", "podSelector: {}"))
	nps := Translate("eu-1", inv)
	require.Len(t, nps, 2)
	for _, np := range nps {
		require.Empty(t, validation.IsDNS1123Subdomain(np.Name), np.Name)
		require.Equal(t, "shop", np.Namespace)
		require.Equal(t, "coastguard", np.Labels[LabelManagedBy])
		require.Equal(t, "eu-1", np.Labels[LabelOriginCluster])
		require.Equal(t, "shop", np.Labels[LabelOriginNamespace])
		for k, v := range np.Labels {
			require.Empty(t, validation.IsValidLabelValue(v), k)
		}
		require.Equal(t, ContentHash(&np), np.Annotations[AnnotationContentHash])
	}
	require.Equal(t, "eu-1/shop/"+long, nps[0].Annotations[AnnotationOrigin])
	require.Len(t, nps[0].Labels[LabelOriginName], 63)
	require.Equal(t, GeneratedName("eu-1", "short", 0), nps[1].Name)
	require.Equal(t, "short", nps[1].Labels[LabelOriginName])
	require.NotEqual(t, GeneratedName("eu-1", long, 0), GeneratedName("eu-1", long+"c", 0))
	require.NotEqual(t, GeneratedName("a-b", "c", 0), GeneratedName("a", "b-c", 0))

	// The content hash follows the content.
	h1 := nps[1].Annotations[AnnotationContentHash]
	mustSet(t, inv, pol(t, "eu-1", "shop", "short", "podSelector: {matchLabels: {a: b}}"))
	require.NotEqual(t, h1, Translate("eu-1", inv)[1].Annotations[AnnotationContentHash])
}

func TestInvalidPolicyFailsClosed(t *testing.T) {
	inv := base(t)
	inv.SetPod("us-1", pod("shop", "a", nil, "10.3.0.1"))
	// Invalid only inside a peer (bad CIDR, which the apiserver cannot
	// check): the selected pods are isolated, no rule is emitted.
	err := inv.SetPolicy(pol(t, "eu-1", "shop", "bad", `
clusterSelector: {matchLabels: {region: eu}}
podSelector: {matchLabels: {app: db}}
ingress: [{from: [{clusterSelector: {}}, {ipBlock: {cidr: 10.0.0.0/99}}]}]
egress: [{}]`))
	require.ErrorContains(t, err, "spec.ingress[0].from[1].ipBlock.cidr")
	ref := PolicyRef{"eu-1", "shop", "bad"}
	for _, c := range []string{"eu-1", "eu-2"} {
		res := Evaluate(c, inv, ref)
		require.True(t, res.Selected)
		require.Contains(t, res.Error, "must be a valid CIDR")
		require.Len(t, res.NetworkPolicies, 1)
		np := res.NetworkPolicies[0]
		require.Equal(t, l("app", "db"), np.Spec.PodSelector.MatchLabels)
		require.Equal(t, []networkingv1.PolicyType{"Ingress", "Egress"}, np.Spec.PolicyTypes)
		require.Nil(t, np.Spec.Ingress)
		require.Nil(t, np.Spec.Egress)
	}
	require.False(t, Evaluate("us-1", inv, ref).Selected)
	require.Empty(t, Translate("us-1", inv))

	// An unusable podSelector: nothing can be enforced; the error is reported.
	err = inv.SetPolicy(pol(t, "eu-1", "shop", "bad", "podSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}"))
	require.Error(t, err)
	res := Evaluate("eu-1", inv, ref)
	require.NotEmpty(t, res.Error)
	require.False(t, res.Selected)
	require.Empty(t, res.NetworkPolicies)

	// Empty peer (the CRD rejects it; a peer might still send one).
	err = inv.SetPolicy(pol(t, "eu-1", "shop", "bad", "podSelector: {}\ningress: [{from: [{}]}]"))
	require.ErrorContains(t, err, "spec.ingress[0].from[0]")
	res = Evaluate("eu-1", inv, ref)
	require.Contains(t, res.Error, "at least one")
	require.Len(t, res.NetworkPolicies, 1)
	require.Nil(t, res.NetworkPolicies[0].Spec.Ingress)
	require.Error(t, inv.SetPolicy(Policy{Origin: "eu-1", Name: "x"}))
}

func TestInventoryRemovals(t *testing.T) {
	inv := base(t)
	inv.SetPod("us-1", pod("shop", "a", nil, "10.3.0.1"))
	inv.SetPod("us-1", pod("shop", "b", nil, "10.3.0.2"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", "podSelector: {}\ningress: [{from: [{clusterSelector: {}}]}]"))
	mustSet(t, inv, pol(t, "us-1", "shop", "q", "clusterSelector: {}\npodSelector: {}"))
	require.Equal(t, []string{"10.3.0.1/32", "10.3.0.2/32"}, cidrs(Translate("eu-1", inv)[0].Spec.Ingress[0].From))
	inv.RemovePod("us-1", "shop", "a")
	require.Equal(t, []string{"10.3.0.2/32"}, cidrs(Translate("eu-1", inv)[0].Spec.Ingress[0].From))
	require.Len(t, Translate("eu-1", inv), 2)
	inv.RemoveCluster("us-1")
	require.Equal(t, []string{"eu-1", "eu-2"}, inv.Clusters())
	nps := Translate("eu-1", inv)
	require.Len(t, nps, 1, "policies originated by a removed cluster go with it")
	require.Len(t, nps[0].Spec.Ingress[0].From, 1) // only the native peer
	inv.RemovePolicy(PolicyRef{"eu-1", "shop", "p"})
	require.Empty(t, Translate("eu-1", inv))
}
