package enforce

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"
)

// gnSvcInv is svcInv with eu-2 under Globalnet: global CIDR
// 242.2.0.0/16 (gossiped and trusted), and shop/db allocated the global
// ingress IP 242.2.0.9.
func gnSvcInv(t testing.TB) *Inventory {
	inv := svcInv(t)
	inv.SetCluster(Cluster{ID: "eu-2", Globalnet: true, GlobalCIDRs: []string{"242.2.0.0/16"}})
	inv.SetNetworks(nets(t, "eu-1=10.1.0.0/16", "eu-1:service=10.96.0.0/16",
		"eu-2=10.2.0.0/16", "eu-2:service=10.97.0.0/16", "eu-2:global=242.2.0.0/16"))
	setDB(inv, "242.2.0.9")
	return inv
}

func setDB(inv *Inventory, globalIPs ...string) {
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"}, GlobalIPs: globalIPs,
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPortName: "pg"}}})
}

// Under Globalnet the Service is reached by its global ingress IP: that
// address, never the ClusterIP, on the service port, by the same
// exactness rule; and it is exact, so --globalnet-policy=drop (which
// leaves out the coarse global CIDR) still renders it.
func TestServiceGlobalIPRenderedInsteadOfClusterIP(t *testing.T) {
	inv := gnSvcInv(t)
	res := evalWeb(t, inv, "{role: db}", "[{port: pg}]")
	require.Equal(t, []string{"242.2.0.0/16 TCP:5432", "242.2.0.9/32 TCP:15432"}, addressRules(res))
	require.Equal(t, ReasonGlobalnetCoarseIdentity, res.Degraded, "the pods themselves are still coarse")

	inv.SetGlobalnetPolicy(GlobalnetDrop)
	res = evalWeb(t, inv, "{role: db}", "[{port: pg}]")
	require.Equal(t, []string{"242.2.0.9/32 TCP:15432"}, addressRules(res), "the global IP is exact: kept when coarse peers are dropped")
	require.Equal(t, ReasonGlobalnetPeersDropped, res.Degraded)
	require.Equal(t, 1, res.RemotePeers)

	// a second backend the rule does not admit: no global IP (fail closed)
	replica := pod("shop", "db-1", l("role", "db", "tier", "replica"), "10.2.0.11")
	replica.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", replica)
	res = evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Empty(t, addressRules(res))
	require.Contains(t, strings.Join(res.DegradedDetails, ";"), ReasonServicePartiallyAdmitted+": eu-2/shop/db")
}

// Ownership: a global IP outside eu-2's global CIDR as eu-1 knows it
// independently of gossip (another range, eu-1's own pod CIDR, a claimed
// range, or no trusted global CIDR at all) is never rendered, and the
// MCNP names the Service; the ClusterIP is no fallback.
func TestServiceGlobalIPOwnership(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ips    []string
		nets   []string
		reason string
	}{
		{"outside the global CIDR", []string{"242.3.0.9"}, nil, reasonServiceGlobalIPNotOwned},
		{"eu-1's own pod range", []string{"10.1.0.10"}, nil, reasonServiceGlobalIPNotOwned},
		{"link-local", []string{"169.254.169.254"}, nil, reasonServiceGlobalIPNotOwned},
		{"a range, not an address", []string{"242.2.0.0/16"}, nil, reasonServiceNoGlobalIP},
		{"no trusted global CIDR", []string{"242.2.0.9"}, []string{"eu-1=10.1.0.0/16", "eu-2=10.2.0.0/16", "eu-2:service=10.97.0.0/16"}, reasonServiceGlobalIPNotOwned},
		{"not allocated yet", nil, nil, reasonServiceNoGlobalIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := gnSvcInv(t)
			inv.SetGlobalnetPolicy(GlobalnetDrop)
			if tc.nets != nil {
				inv.SetNetworks(nets(t, tc.nets...))
			}
			setDB(inv, tc.ips...)
			res := evalWeb(t, inv, "{role: db}", "[{port: pg}]")
			require.Empty(t, addressRules(res), "nothing of eu-2 is rendered")
			require.Contains(t, strings.Join(res.DegradedDetails, ";"), tc.reason+": eu-2/shop/db")
		})
	}
	gl := &ClusterNetworks{GlobalCIDRs: []netip.Prefix{netip.MustParsePrefix("242.2.0.0/16")}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/16")}}
	require.Equal(t, DropNone, checkServiceGlobalAddr(nil, gl, netip.MustParsePrefix("242.2.0.9/32")))
	require.Equal(t, DropOutsideCIDRs, checkServiceGlobalAddr(nil, gl, netip.MustParsePrefix("10.97.0.20/32")), "a service CIDR does not vouch for a global IP")
	require.Equal(t, DropCIDRsUnknown, checkServiceGlobalAddr(nil, &ClusterNetworks{ServiceCIDRs: gl.ServiceCIDRs}, netip.MustParsePrefix("242.2.0.9/32")))
	local := &ClusterNetworks{GlobalCIDRs: []netip.Prefix{netip.MustParsePrefix("242.2.0.0/24")}}
	require.Equal(t, DropLocalCIDR, checkServiceGlobalAddr(local, gl, netip.MustParsePrefix("242.2.0.9/32")))
}

// A service peer naming a Globalnet cluster's export is admitted by the
// export's global IP; a non-Globalnet cluster's by its ClusterIP.
func TestServicePeerGlobalIP(t *testing.T) {
	inv := svcPeerInv(t)
	inv.SetCluster(Cluster{ID: "eu-2", Labels: l("region", "eu"), Globalnet: true, GlobalCIDRs: []string{"242.2.0.0/16"}})
	inv.SetNetworks(nets(t, "eu-1=10.1.0.0/16", "eu-1:service=10.96.0.0/16", "eu-2=10.2.0.0/16", "eu-2:service=10.97.0.0/16",
		"eu-2:global=242.2.0.0/16", "eu-3=10.3.0.0/16", "eu-3:service=10.98.0.0/16"))
	setDB(inv, "242.2.0.9")
	inv.SetGlobalnetPolicy(GlobalnetDrop)
	res := evalServicePeer(t, inv, "{name: db, clusterSelector: {}}", "[{port: pg}]")
	require.Equal(t, []string{"10.3.0.10/32 TCP:5432", "10.98.0.20/32 TCP:15432", "242.2.0.9/32 TCP:15432"}, addressRules(res))
}

// Readiness: kube-proxy sends service traffic only to ready endpoints, so
// a not-ready backend does not block the address (it receives none of
// it) and cannot admit it either (a Service whose only admitted backends
// are not ready gets no address rule). Its pod IP stays a peer.
// publishNotReadyAddresses makes every selected pod an endpoint again.
func TestServiceAddressReadiness(t *testing.T) {
	inv := svcInv(t)
	replica := pod("shop", "db-1", l("role", "db", "tier", "replica"), "10.2.0.11")
	replica.Ports = []Port{{Name: "pg", Port: 5432}}
	replica.NotReady = true
	inv.SetPod("eu-2", replica)
	res := evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.97.0.20/32 TCP:15432"}, addressRules(res), "the not-ready replica is no endpoint")
	require.Empty(t, res.Degraded)
	ref := PolicyRef{Origin: "eu-1", Namespace: "shop", Name: "web"}
	require.Equal(t, []PolicyRef{ref}, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-2", Namespace: "shop",
		Labels: []labels.Labels{labels.Set(replica.Labels)}}), "the replica turning ready recomputes the policy")

	// the replica turns ready: partial, fail closed
	replica.NotReady = false
	inv.SetPod("eu-2", replica)
	res = evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(res))
	require.Equal(t, ReasonServicePartiallyAdmitted, res.Degraded)

	// only the not-ready replica is admitted: its pod IP, no address
	replica.NotReady = true
	inv.SetPod("eu-2", replica)
	res = evalWeb(t, inv, "{tier: replica}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.11/32 TCP:5432"}, addressRules(res))
	require.Empty(t, res.Degraded)

	// publishNotReadyAddresses: the replica is an endpoint again
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"}, PublishNotReady: true,
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 15432, TargetPortName: "pg"}}})
	res = evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(res))
	require.Equal(t, ReasonServicePartiallyAdmitted, res.Degraded)
}
