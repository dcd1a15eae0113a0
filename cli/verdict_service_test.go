package cli

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// readyPod is a Ready pod serving the given container ports.
func readyPod(ns, name, ip string, l map[string]string, ports ...corev1.ContainerPort) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: ports}}},
		Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
}

func pg(port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: "pg", ContainerPort: port}
}

// svcWorld is two clusters: a/shop/api (10.1.0.1) is the client; b exports
// shop/db (ClusterIP 10.97.0.20, 15432 -> targetPort pg) backed by
// b/shop/db-0 and b/shop/db-1. mcnps are origin-a MCNPs (YAML specs by
// name); netpols are extra user NetworkPolicies per cluster.
type svcWorld struct {
	pods    map[string][]corev1.Pod
	svcs    map[string][]*corev1.Service
	mcnps   map[string]string
	netpols map[string][]networkingv1.NetworkPolicy
}

func newSvcWorld() *svcWorld {
	return &svcWorld{
		pods: map[string][]corev1.Pod{
			"a": {readyPod("shop", "api", "10.1.0.1", map[string]string{"role": "api"})},
			"b": {
				readyPod("shop", "db-0", "10.2.0.10", map[string]string{"role": "db", "tier": "primary"}, pg(5432)),
				readyPod("shop", "db-1", "10.2.0.11", map[string]string{"role": "db"}, pg(5432)),
			},
		},
		svcs: map[string][]*corev1.Service{"b": {{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.20", ClusterIPs: []string{"10.97.0.20"}, Selector: map[string]string{"role": "db"},
				Ports: []corev1.ServicePort{{Name: "pg", Port: 15432, TargetPort: intstr.FromString("pg"), Protocol: corev1.ProtocolTCP}}}}}},
		mcnps: map[string]string{
			// api may reach the db pods of every cluster on their pg port
			"api-egress": `
clusterSelector: {}
podSelector: {matchLabels: {role: api}}
policyTypes: [Egress]
egress:
- to: [{clusterSelector: {}, podSelector: {matchLabels: {role: db}}}]
  ports: [{port: pg}]
`,
			// db pods admit api pods of every cluster on 5432
			"db-ingress": `
clusterSelector: {}
podSelector: {matchLabels: {role: db}}
policyTypes: [Ingress]
ingress:
- from: [{clusterSelector: {}, podSelector: {matchLabels: {role: api}}}]
  ports: [{port: 5432}]
`,
		},
		netpols: map[string][]networkingv1.NetworkPolicy{},
	}
}

// live builds the CLI's live view as load does, and the generated
// NetworkPolicies as the daemons applied them.
func (w *svcWorld) live(t *testing.T) *live {
	t.Helper()
	l := &live{inv: enforce.NewInventory(), pods: map[string][]corev1.Pod{}, ns: map[string]map[string]map[string]string{},
		netpols: map[string][]networkingv1.NetworkPolicy{}, mcnps: map[string][]v1.MultiClusterNetworkPolicy{}, byIP: map[netip.Addr]string{}}
	nets, err := enforce.ParseClusterCIDRs([]string{"a=10.1.0.0/16", "b=10.2.0.0/16", "a:service=10.96.0.0/16", "b:service=10.97.0.0/16"})
	require.NoError(t, err)
	l.inv.SetNetworks(nets)
	for _, c := range []string{"a", "b"} {
		l.inv.SetCluster(enforce.Cluster{ID: c})
		l.ns[c] = map[string]map[string]string{"shop": nil}
		l.inv.SetNamespace(c, enforce.Namespace{Name: "shop"})
		l.pods[c] = w.pods[c]
		for i := range w.pods[c] {
			p := &w.pods[c][i]
			v, err := kube.PodToValue(p)
			require.NoError(t, err)
			ep := enforce.Pod{Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, IPs: v.IPs, Phase: p.Status.Phase, NotReady: v.NotReady}
			for _, port := range v.Ports {
				ep.Ports = append(ep.Ports, enforce.Port{Name: port.Name, Port: port.Port, Protocol: corev1.Protocol(port.Protocol)})
			}
			l.inv.SetPod(c, ep)
			l.byIP[netip.MustParseAddr(p.Status.PodIP)] = c + "/" + p.Namespace + "/" + p.Name
		}
		for _, s := range w.svcs[c] {
			v, err := kube.ServiceToValue(s)
			require.NoError(t, err)
			es := enforce.Service{Namespace: s.Namespace, Name: s.Name, ClusterIPs: v.ClusterIPs, Selector: v.Selector, Headless: v.Headless,
				PublishNotReady: v.PublishNotReady}
			for _, p := range v.Ports {
				es.Ports = append(es.Ports, enforce.ServicePort{Name: p.Name, Port: p.Port, TargetPort: p.TargetPort,
					TargetPortName: p.TargetPortName, Protocol: corev1.Protocol(p.Protocol)})
			}
			l.inv.SetService(c, es)
		}
		l.setServices(c, w.svcs[c])
	}
	for _, name := range slices.Sorted(maps.Keys(w.mcnps)) { // in name order: tests pick l.mcnps["a"][0]
		doc := w.mcnps[name]
		var spec v1.MultiClusterNetworkPolicySpec
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &spec), name)
		l.mcnps["a"] = append(l.mcnps["a"], v1.MultiClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: spec})
		require.NoError(t, l.inv.SetPolicy(enforce.Policy{Origin: "a", Namespace: "shop", Name: name, Spec: spec}))
	}
	for _, c := range []string{"a", "b"} {
		l.netpols[c] = append(enforce.Translate(c, l.inv), w.netpols[c]...)
	}
	return l
}

func denyIngress(sel map[string]string) networkingv1.NetworkPolicy {
	return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "deny-" + sel["name"]},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
}

var apiToDB = Endpoint{"b", "shop", "db"}

func TestParseTarget(t *testing.T) {
	tg, err := ParseTarget("b/shop/service/db")
	require.NoError(t, err)
	assert.Equal(t, Target{Endpoint: Endpoint{"b", "shop", "db"}, Service: true}, tg)
	tg, err = ParseTarget("b/shop/svc/db")
	require.NoError(t, err)
	assert.True(t, tg.Service)
	tg, err = ParseTarget("b/shop/db-0")
	require.NoError(t, err)
	assert.Equal(t, Target{Endpoint: Endpoint{"b", "shop", "db-0"}}, tg)
	for _, bad := range []string{"b/shop/service/", "b//service/db", "b/shop/pod/db", "b/shop"} {
		_, err := ParseTarget(bad)
		assert.Error(t, err, bad)
	}
}

// The MCNPs admit api to every db backend on pg: the translator adds the
// ClusterIP on the service port, and both backends admit api's pod IP.
func TestVerdictServiceAllowed(t *testing.T) {
	l := newSvcWorld().live(t)
	v, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.True(t, v.Allowed, "%+v", v)
	assert.Equal(t, ResultAllowed, v.Result)
	assert.Equal(t, "b/shop/service/db", v.To)
	assert.Equal(t, "10.97.0.20", v.Service.ClusterIP)
	assert.Equal(t, "pg", v.Service.TargetPort)
	assert.Equal(t, "ip 10.97.0.20", v.Egress.PeerAs)
	require.Len(t, v.Egress.Decisions, 1)
	assert.Equal(t, "a/shop/api-egress", v.Egress.Decisions[0].Origin)
	assert.True(t, v.Egress.Decisions[0].Allows)
	require.Len(t, v.Backends, 2)
	for _, b := range v.Backends {
		assert.True(t, b.Allowed, b.Pod)
		assert.Equal(t, "5432/TCP", b.Port)
		assert.Equal(t, "ip 10.1.0.1", b.Ingress.PeerAs)
		assert.Nil(t, b.Egress)
	}
	assert.True(t, v.Ingress.Allowed)
	assert.Empty(t, v.Reason)
	require.NoError(t, verdictExit(v, true))
	assert.Empty(t, v.Notes)

	// a port the Service does not have
	_, err = verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 5432, corev1.ProtocolTCP)
	require.ErrorContains(t, err, "has no port 5432/TCP (its ports: 15432/TCP)")
	// a Service that is not exported
	_, err = verdictService(l, Endpoint{"a", "shop", "api"}, Endpoint{"b", "shop", "cache"}, 15432, corev1.ProtocolTCP)
	require.ErrorContains(t, err, "service shop/cache is not exported from cluster b")
	require.ErrorContains(t, err, "exported in shop: db")
}

// The egress rule admits only the primary backend: no address rule (the
// exactness rule), so the egress denies the ClusterIP although it admits
// db-0 by pod IP, and the notes say why.
func TestVerdictServiceEgressDeniedNoAddressRule(t *testing.T) {
	w := newSvcWorld()
	w.mcnps["api-egress"] = strings.Replace(w.mcnps["api-egress"], "{role: db}", "{role: db, tier: primary}", 1)
	l := w.live(t)
	v, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.False(t, v.Allowed)
	assert.Equal(t, ResultDenied, v.Result)
	assert.False(t, v.Egress.Allowed)
	assert.True(t, v.Ingress.Allowed, "both backends admit api")
	assert.Contains(t, v.Reason, "the egress of a/shop/api denies the ClusterIP 10.97.0.20 on 15432/TCP")
	require.Len(t, v.Notes, 2, "%q", v.Notes)
	assert.Contains(t, v.Notes[0], "some backends by pod IP (b/shop/db-0 on 5432) but not others (b/shop/db-1 on 5432)")
	assert.Equal(t, "MCNP a/shop/api-egress is Degraded "+enforce.ReasonServicePartiallyAdmitted+" for b/shop/db: no address rule for its ClusterIP", v.Notes[1])
	assert.Equal(t, &ExitError{Code: ExitDenied}, verdictExit(v, true))

	var out strings.Builder
	printVerdict(&out, v)
	assert.Contains(t, out.String(), "a/shop/api -> service b/shop/db (ClusterIP 10.97.0.20) on 15432/TCP: DENIED")
	assert.Contains(t, out.String(), "\nnotes:\n")
}

// The ingress MCNP admits api on the primary backend only, and a user
// NetworkPolicy isolates db-1: the flow is PARTIAL (denied), and the
// verdict says which backend denies.
func TestVerdictServiceIngressDeniedOnOneBackend(t *testing.T) {
	w := newSvcWorld()
	w.mcnps["db-ingress"] = strings.Replace(w.mcnps["db-ingress"], "podSelector: {matchLabels: {role: db}}",
		"podSelector: {matchLabels: {role: db, tier: primary}}", 1)
	w.pods["b"][1].Labels["name"] = "db-1"
	w.netpols["b"] = []networkingv1.NetworkPolicy{denyIngress(map[string]string{"name": "db-1"})}
	l := w.live(t)
	v, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.False(t, v.Allowed)
	assert.Equal(t, ResultPartial, v.Result)
	assert.True(t, v.Egress.Allowed)
	assert.False(t, v.Ingress.Allowed)
	assert.Equal(t, "1 of 2 backends admit the flow: kube-proxy in b may pick any of them", v.Reason)
	require.Len(t, v.Backends, 2)
	assert.True(t, v.Backends[0].Allowed)
	assert.Equal(t, "b/shop/db-1", v.Backends[1].Pod)
	assert.False(t, v.Backends[1].Allowed)
	require.Len(t, v.Backends[1].Ingress.Decisions, 1)
	assert.Equal(t, "shop/deny-db-1", v.Backends[1].Ingress.Decisions[0].Policy)
	assert.False(t, v.Backends[1].Ingress.Decisions[0].Allows)
	assert.Equal(t, &ExitError{Code: ExitDenied}, verdictExit(v, true))
	var out strings.Builder
	printVerdict(&out, v)
	assert.Contains(t, out.String(), ": PARTIAL\n")
	assert.Contains(t, out.String(), "ingress in b, backend b/shop/db-1 10.2.0.11 on 5432/TCP (peer seen as ip 10.1.0.1): DENIED")
}

// A named targetPort resolves per backend: db-1 serves pg on 6432, which
// the ingress MCNP (5432 only) does not admit; db-2 has no pg port and is
// not an endpoint.
func TestVerdictServiceNamedTargetPort(t *testing.T) {
	w := newSvcWorld()
	w.pods["b"][1] = readyPod("shop", "db-1", "10.2.0.11", map[string]string{"role": "db"}, pg(6432))
	w.pods["b"] = append(w.pods["b"], readyPod("shop", "db-2", "10.2.0.12", map[string]string{"role": "db"},
		corev1.ContainerPort{Name: "http", ContainerPort: 8080}))
	l := w.live(t)
	v, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	require.Len(t, v.Backends, 2)
	assert.Equal(t, "5432/TCP", v.Backends[0].Port)
	assert.Equal(t, "6432/TCP", v.Backends[1].Port)
	assert.True(t, v.Backends[0].Allowed)
	assert.False(t, v.Backends[1].Allowed)
	assert.Equal(t, ResultPartial, v.Result)
	assert.True(t, v.Egress.Allowed, "the egress admits pg on every backend: the address rule exists")
	require.Len(t, v.Excluded, 1)
	assert.Contains(t, v.Excluded[0], `b/shop/db-2: has no container port named "pg"`)

	// with the ingress on the named port, both backends admit
	w.mcnps["db-ingress"] = strings.Replace(w.mcnps["db-ingress"], "port: 5432", "port: pg", 1)
	l = w.live(t)
	v, err = verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.True(t, v.Allowed, "%+v", v)
}

// A Service without a ready backend: denied, nothing answers; a pod that is
// not Ready is listed as excluded.
func TestVerdictServiceNoBackends(t *testing.T) {
	w := newSvcWorld()
	w.pods["b"] = w.pods["b"][:1]
	w.pods["b"][0].Status.Conditions[0].Status = corev1.ConditionFalse
	l := w.live(t)
	v, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.False(t, v.Allowed)
	assert.Equal(t, ResultDenied, v.Result)
	assert.Empty(t, v.Backends)
	assert.Equal(t, "b/shop/service/db has no ready backend serving 15432/TCP (selector role=db): nothing answers the ClusterIP", v.Reason)
	assert.Equal(t, []string{"b/shop/db-0: not Ready: not an endpoint, receives no service traffic"}, v.Excluded)
	assert.False(t, v.Ingress.Allowed)
}

// A headless Service has no ClusterIP: the verdict says so and points to
// the per-pod verdicts.
func TestVerdictServiceHeadless(t *testing.T) {
	w := newSvcWorld()
	w.svcs["b"][0].Spec.ClusterIP = corev1.ClusterIPNone
	w.svcs["b"][0].Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	l := w.live(t)
	_, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.ErrorContains(t, err, "b/shop/service/db is headless: it has no ClusterIP")
	require.ErrorContains(t, err, "kubectl coastguard verdict --from a/shop/api --to b/shop/db-0 --port 5432/TCP")
	require.ErrorContains(t, err, "kubectl coastguard verdict --from a/shop/api --to b/shop/db-1 --port 5432/TCP")
}

// In the Service's own cluster kube-proxy translates the ClusterIP before
// the NetworkPolicies see the packet: both ends are evaluated per backend.
func TestVerdictServiceSameCluster(t *testing.T) {
	w := newSvcWorld()
	w.pods["b"] = append(w.pods["b"], readyPod("shop", "api", "10.2.0.1", map[string]string{"role": "api"}))
	l := w.live(t)
	v, err := verdictService(l, Endpoint{"b", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.True(t, v.Allowed, "%+v", v)
	require.Len(t, v.Backends, 2)
	for _, b := range v.Backends {
		require.NotNil(t, b.Egress)
		assert.True(t, b.Egress.Allowed)
		assert.Equal(t, "pod", b.Ingress.PeerAs)
	}
}

// explain shows the ClusterIP rule among the peers and the exactness
// decision; what-if shows it for a candidate that admits only the
// primary backend (no address rule, Degraded naming the Service).
func TestExplainAndWhatIfShowServiceAddresses(t *testing.T) {
	l := newSvcWorld().live(t)
	ex, err := explain(l, "shop", "api-egress")
	require.NoError(t, err)
	var a *ClusterExplanation
	for i := range ex.Clusters {
		if ex.Clusters[i].Cluster == "a" {
			a = &ex.Clusters[i]
		}
	}
	require.NotNil(t, a)
	var svcRules []string
	for _, p := range a.Peers {
		svcRules = append(svcRules, p.Services...)
		assert.NotContains(t, p.Other, "ipBlock 10.97.0.20/32")
	}
	assert.Equal(t, []string{"service b/shop/db ClusterIP 10.97.0.20"}, svcRules)
	require.Len(t, a.Services, 1)
	sa := a.Services[0]
	assert.Equal(t, "b/shop/db", sa.Service)
	assert.True(t, sa.Admitted)
	require.Len(t, sa.Rules, 1)
	assert.Contains(t, sa.Rules[0], "on 15432/TCP")
	assert.Equal(t, []string{"b/shop/db-0", "b/shop/db-1"}, sa.AdmittedBackends)
	assert.Contains(t, sa.Decision, "address admitted")
	var out strings.Builder
	printExplanation(&out, ex, false)
	assert.Contains(t, out.String(), "admits: service b/shop/db ClusterIP 10.97.0.20")
	assert.Contains(t, out.String(), "service b/shop/db (10.97.0.20): address admitted by ")

	cand := l.mcnps["a"][0].DeepCopy()
	require.Equal(t, "api-egress", cand.Name)
	cand.Spec.Egress[0].To[0].PodSelector.MatchLabels["tier"] = "primary"
	wi := whatIf(l, "a", cand)
	require.Equal(t, "a", wi.Clusters[0].Cluster)
	d := wi.Clusters[0]
	assert.Equal(t, enforce.ReasonServicePartiallyAdmitted, d.Degraded)
	require.Len(t, d.Services, 1)
	assert.False(t, d.Services[0].Admitted)
	assert.Equal(t, []string{"b/shop/db-0"}, d.Services[0].AdmittedBackends)
	assert.Contains(t, d.Services[0].Decision, "Degraded "+enforce.ReasonServicePartiallyAdmitted)
	assert.Contains(t, d.Services[0].Decision, "not admitted by pod IP: b/shop/db-1")
	assert.Contains(t, d.Diff, "10.97.0.20/32", "the address rule is removed")
	out.Reset()
	printWhatIf(&out, wi)
	assert.Contains(t, out.String(), "service b/shop/db (10.97.0.20): address NOT admitted; 1 of 2 backend(s) admitted by pod IP")
	assert.Contains(t, out.String(), "degraded: "+enforce.ReasonServicePartiallyAdmitted)
}

// conflicts reports the service flows one side admits and the other denies.
func TestConflictsServiceFlows(t *testing.T) {
	// everything admitted: no half-open service flow
	hs, err := newSvcWorld().live(t).serviceConflicts()
	require.NoError(t, err)
	assert.Empty(t, hs)

	// a user egress policy admits b's pod CIDR but not its service CIDR
	w := newSvcWorld()
	delete(w.mcnps, "api-egress")
	w.netpols["a"] = []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "to-b-pods"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "api"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.2.0.0/16"}}}}}}}}
	hs, err = w.live(t).serviceConflicts()
	require.NoError(t, err)
	require.Len(t, hs, 1, "%+v", hs)
	assert.Equal(t, ServiceHalfOpen{Kind: ServiceIngressAllowedAddressDenied, From: "a/shop", Service: "b/shop/db", ClusterIP: "10.97.0.20",
		Port: "15432/TCP", Flows: 1, Example: "a/shop/api", PodPathOpen: true,
		AllowedBy: []string{"mcnp a/shop/db-ingress"}, DeniedBy: []string{"np shop/to-b-pods"}}, hs[0])

	// the address is admitted, but db-1's ingress denies
	w = newSvcWorld()
	w.mcnps["db-ingress"] = strings.Replace(w.mcnps["db-ingress"], "podSelector: {matchLabels: {role: db}}",
		"podSelector: {matchLabels: {role: db, tier: primary}}", 1)
	w.pods["b"][1].Labels["name"] = "db-1"
	w.netpols["b"] = []networkingv1.NetworkPolicy{denyIngress(map[string]string{"name": "db-1"})}
	l := w.live(t)
	hs, err = l.serviceConflicts()
	require.NoError(t, err)
	require.Len(t, hs, 1, "%+v", hs)
	assert.Equal(t, ServiceAddressAllowedIngressDenied, hs[0].Kind)
	assert.Equal(t, []string{"b/shop/db-1"}, hs[0].DeniedAt)
	assert.Equal(t, []string{"mcnp a/shop/api-egress"}, hs[0].AllowedBy)
	assert.Equal(t, []string{"np shop/deny-db-1"}, hs[0].DeniedBy)

	var out strings.Builder
	printConflicts(&out, ConflictsReport{ServiceHalfOpen: hs})
	assert.Contains(t, out.String(), "a/shop -> service b/shop/db (10.97.0.20) on 15432/TCP: 1 flow(s), address-allowed-ingress-denied")
	assert.Contains(t, out.String(), "denied at backends: b/shop/db-1")
}

// Under Globalnet the verdict says what it does not model.
func TestVerdictServiceGlobalnetNote(t *testing.T) {
	l := newSvcWorld().live(t)
	nets, err := enforce.ParseClusterCIDRs([]string{"a=10.1.0.0/16", "b=10.2.0.0/16", "a:service=10.96.0.0/16", "b:service=10.97.0.0/16",
		"b:global=242.2.0.0/16"})
	require.NoError(t, err)
	l.inv.SetNetworks(nets)
	v, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	require.Len(t, v.Notes, 1)
	assert.Contains(t, v.Notes[0], "cluster b uses Globalnet (global CIDR 242.2.0.0/16)")
}

// A ClusterIP outside b's service CIDR as a knows it is never rendered: the
// verdict denies the ClusterIP and names the Degraded reason, although the
// egress admits every backend by pod IP.
func TestVerdictServiceAddressNotOwned(t *testing.T) {
	w := newSvcWorld()
	w.svcs["b"][0].Spec.ClusterIP = "10.250.0.20"
	w.svcs["b"][0].Spec.ClusterIPs = []string{"10.250.0.20"}
	l := w.live(t)
	v, err := verdictService(l, Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.False(t, v.Egress.Allowed)
	require.Len(t, v.Notes, 2, "%q", v.Notes)
	assert.Contains(t, v.Notes[0], "the egress admits every backend by its pod IP on its target port, but not the ClusterIP: a client that dials db.shop.svc.clusterset.local is denied")
	assert.Equal(t, "MCNP a/shop/api-egress is Degraded "+enforce.ReasonServiceIPNotOwned+" for b/shop/db: no address rule for its ClusterIP", v.Notes[1])

	ex, err := explain(l, "shop", "api-egress")
	require.NoError(t, err)
	require.Equal(t, "a", ex.Clusters[0].Cluster)
	require.Len(t, ex.Clusters[0].Services, 1)
	sa := ex.Clusters[0].Services[0]
	assert.False(t, sa.Admitted)
	assert.Len(t, sa.AdmittedBackends, 2)
	assert.Contains(t, sa.Decision, "Degraded "+enforce.ReasonServiceIPNotOwned)
}

// Readiness: the egress MCNP admits only db-0; db-1 is not Ready, so it
// is no endpoint, the address rule exists and the verdict is ALLOWED with
// db-1 listed as excluded. With publishNotReadyAddresses db-1 is an
// endpoint again: no address rule, and the verdict says the egress
// denies the ClusterIP.
func TestVerdictServiceNotReadyBackend(t *testing.T) {
	w := newSvcWorld()
	w.mcnps["api-egress"] = strings.Replace(w.mcnps["api-egress"], "{role: db}", "{tier: primary}", 1)
	w.pods["b"][1].Status.Conditions[0].Status = corev1.ConditionFalse
	v, err := verdictService(w.live(t), Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.True(t, v.Allowed, "%+v", v)
	assert.Equal(t, []string{"b/shop/db-1: not Ready: not an endpoint, receives no service traffic"}, v.Excluded)
	require.Len(t, v.Backends, 1)

	w.svcs["b"][0].Spec.PublishNotReadyAddresses = true
	v, err = verdictService(w.live(t), Endpoint{"a", "shop", "api"}, apiToDB, 15432, corev1.ProtocolTCP)
	require.NoError(t, err)
	assert.False(t, v.Allowed)
	assert.Len(t, v.Backends, 2, "published while not ready: an endpoint")
	assert.Equal(t, "the egress of a/shop/api denies the ClusterIP 10.97.0.20 on 15432/TCP", v.Reason)
}
