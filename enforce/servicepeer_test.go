package enforce

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// svcPeerInv is svcInv plus eu-3 (region=us), which exports its own
// shop/db (backend 10.3.0.10, ClusterIP 10.98.0.20), and a pod in eu-2
// that carries role=db's neighbour label but backs nothing.
func svcPeerInv(t testing.TB) *Inventory {
	inv := svcInv(t)
	inv.SetCluster(Cluster{ID: "eu-1", Labels: l("region", "eu")})
	inv.SetCluster(Cluster{ID: "eu-2", Labels: l("region", "eu")})
	inv.SetCluster(Cluster{ID: "eu-3", Labels: l("region", "us")})
	inv.SetNamespace("eu-3", Namespace{Name: "shop"})
	inv.SetNetworks(nets(t, "eu-1=10.1.0.0/16", "eu-1:service=10.96.0.0/16", "eu-2=10.2.0.0/16", "eu-2:service=10.97.0.0/16",
		"eu-3=10.3.0.0/16", "eu-3:service=10.98.0.0/16"))
	db := pod("shop", "db-0", l("role", "db"), "10.3.0.10")
	db.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-3", db)
	inv.SetService("eu-3", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.98.0.20"},
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPortName: "pg"}}})
	inv.SetPod("eu-2", pod("shop", "cache-0", l("role", "cache"), "10.2.0.30"))
	return inv
}

var webRef = PolicyRef{Origin: "eu-1", Namespace: "shop", Name: "web"}

const webServiceEgress = `
podSelector: {matchLabels: {app: web}}
policyTypes: [Egress]
egress:
- to:
  - service: %s
  ports: %s
`

func evalServicePeer(t *testing.T, inv *Inventory, svc, ports string) Result {
	t.Helper()
	mustSet(t, inv, pol(t, "eu-1", "shop", "web", fmt.Sprintf(webServiceEgress, svc, ports)))
	return Evaluate("eu-1", inv, webRef)
}

func TestServicePeerEgressSelectedClusters(t *testing.T) {
	inv := svcPeerInv(t)
	// every cluster: both exports, their backends and their ClusterIPs
	res := evalServicePeer(t, inv, "{name: db, clusterSelector: {}}", "[{port: pg}]")
	require.Empty(t, res.Degraded, res.DegradedDetails)
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.3.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432", "10.98.0.20/32 TCP:15432"}, addressRules(res))
	require.Equal(t, 4, res.RemotePeers)
	for _, np := range res.NetworkPolicies {
		for _, r := range np.Spec.Egress {
			require.Empty(t, natives(r.To), "eu-1 does not export shop/db: no local peer")
		}
	}

	// a clusterSelector that picks eu-3 only
	res = evalServicePeer(t, inv, "{name: db, clusterSelector: {matchLabels: {region: us}}}", "[{port: 5432}]")
	require.Equal(t, []string{"10.3.0.10/32 TCP:5432", "10.98.0.20/32 TCP:15432"}, addressRules(res))

	// the namespace spelled out is the same Service
	res = evalServicePeer(t, inv, "{name: db, namespace: shop, clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-2}}}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))

	// no ports: every port of the backends, and every service port
	res = evalServicePeer(t, inv, "{name: db, clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-2}}}", "[]")
	require.Equal(t, []string{"10.2.0.10/32 all", "10.97.0.20/32 TCP:15432"}, addressRules(res))

	// a rule port that is no backend's port: the backends on that port,
	// but no address (the Service does not forward to it)
	res = evalServicePeer(t, inv, "{name: db, clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-2}}}", "[{port: 15432}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:15432"}, addressRules(res))
	require.Empty(t, res.Degraded)
}

func TestServicePeerIngress(t *testing.T) {
	inv := svcPeerInv(t)
	mustSet(t, inv, pol(t, "eu-1", "shop", "web", `
podSelector: {matchLabels: {app: web}}
ingress:
- from:
  - service: {name: db, clusterSelector: {}}
  ports: [{port: 8080}]
`))
	res := Evaluate("eu-1", inv, webRef)
	require.Empty(t, res.Degraded)
	require.Equal(t, []string{"10.2.0.10/32", "10.3.0.10/32"}, ingressCIDRs(t, res), "backends' pod IPs only: a ClusterIP is never a source")
	require.Equal(t, 2, res.RemotePeers)
	require.Equal(t, int32(8080), res.NetworkPolicies[0].Spec.Ingress[0].Ports[0].Port.IntVal)
}

func TestServicePeerBackendsFollowEndpoints(t *testing.T) {
	inv := svcPeerInv(t)
	svc := "{name: db, clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-2}}}"
	res := evalServicePeer(t, inv, svc, "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))

	// a new backend: rendered, and the address still exact
	db1 := pod("shop", "db-1", l("role", "db"), "10.2.0.11")
	db1.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", db1)
	require.Equal(t, []PolicyRef{webRef}, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(db1.Labels)}}))
	res = Evaluate("eu-1", inv, webRef)
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.2.0.11/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))

	// a pod no Service selects does not affect the policy
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(l("role", "cache"))}}))
	// nor does a pod of another cluster or namespace
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-3", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(l("role", "db"))}}))
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "other"}))

	// relabelled out of the Service: gone
	inv.SetPod("eu-2", pod("shop", "db-1", l("role", "olddb"), "10.2.0.11"))
	res = Evaluate("eu-1", inv, webRef)
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))

	// a backend that cannot be a peer (hostNetwork) is not rendered, and
	// makes the address inexact: no address rule, Degraded
	hn := pod("shop", "db-2", l("role", "db"), "192.168.0.5")
	hn.HostNetwork = true
	hn.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", hn)
	res = Evaluate("eu-1", inv, webRef)
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(res))
	require.Equal(t, ReasonServicePartiallyAdmitted, res.Degraded)
	inv.RemovePod("eu-2", "shop", "db-2")

	// the Service's selector changes: its backends with it
	require.Equal(t, []PolicyRef{webRef}, Affected("eu-1", inv, Change{Kind: ChangeService, Cluster: "eu-2", Namespace: "shop"}))
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"},
		Selector: l("role", "cache"), Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPort: 6379}}})
	res = Evaluate("eu-1", inv, webRef)
	require.Empty(t, addressRules(res), "cache-0 has no port named pg")
	res = evalServicePeer(t, inv, svc, "[{port: 5432}]")
	require.Equal(t, []string{"10.2.0.30/32 TCP:5432"}, addressRules(res), "the Service forwards to 6379, not 5432: no address")
	res = evalServicePeer(t, inv, svc, "[{port: 6379}]")
	require.Equal(t, []string{"10.2.0.30/32 TCP:6379", "10.97.0.20/32 TCP:15432"}, addressRules(res))

	// the export withdrawn: nothing, and Degraded
	inv.RemoveService("eu-2", "shop", "db")
	require.Equal(t, []PolicyRef{webRef}, Affected("eu-1", inv, Change{Kind: ChangeService, Cluster: "eu-2", Namespace: "shop"}))
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangeService, Cluster: "eu-3", Namespace: "shop"}), "eu-3 is not selected")
	res = Evaluate("eu-1", inv, webRef)
	require.Empty(t, addressRules(res))
	require.Equal(t, ReasonServicePeerNotExported, res.Degraded)
}

func TestServicePeerUnknownFailsClosed(t *testing.T) {
	inv := svcPeerInv(t)
	for _, svc := range []string{
		"{name: nope, clusterSelector: {}}",
		"{name: db, namespace: other, clusterSelector: {}}",
		"{name: db, clusterSelector: {matchLabels: {region: ap}}}",
		"{name: db}", // the enforcing cluster only, which does not export it
	} {
		res := evalServicePeer(t, inv, svc, "[{port: pg}]")
		require.Empty(t, addressRules(res), svc)
		require.Len(t, res.NetworkPolicies, 1, svc)
		np := res.NetworkPolicies[0]
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes, svc)
		require.Empty(t, np.Spec.Egress, "%s: the rule selects nothing and is dropped (never widen)", svc)
		require.Equal(t, ReasonServicePeerNotExported, res.Degraded, svc)
		require.Len(t, res.DegradedDetails, 1)
		require.True(t, strings.HasPrefix(res.DegradedDetails[0], ReasonServicePeerNotExported+": "), res.DegradedDetails[0])
	}
	res := evalServicePeer(t, inv, "{name: nope, clusterSelector: {}}", "[{port: pg}]")
	require.Contains(t, res.DegradedDetails[0], "shop/nope")

	// pods that a Service would select are no peers while it is not exported
	inv.RemoveService("eu-2", "shop", "db")
	inv.RemoveService("eu-3", "shop", "db")
	res = evalServicePeer(t, inv, "{name: db, clusterSelector: {}}", "[]")
	require.Empty(t, addressRules(res))
	require.Equal(t, ReasonServicePeerNotExported, res.Degraded)

	// exported without a selector: its backends are unknown
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"},
		Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPort: 5432}}})
	res = evalServicePeer(t, inv, "{name: db, clusterSelector: {}}", "[]")
	require.Empty(t, addressRules(res))
	require.Equal(t, ReasonServicePeerNoSelector, res.Degraded)
	require.Contains(t, res.DegradedDetails[0], "eu-2/shop/db")

	// a sibling peer still admits what it selects
	mustSet(t, inv, pol(t, "eu-1", "shop", "web", `
podSelector: {matchLabels: {app: web}}
policyTypes: [Egress]
egress:
- to:
  - service: {name: nope, clusterSelector: {}}
  - clusterSelector: {}
    podSelector: {matchLabels: {role: cache}}
`))
	res = Evaluate("eu-1", inv, webRef)
	require.Equal(t, []string{"10.2.0.30/32 all"}, addressRules(res))
	require.Equal(t, ReasonServicePeerNotExported, res.Degraded)
}

func TestServicePeerLocalIsNative(t *testing.T) {
	inv := svcPeerInv(t)
	inv.SetPod("eu-1", pod("shop", "api-0", l("app", "api", "v", "2"), "10.1.0.20"))
	inv.SetService("eu-1", Service{Namespace: "shop", Name: "api", ClusterIPs: []string{"10.96.0.30"},
		Selector: l("app", "api"), Ports: []ServicePort{{Name: "http", Port: 80, TargetPort: 8080}}})
	inv.SetNamespace("eu-1", Namespace{Name: "other"})
	inv.SetService("eu-1", Service{Namespace: "other", Name: "api", ClusterIPs: []string{"10.96.0.31"},
		Selector: l("app", "api2"), Ports: []ServicePort{{Name: "http", Port: 80, TargetPort: 8080}}})

	res := evalServicePeer(t, inv, "{name: api}", "[{port: 8080}]")
	require.Empty(t, res.Degraded)
	require.Len(t, res.NetworkPolicies[0].Spec.Egress, 1)
	to := res.NetworkPolicies[0].Spec.Egress[0].To
	require.Equal(t, []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: l("app", "api")}}}, to,
		"the local Service's selector, natively: no pod IPs, no ClusterIP")
	require.Zero(t, res.RemotePeers)

	res = evalServicePeer(t, inv, "{name: api, namespace: other}", "[{port: 8080}]")
	require.Equal(t, []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: l(NamespaceNameLabel, "other")},
		PodSelector:       &metav1.LabelSelector{MatchLabels: l("app", "api2")},
	}}, res.NetworkPolicies[0].Spec.Egress[0].To)

	// local and remote together; the local selector change affects the policy
	res = evalServicePeer(t, inv, "{name: api, clusterSelector: {}}", "[{port: 8080}]")
	require.Len(t, natives(res.NetworkPolicies[0].Spec.Egress[0].To), 1)
	require.Equal(t, []PolicyRef{webRef}, Affected("eu-1", inv, Change{Kind: ChangeService, Cluster: "eu-1", Namespace: "shop"}))
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-1", Namespace: "shop"}), "local pods are native")
	inv.SetService("eu-1", Service{Namespace: "shop", Name: "api", ClusterIPs: []string{"10.96.0.30"},
		Selector: l("app", "api", "v", "2"), Ports: []ServicePort{{Name: "http", Port: 80, TargetPort: 8080}}})
	res = Evaluate("eu-1", inv, webRef)
	require.Equal(t, l("app", "api", "v", "2"), res.NetworkPolicies[0].Spec.Egress[0].To[0].PodSelector.MatchLabels)

	// evaluated in eu-2, the same peer is eu-1's backends by address (eu-2
	// has no export of shop/api)
	mustSet(t, inv, pol(t, "eu-1", "shop", "web", "clusterSelector: {}\n"+fmt.Sprintf(webServiceEgress, "{name: api, clusterSelector: {}}", "[{port: 8080}]")))
	res = Evaluate("eu-2", inv, webRef)
	require.Equal(t, []string{"10.1.0.20/32 TCP:8080", "10.96.0.30/32 TCP:80"}, addressRules(res))
}

// A service peer and a pod peer naming the same backends render them once;
// translation is deterministic whatever the order of inventory updates.
func TestServicePeerDeterministic(t *testing.T) {
	build := func(reverse bool) string {
		inv := NewInventory()
		steps := []func(){
			func() { inv.SetCluster(Cluster{ID: "eu-1"}) },
			func() { inv.SetCluster(Cluster{ID: "eu-2"}) },
			func() { inv.SetNamespace("eu-1", Namespace{Name: "shop"}) },
			func() { inv.SetNamespace("eu-2", Namespace{Name: "shop"}) },
			func() {
				inv.SetNetworks(nets(t, "eu-1=10.1.0.0/16", "eu-1:service=10.96.0.0/16", "eu-2=10.2.0.0/16", "eu-2:service=10.97.0.0/16"))
			},
		}
		for i := 0; i < 20; i++ {
			steps = append(steps, func() {
				p := pod("shop", fmt.Sprintf("db-%d", i), l("role", "db"), fmt.Sprintf("10.2.0.%d", 100-i))
				p.Ports = []Port{{Name: "pg", Port: 5432}}
				inv.SetPod("eu-2", p)
			})
		}
		for i, name := range []string{"db", "db-ro", "db-rw"} {
			steps = append(steps, func() {
				inv.SetService("eu-2", Service{Namespace: "shop", Name: name, ClusterIPs: []string{fmt.Sprintf("10.97.0.%d", 2+i)},
					Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPortName: "pg"}}})
			})
		}
		steps = append(steps, func() {
			mustSet(t, inv, pol(t, "eu-1", "shop", "web", `
podSelector: {}
egress:
- to:
  - service: {name: db-rw, clusterSelector: {}}
  - service: {name: db, clusterSelector: {}}
  - clusterSelector: {}
    podSelector: {matchLabels: {role: db}}
  ports: [{port: pg}]
ingress:
- from: [{service: {name: db, clusterSelector: {}}}]
`))
		})
		if reverse {
			for i, j := 0, len(steps)-1; i < j; i, j = i+1, j-1 {
				steps[i], steps[j] = steps[j], steps[i]
			}
			// the clusters and networks first either way
			steps = append(steps[len(steps)-5:], steps[:len(steps)-5]...)
		}
		for _, s := range steps {
			s()
		}
		return toYAML(t, Translate("eu-1", inv))
	}
	a := build(false)
	require.Equal(t, a, build(true))
	require.Equal(t, 20, strings.Count(a, "10.2.0.")/2, "20 backends, once per direction")
	for _, ip := range []string{"10.97.0.2/32", "10.97.0.3/32", "10.97.0.4/32"} {
		require.Contains(t, a, ip, "every Service of the admitted backends gets its address")
	}
}

// A daemon that predates service peers decodes `service` as an unknown
// field and sees an empty peer: the policy is invalid there and isolates
// (fails closed) instead of meaning "every pod of the namespace".
func TestServicePeerUnknownToOlderDaemonsFailsClosed(t *testing.T) {
	s := spec(t, fmt.Sprintf(webServiceEgress, "{name: db, clusterSelector: {}}", "[{port: pg}]"))
	b, err := json.Marshal(s)
	require.NoError(t, err)
	// The peer type before service peers existed.
	type oldPeer struct {
		ClusterSelector   *metav1.LabelSelector  `json:"clusterSelector,omitempty"`
		NamespaceSelector *metav1.LabelSelector  `json:"namespaceSelector,omitempty"`
		PodSelector       *metav1.LabelSelector  `json:"podSelector,omitempty"`
		IPBlock           *networkingv1.IPBlock  `json:"ipBlock,omitempty"`
		Rest              map[string]interface{} `json:"-"`
	}
	var old struct {
		Egress []struct {
			To []oldPeer `json:"to"`
		} `json:"egress"`
	}
	require.NoError(t, json.Unmarshal(b, &old))
	ob, err := json.Marshal(old.Egress[0].To[0])
	require.NoError(t, err)
	require.Equal(t, "{}", string(ob), "an older decoder keeps nothing of a service peer")
	var stripped apiv1.MultiClusterNetworkPolicySpec
	require.NoError(t, json.Unmarshal(b, &stripped))
	stripped.Egress[0].To[0] = apiv1.MultiClusterNetworkPolicyPeer{}
	inv := svcPeerInv(t)
	require.Error(t, inv.SetPolicy(Policy{Origin: "eu-1", Namespace: "shop", Name: "web", Spec: stripped}))
	res := Evaluate("eu-1", inv, webRef)
	require.NotEmpty(t, res.Error)
	require.Len(t, res.NetworkPolicies, 1)
	require.Empty(t, res.NetworkPolicies[0].Spec.Egress, "isolation only")
}

// A service peer selects what the equivalent selector peer (the Service's
// namespace by name, its selector as podSelector, the same clusters)
// selects, when every selected cluster exports the Service: the same
// remote addresses on the same ports, ClusterIPs included, in every
// enforcing cluster (the inventories of the service benchmarks, small).
func TestServicePeerEqualsSelectorPeer(t *testing.T) {
	flat := func(inv *Inventory, c string) []string {
		var out []string
		for _, np := range Translate(c, inv) {
			for i, r := range np.Spec.Ingress {
				for _, p := range r.From {
					if p.IPBlock != nil {
						out = append(out, fmt.Sprintf("%s in%d %s %s", np.Name, i, p.IPBlock.CIDR, portsKey(r.Ports)))
					} else {
						out = append(out, fmt.Sprintf("%s in%d native", np.Name, i))
					}
				}
			}
			for i, r := range np.Spec.Egress {
				for _, p := range r.To {
					if p.IPBlock != nil {
						out = append(out, fmt.Sprintf("%s eg%d %s %s", np.Name, i, p.IPBlock.CIDR, portsKey(r.Ports)))
					} else {
						out = append(out, fmt.Sprintf("%s eg%d native", np.Name, i))
					}
				}
			}
		}
		return out
	}
	svc := benchServiceInventory(t, 4, 60, 3, 6, 24, true)
	sel := benchServiceInventory(t, 4, 60, 3, 6, 24, false)
	blocks := 0
	for _, c := range svc.Clusters() {
		a, b := flat(svc, c), flat(sel, c)
		require.Equal(t, b, a, c)
		blocks += len(a)
		require.True(t, strings.Contains(strings.Join(a, "\n"), " 10.10"), "%s: other clusters' ClusterIPs are rendered", c)
	}
	require.Greater(t, blocks, 1000)
}

// Another Service that shares a backend with the named one gets its
// address while the rule admits all of its backends; a pod that joins only
// that other Service withdraws it, and Affected reports the policy for
// that pod although the named Service does not select it. A pod of a
// Service that cannot share a backend with the named one does not.
func TestServicePeerSharedBackendAffects(t *testing.T) {
	inv := svcInv(t)
	inv.SetPod("eu-2", func() Pod {
		p := pod("shop", "db-0", l("role", "db", "tier", "x"), "10.2.0.10")
		p.Ports = []Port{{Name: "pg", Port: 5432}}
		return p
	}())
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "all-x", ClusterIPs: []string{"10.97.0.30"},
		Selector: l("tier", "x"), Ports: []ServicePort{{Name: "pg", Port: 25432, TargetPort: 5432}}})
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "cache", ClusterIPs: []string{"10.97.0.40"},
		Selector: l("role", "cache"), Ports: []ServicePort{{Name: "redis", Port: 6379, TargetPort: 6379}}})
	res := evalServicePeer(t, inv, "{name: db, clusterSelector: {}}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432", "10.97.0.30/32 TCP:25432"}, addressRules(res))

	other := pod("shop", "other-0", l("tier", "x", "role", "batch"), "10.2.0.50")
	other.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", other)
	require.Equal(t, []PolicyRef{webRef}, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(other.Labels)}}), "other-0 joins all-x, which shares db-0 with db")
	res = Evaluate("eu-1", inv, webRef)
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res))
	require.Equal(t, ReasonServicePartiallyAdmitted, res.Degraded)
	require.Contains(t, res.DegradedDetails[0], "eu-2/shop/all-x")

	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(l("role", "cache"))}}), "cache cannot share a backend with db")
}
