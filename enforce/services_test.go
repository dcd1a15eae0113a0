package enforce

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// svcInv: eu-1 (enforcing) and eu-2 with distinct pod and service CIDRs,
// namespace shop in both, web-0 in eu-1 and db-0 (role=db, pg=5432) in
// eu-2 behind the exported Service shop/db (10.97.0.20:15432 -> pg).
func svcInv(t testing.TB) *Inventory {
	inv := NewInventory()
	inv.SetCluster(Cluster{ID: "eu-1"})
	inv.SetCluster(Cluster{ID: "eu-2"})
	for _, c := range []string{"eu-1", "eu-2"} {
		inv.SetNamespace(c, Namespace{Name: "shop"})
	}
	inv.SetNetworks(nets(t, "eu-1=10.1.0.0/16", "eu-1:service=10.96.0.0/16", "eu-2=10.2.0.0/16", "eu-2:service=10.97.0.0/16"))
	inv.SetPod("eu-1", pod("shop", "web-0", l("app", "web"), "10.1.0.10"))
	db := pod("shop", "db-0", l("role", "db", "tier", "primary"), "10.2.0.10")
	db.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", db)
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"},
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPortName: "pg"}}})
	return inv
}

const webEgress = `
podSelector: {matchLabels: {app: web}}
policyTypes: [Egress]
egress:
- to:
  - clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-2}}
    podSelector: {matchLabels: %s}
  ports: %s
`

// addressRules lists "cidr proto:port" of every egress ipBlock rule.
func addressRules(res Result) []string {
	var out []string
	for _, np := range res.NetworkPolicies {
		for _, r := range np.Spec.Egress {
			for _, c := range cidrs(r.To) {
				if len(r.Ports) == 0 {
					out = append(out, c+" all")
				}
				for _, p := range r.Ports {
					proto := corev1.ProtocolTCP
					if p.Protocol != nil {
						proto = *p.Protocol
					}
					out = append(out, fmt.Sprintf("%s %s:%s", c, proto, p.Port.String()))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func evalWeb(t *testing.T, inv *Inventory, sel, ports string) Result {
	t.Helper()
	mustSet(t, inv, pol(t, "eu-1", "shop", "web", fmt.Sprintf(webEgress, sel, ports)))
	return Evaluate("eu-1", inv, PolicyRef{Origin: "eu-1", Namespace: "shop", Name: "web"})
}

func TestServiceAddressAllBackendsAdmitted(t *testing.T) {
	inv := svcInv(t)
	res := evalWeb(t, inv, "{role: db}", "[{port: pg}]")
	require.Empty(t, res.Degraded)
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))
	require.Equal(t, 2, res.RemotePeers)

	// numeric rule port, named targetPort: the same
	res = evalWeb(t, inv, "{role: db}", "[{port: 5432}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))

	// a rule port that is not the target port: neither
	res = evalWeb(t, inv, "{role: db}", "[{port: 15432}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:15432"}, addressRules(res), "the service port is not the backend's port")
	require.Empty(t, res.Degraded)

	// numeric targetPort and two ports of which the rule admits one
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"}, Selector: l("role", "db"),
		Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPort: 5432}, {Name: "admin", Port: 15440, TargetPort: 5440}}})
	res = evalWeb(t, inv, "{role: db}", "[{port: 5432}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))
	res = evalWeb(t, inv, "{role: db}", "[{port: 5400, endPort: 5450}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5400", "10.97.0.20/32 TCP:15432", "10.97.0.20/32 TCP:15440"}, addressRules(res))
	// all ports
	res = evalWeb(t, inv, "{role: db}", "[]")
	require.Contains(t, addressRules(res), "10.97.0.20/32 TCP:15440")
}

func TestServiceAddressPartialBackendsFailsClosed(t *testing.T) {
	inv := svcInv(t)
	replica := pod("shop", "db-1", l("role", "db", "tier", "replica"), "10.2.0.11")
	replica.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", replica)
	res := evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(res), "no address rule: kube-proxy in eu-2 may pick db-1")
	require.Equal(t, ReasonServicePartiallyAdmitted, res.Degraded)
	require.Len(t, res.DegradedDetails, 1)
	require.Contains(t, res.DegradedDetails[0], "eu-2/shop/db")

	// relabelling the replica makes every backend admitted
	inv.SetPod("eu-2", pod("shop", "db-1", l("role", "db", "tier", "primary"), "10.2.0.11"))
	// ...but without the pg port it serves nothing of this Service
	res = evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Empty(t, res.Degraded)
	require.Contains(t, addressRules(res), "10.97.0.20/32 TCP:15432")

	// a hostNetwork backend is never an admitted pod
	hn := pod("shop", "db-2", l("role", "db", "tier", "primary"), "192.168.0.5")
	hn.HostNetwork = true
	hn.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", hn)
	res = evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Equal(t, ReasonServicePartiallyAdmitted, res.Degraded)
	require.NotContains(t, addressRules(res), "10.97.0.20/32 TCP:15432")
}

func TestServiceAddressOwnership(t *testing.T) {
	inv := svcInv(t)
	// a ClusterIP outside eu-2's service CIDR (here: in eu-1's own)
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.96.0.1"},
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPortName: "pg"}}})
	res := evalWeb(t, inv, "{role: db}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(res))
	require.Equal(t, ReasonServiceIPNotOwned, res.Degraded)
	require.Contains(t, res.DegradedDetails[0], "eu-2/shop/db")

	require.Equal(t, DropOutsideCIDRs, CheckServiceAddr(nil, &ClusterNetworks{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/16")}}, netip.MustParsePrefix("10.2.0.1/32")))
	require.Equal(t, DropCIDRsUnknown, CheckServiceAddr(nil, &ClusterNetworks{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}}, netip.MustParsePrefix("10.2.0.1/32")),
		"pod CIDRs do not vouch for a Service address")

	// headless and selectorless Services have no address rule
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", Headless: true, Selector: l("role", "db"),
		Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPortName: "pg"}}})
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(evalWeb(t, inv, "{role: db}", "[{port: pg}]")))
	inv.RemoveService("eu-2", "shop", "db")
	res = evalWeb(t, inv, "{role: db}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(res))
	require.Empty(t, res.Degraded)
}

func TestServiceChangesAffectPolicies(t *testing.T) {
	inv := svcInv(t)
	evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	ref := PolicyRef{Origin: "eu-1", Namespace: "shop", Name: "web"}
	require.Equal(t, []PolicyRef{ref}, Affected("eu-1", inv, Change{Kind: ChangeService, Cluster: "eu-2", Namespace: "shop"}))
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangeService, Cluster: "eu-2", Namespace: "other"}))
	// a pod the policy does not select, but the Service does: affected
	require.Equal(t, []PolicyRef{ref}, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(l("role", "db", "tier", "replica"))}}))
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(l("role", "cache"))}}))
}

// The address rule never admits a flow the MCNP denies: over random
// backends (ready or not), selectors, ports, publishNotReadyAddresses
// and with or without Globalnet in the exporting cluster, every (ClusterIP, service port) the
// generated egress rules admit leads only to backends on target ports
// that the MCNP itself admits (an oracle reading the spec, not the
// translator); and when one rule admits every backend, the address is
// admitted (no needless fail-closed).
func TestServiceAddressNeverOverAllows(t *testing.T) {
	rng := rand.New(rand.NewSource(33))
	vals := []string{"a", "b"}
	var nAllowed, nPartial, nGlobal int
	for iter := 0; iter < 600; iter++ {
		inv := svcInv(t)
		inv.RemovePod("eu-2", "shop", "db-0")
		var backends []Pod
		for i := 0; i < 1+rng.Intn(4); i++ {
			p := pod("shop", fmt.Sprintf("p%d", i), l("role", "db", "x", vals[rng.Intn(2)]), fmt.Sprintf("10.2.0.%d", 10+i))
			if rng.Intn(2) == 0 {
				p.Ports = append(p.Ports, Port{Name: "pg", Port: int32(5432 + rng.Intn(2))})
			}
			p.HostNetwork = rng.Intn(10) == 0
			p.NotReady = rng.Intn(4) == 0
			inv.SetPod("eu-2", p)
			backends = append(backends, p)
		}
		sp := ServicePort{Name: "pg", Port: 15432}
		if rng.Intn(2) == 0 {
			sp.TargetPortName = "pg"
		} else {
			sp.TargetPort = int32(5432 + rng.Intn(2))
		}
		publish := rng.Intn(5) == 0
		// eu-2 with Globalnet: the Service is reached by its global IP
		gn := rng.Intn(3) == 0
		addr := "10.97.0.20/32 TCP:15432"
		if gn {
			inv.SetCluster(Cluster{ID: "eu-2", Globalnet: true, GlobalCIDRs: []string{"242.2.0.0/16"}})
			inv.SetNetworks(nets(t, "eu-1=10.1.0.0/16", "eu-1:service=10.96.0.0/16", "eu-2=10.2.0.0/16", "eu-2:service=10.97.0.0/16", "eu-2:global=242.2.0.0/16"))
			addr = "242.2.0.9/32 TCP:15432"
		}
		inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"}, GlobalIPs: []string{"242.2.0.9"},
			Selector: l("role", "db"), Ports: []ServicePort{sp}, PublishNotReady: publish})
		sels := []string{"{role: db}", "{x: a}", "{x: b}"}
		portsOpts := []string{"[{port: pg}]", "[{port: 5432}]", "[{port: 5433}]", "[{port: 5432, endPort: 5433}]", "[]", "[{protocol: UDP, port: 5432}]"}
		sel, ports := sels[rng.Intn(len(sels))], portsOpts[rng.Intn(len(portsOpts))]
		res := evalWeb(t, inv, sel, ports)
		spec := spec(t, fmt.Sprintf(webEgress, sel, ports))
		rule := spec.Egress[0]
		podSel := labels.SelectorFromSet(labels.Set(rule.To[0].PodSelector.MatchLabels))
		// oracle: (backend, target port) admitted by the MCNP text
		admits := func(b Pod, target int32) bool {
			if b.HostNetwork || !podSel.Matches(labels.Set(b.Labels)) {
				return false
			}
			if len(rule.Ports) == 0 {
				return true
			}
			for _, p := range rule.Ports {
				if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
					continue
				}
				if p.Port.StrVal != "" {
					for _, cp := range b.Ports {
						if cp.Name == p.Port.StrVal && cp.Port == target {
							return true
						}
					}
					continue
				}
				if target == p.Port.IntVal || (p.EndPort != nil && target >= p.Port.IntVal && target <= *p.EndPort) {
					return true
				}
			}
			return false
		}
		all, some := true, false
		n := 0
		for _, b := range backends {
			target, serves := sp.TargetPort, sp.TargetPort > 0
			if sp.TargetPortName != "" {
				serves = false
				for _, cp := range b.Ports {
					if cp.Name == sp.TargetPortName {
						target, serves = cp.Port, true
					}
				}
			}
			if !serves || (b.NotReady && !publish) {
				continue // kube-proxy never picks it
			}
			n++
			ok := admits(b, target)
			all, some = all && ok, some || ok
		}
		allowed := slices.Contains(addressRules(res), addr)
		msg := fmt.Sprintf("iter %d: backends %v service port %+v publishNotReady %v globalnet %v rule %s %s", iter, backends, sp, publish, gn, sel, ports)
		if gn {
			require.NotContains(t, addressRules(res), "10.97.0.20/32 TCP:15432", "a Globalnet cluster's ClusterIP is never rendered: %s", msg)
			if allowed {
				nGlobal++
			}
		}
		if allowed {
			nAllowed++
		}
		if n > 0 && some && !all {
			nPartial++
		}
		if allowed {
			require.True(t, n > 0 && all, "over-allow: %s", msg)
		}
		require.Equal(t, n > 0 && all, allowed, msg)
		require.Equal(t, n > 0 && some && !all, strings.Contains(strings.Join(res.DegradedDetails, ";"), "eu-2/shop/db"), msg)
	}
	require.Greater(t, nAllowed, 20, "the generator must exercise admitted addresses")
	require.Greater(t, nPartial, 20, "the generator must exercise partial admission")
	require.Greater(t, nGlobal, 10, "the generator must exercise admitted global IPs")
}
