package enforce

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func pfx(s string) netip.Prefix {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p
	}
	a := netip.MustParseAddr(s).Unmap()
	return netip.PrefixFrom(a, a.BitLen())
}

func TestCheckRemoteAddr(t *testing.T) {
	local := &ClusterNetworks{PodCIDRs: []netip.Prefix{pfx("10.1.0.0/16"), pfx("fd01::/64")},
		ServiceCIDRs: []netip.Prefix{pfx("100.64.0.0/16")}, GlobalCIDRs: []netip.Prefix{pfx("242.1.0.0/16")}}
	eu2 := &ClusterNetworks{PodCIDRs: []netip.Prefix{pfx("10.2.0.0/16"), pfx("fd02::/64")}, GlobalCIDRs: []netip.Prefix{pfx("242.2.0.0/16")}}
	wide := &ClusterNetworks{PodCIDRs: []netip.Prefix{pfx("0.0.0.0/0"), pfx("::/0")}, GlobalCIDRs: []netip.Prefix{pfx("0.0.0.0/0")}}
	for _, tc := range []struct {
		name   string
		local  *ClusterNetworks
		owner  *ClusterNetworks
		global bool
		addr   string
		want   DropReason
	}{
		{"inside owner", local, eu2, false, "10.2.1.10", DropNone},
		{"inside owner v6", local, eu2, false, "fd02::10", DropNone},
		{"no local knowledge still checks owner", nil, eu2, false, "10.2.1.10", DropNone},
		{"owner unknown", local, nil, false, "10.2.1.10", DropCIDRsUnknown},
		{"owner without pod CIDRs", local, &ClusterNetworks{GlobalCIDRs: eu2.GlobalCIDRs}, false, "10.2.1.10", DropCIDRsUnknown},
		{"owner without global CIDRs (Globalnet)", local, &ClusterNetworks{PodCIDRs: eu2.PodCIDRs}, true, "242.2.0.1", DropCIDRsUnknown},
		{"another cluster's pod IP", local, eu2, false, "10.3.1.10", DropOutsideCIDRs},
		{"local pod IP outside owner", local, eu2, false, "10.1.0.5", DropOutsideCIDRs},
		{"wrong family", local, &ClusterNetworks{PodCIDRs: []netip.Prefix{pfx("10.2.0.0/16")}}, false, "fd02::1", DropOutsideCIDRs},
		{"metadata service", local, eu2, false, "169.254.169.254", DropReserved},
		{"loopback", local, eu2, false, "127.0.0.1", DropReserved},
		{"loopback v6", local, eu2, false, "::1", DropReserved},
		{"unspecified", local, eu2, false, "0.0.0.0", DropReserved},
		{"unspecified v6", local, eu2, false, "::", DropReserved},
		{"link-local v6", local, eu2, false, "fe80::1", DropReserved},
		{"multicast", local, eu2, false, "224.0.0.251", DropReserved},
		{"multicast v6", local, eu2, false, "ff02::1", DropReserved},
		{"v4-mapped prefix", local, wide, false, "::ffff:10.2.0.0/120", DropReserved},
		{"owner claims everything: reserved still dropped", local, wide, false, "169.254.169.254", DropReserved},
		{"owner claims everything: local pod IP dropped", local, wide, false, "10.1.0.5", DropLocalCIDR},
		{"owner claims everything: local service IP dropped", local, wide, false, "100.64.0.10", DropLocalCIDR},
		{"owner claims everything: local global IP dropped", local, wide, true, "242.1.0.3", DropLocalCIDR},
		{"owner claims everything: other IP allowed", local, wide, false, "10.3.1.10", DropNone},
		{"global egress IP", local, eu2, true, "242.2.0.1", DropNone},
		{"global egress IP outside", local, eu2, true, "242.3.0.1", DropOutsideCIDRs},
		{"pod CIDR is not a global range", local, eu2, true, "10.2.0.1", DropOutsideCIDRs},
		{"global CIDR itself", local, eu2, true, "242.2.0.0/16", DropNone},
		{"wider than the global CIDR", local, eu2, true, "242.0.0.0/8", DropOutsideCIDRs},
		{"everything", local, wide, true, "0.0.0.0/0", DropReserved},
		{"invalid", local, eu2, false, "", DropOutsideCIDRs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p netip.Prefix
			if tc.addr != "" {
				p = pfx(tc.addr)
			}
			require.Equal(t, tc.want, CheckRemoteAddr(tc.local, tc.owner, tc.global, p))
		})
	}
}

func TestParseClusterCIDRs(t *testing.T) {
	n, err := ParseClusterCIDRs([]string{"eu-2=10.2.0.0/16", " eu-2:pod=fd02::/64", "eu-2:service=100.2.0.0/16",
		"eu-3:global=242.3.0.0/16", "eu-2=10.2.0.0/16", ""})
	require.NoError(t, err)
	require.Equal(t, Networks{
		"eu-2": {PodCIDRs: []netip.Prefix{pfx("10.2.0.0/16"), pfx("fd02::/64")}, ServiceCIDRs: []netip.Prefix{pfx("100.2.0.0/16")}, Sources: []string{"config"}},
		"eu-3": {GlobalCIDRs: []netip.Prefix{pfx("242.3.0.0/16")}, Sources: []string{"config"}},
	}, n)

	_, err = ParseClusterCIDRs([]string{"eu-2", "EU=10.0.0.0/8", "eu-2=10.2.1.5/16", "eu-2:nodes=10.0.0.0/8", "eu-2=::ffff:10.0.0.0/104", "eu-2=banana"})
	require.Error(t, err)
	for _, want := range []string{`"eu-2": want`, `cluster ID "EU"`, "host bits set (the network is 10.2.0.0/16)",
		`unknown range "nodes"`, "IPv4-mapped", `"banana" is not a CIDR`} {
		require.ErrorContains(t, err, want)
	}
}

func TestMergeNetworks(t *testing.T) {
	sub := Networks{"eu-2": {PodCIDRs: []netip.Prefix{pfx("10.2.0.0/16")}, Sources: []string{"submariner"}}}
	cfg := Networks{"eu-2": {PodCIDRs: []netip.Prefix{pfx("10.2.0.0/16"), pfx("10.20.0.0/16")}, Sources: []string{"config"}},
		"us-1": {PodCIDRs: []netip.Prefix{pfx("10.3.0.0/16")}, Sources: []string{"config"}}}
	m := MergeNetworks(sub, cfg)
	require.Equal(t, []netip.Prefix{pfx("10.2.0.0/16"), pfx("10.20.0.0/16")}, m["eu-2"].PodCIDRs)
	require.Equal(t, []string{"config", "submariner"}, m["eu-2"].Sources)
	require.True(t, m.Equal(MergeNetworks(cfg, sub)), "order of sources does not matter")
	require.False(t, m.Equal(sub))
}

// attackInv: eu-2 advertises (through gossip) a pod CIDR that covers
// everything and pods claiming the metadata service, loopback and a us-1
// pod's IP, next to one honest pod.
func attackInv(t testing.TB) *Inventory {
	inv := base(t)
	inv.SetCluster(Cluster{ID: "eu-2", Labels: l("region", "eu"), PodCIDRs: []string{"0.0.0.0/0"}})
	inv.SetPod("eu-1", pod("shop", "web", l("app", "web"), "10.1.1.10"))
	inv.SetPod("us-1", pod("shop", "web", l("app", "web"), "10.3.1.10"))
	inv.SetPod("eu-2", pod("shop", "honest", l("app", "web"), "10.2.1.10"))
	inv.SetPod("eu-2", pod("shop", "imds", l("app", "web"), "169.254.169.254"))
	inv.SetPod("eu-2", pod("shop", "lo", l("app", "web"), "127.0.0.1"))
	inv.SetPod("eu-2", pod("shop", "steal", l("app", "web"), "10.3.1.10"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "ingress", `
clusterSelector: {}
podSelector: {}
ingress: [{from: [{clusterSelector: {}, podSelector: {matchLabels: {app: web}}}]}]
egress: [{to: [{clusterSelector: {}, podSelector: {matchLabels: {app: web}}}]}]
policyTypes: [Ingress, Egress]`))
	return inv
}

func TestPodIPAttackNeverAllowed(t *testing.T) {
	inv := attackInv(t)
	ref := PolicyRef{"eu-1", "shop", "ingress"}
	blocks := func(res Result) []string {
		var out []string
		for _, np := range res.NetworkPolicies {
			for _, r := range np.Spec.Ingress {
				out = append(out, cidrs(r.From)...)
			}
			for _, r := range np.Spec.Egress {
				out = append(out, cidrs(r.To)...)
			}
		}
		return out
	}
	eu1 := Evaluate("eu-1", inv, ref)
	require.ElementsMatch(t, []string{"10.2.1.10/32", "10.3.1.10/32", "10.2.1.10/32", "10.3.1.10/32"}, blocks(eu1),
		"eu-1 allows eu-2's honest pod and us-1's real pod, nothing eu-2 claims beyond its CIDR")
	require.Equal(t, ReasonPodIPReserved, eu1.Degraded)
	require.Equal(t, []string{"PodIPReservedAddress: eu-2" + reasonHint[ReasonPodIPReserved],
		"PodIPOutsideClusterCIDR: eu-2" + reasonHint[ReasonPodIPOutsideClusterCIDR]}, eu1.DegradedDetails)
	us1 := Evaluate("us-1", inv, ref)
	require.ElementsMatch(t, []string{"10.1.1.10/32", "10.2.1.10/32", "10.1.1.10/32", "10.2.1.10/32"}, blocks(us1),
		"us-1 never allows its own pod's IP as eu-2's")

	drops := PodIPDrops(inv, "eu-1")
	require.Equal(t, []PodIPDrop{
		{Cluster: "eu-2", Reason: DropReserved, Count: 2, Example: "shop/imds 169.254.169.254/32"},
		{Cluster: "eu-2", Reason: DropOutsideCIDRs, Count: 1, Example: "shop/steal 10.3.1.10/32"},
	}, drops)
}

func TestUnknownClusterCIDRsDropItsPods(t *testing.T) {
	inv := attackInv(t)
	n := inv.Networks()
	delete(n, "us-1")
	inv.SetNetworks(n)
	res := Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "ingress"})
	for _, np := range res.NetworkPolicies {
		for _, r := range np.Spec.Ingress {
			require.NotContains(t, cidrs(r.From), "10.3.1.10/32")
			require.Contains(t, cidrs(r.From), "10.2.1.10/32")
		}
	}
	require.Equal(t, ReasonPodCIDRsUnknown, res.Degraded)
	require.Contains(t, res.DegradedDetails, "PodCIDRsUnknown: us-1"+reasonHint[ReasonPodCIDRsUnknown])
	require.Contains(t, PodIPDrops(inv, "eu-1"), PodIPDrop{Cluster: "us-1", Reason: DropCIDRsUnknown, Count: 1, Example: "shop/web 10.3.1.10/32"})

	// No knowledge at all: every remote pod is dropped, local peers stay.
	inv.SetNetworks(nil)
	res = Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "ingress"})
	require.NotEmpty(t, res.NetworkPolicies)
	for _, np := range res.NetworkPolicies {
		for _, r := range np.Spec.Ingress {
			require.Empty(t, cidrs(r.From))
			require.NotEmpty(t, natives(r.From), "the local native peer is kept")
		}
	}
	require.Equal(t, []string{"PodCIDRsUnknown: eu-2,us-1" + reasonHint[ReasonPodCIDRsUnknown]}, res.DegradedDetails)
}

func TestGlobalnetAddressesMustBeInTrustedGlobalCIDR(t *testing.T) {
	inv := globalnetInv(t)
	// eu-2 advertises a global CIDR of everything; only 242.0.0.0/16 is its.
	inv.SetCluster(Cluster{ID: "eu-2", Labels: l("region", "eu"), Globalnet: true,
		GlobalCIDRs: []string{"0.0.0.0/0", "242.0.0.0/16"}, ClusterEgressIPs: []string{"242.0.0.1", "127.0.0.1", "242.9.0.1"}})
	inv.SetPod("eu-2", pod("shop", "w", l("app", "web"), "10.1.0.5"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", fromEveryWeb))
	res := Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "p"})
	require.Equal(t, []string{"242.0.0.1/32"}, ingressCIDRs(t, res))
	mustSet(t, inv, pol(t, "eu-1", "shop", "e", `
podSelector: {}
policyTypes: [Egress]
egress: [{to: [{clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: eu-2}}}]}]`))
	res = Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "e"})
	require.Len(t, res.NetworkPolicies, 1)
	require.Equal(t, []string{"242.0.0.0/16"}, cidrs(res.NetworkPolicies[0].Spec.Egress[0].To), "0.0.0.0/0 is never rendered")
}

// FuzzOwnership: whatever the networks and the address, an allowed address
// lies inside one of its owner's ranges, is not reserved and does not
// overlap the enforcing cluster's ranges.
func FuzzOwnership(f *testing.F) {
	f.Add([]byte{10, 2, 1, 10}, uint8(32), []byte{10, 2, 0, 0}, uint8(16), []byte{10, 1, 0, 0}, uint8(16), false)
	f.Add([]byte{169, 254, 169, 254}, uint8(32), []byte{0, 0, 0, 0}, uint8(0), []byte{10, 1, 0, 0}, uint8(16), false)
	f.Add([]byte{242, 2, 0, 0}, uint8(16), []byte{242, 0, 0, 0}, uint8(8), []byte{242, 2, 0, 0}, uint8(24), true)
	f.Add(make([]byte, 16), uint8(128), make([]byte, 16), uint8(0), []byte{0xfd, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(64), false)
	f.Fuzz(func(t *testing.T, addr []byte, bits uint8, ownerAddr []byte, ownerBits uint8, localAddr []byte, localBits uint8, global bool) {
		mk := func(b []byte, n uint8) (netip.Prefix, bool) {
			a, ok := netip.AddrFromSlice(b)
			if !ok {
				return netip.Prefix{}, false
			}
			return netip.PrefixFrom(a, int(n)%(a.BitLen()+1)).Masked(), true
		}
		p, ok1 := mk(addr, bits)
		o, ok2 := mk(ownerAddr, ownerBits)
		lc, ok3 := mk(localAddr, localBits)
		if !ok1 || !ok2 || !ok3 {
			return
		}
		owner := &ClusterNetworks{PodCIDRs: []netip.Prefix{o}}
		if global {
			owner = &ClusterNetworks{GlobalCIDRs: []netip.Prefix{o}}
		}
		local := &ClusterNetworks{PodCIDRs: []netip.Prefix{lc}}
		r := CheckRemoteAddr(local, owner, global, p)
		if r != DropNone {
			return
		}
		if inOwner := o.Bits() <= p.Bits() && o.Contains(p.Addr()); !inOwner {
			t.Fatalf("%s allowed outside its owner's %s", p, o)
		}
		if lc.Overlaps(p) {
			t.Fatalf("%s allowed inside the local %s", p, lc)
		}
		for _, r := range reservedPrefixes {
			if r.Overlaps(p) {
				t.Fatalf("%s allowed inside reserved %s", p, r)
			}
		}
		if a := p.Addr(); a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
			t.Fatalf("%s allowed: reserved", p)
		}
	})
}

// TestOwnershipProperty: random pods of random clusters under random
// networks; every ipBlock any cluster renders lies in the trusted CIDRs of
// a cluster that has a selected pod with that IP, and never in the
// enforcing cluster's own.
func TestOwnershipProperty(t *testing.T) {
	clusters := []string{"c0", "c1", "c2", "c3"}
	for seed := 0; seed < 30; seed++ {
		inv := NewInventory()
		var entries []string
		for i, c := range clusters {
			inv.SetCluster(Cluster{ID: c, Labels: l("env", "x"), PodCIDRs: []string{"0.0.0.0/0"}})
			inv.SetNamespace(c, Namespace{Name: "ns"})
			if (seed+i)%5 != 0 { // sometimes unknown
				entries = append(entries, fmt.Sprintf("%s=10.%d.0.0/16", c, (seed+i)%3))
			}
			for j := 0; j < 20; j++ {
				ip := fmt.Sprintf("10.%d.%d.%d", (seed*7+j)%4, j%3, j+1)
				switch j % 7 {
				case 0:
					ip = "169.254.169.254"
				case 1:
					ip = "127.0.0.1"
				}
				inv.SetPod(c, pod("ns", fmt.Sprintf("p%d", j), l("app", "a"), ip))
			}
		}
		n, err := ParseClusterCIDRs(entries)
		require.NoError(t, err)
		inv.SetNetworks(n)
		mustSet(t, inv, pol(t, "c0", "ns", "p", `
clusterSelector: {}
podSelector: {}
ingress: [{from: [{clusterSelector: {}}]}]`))
		for _, enf := range clusters {
			for _, np := range Translate(enf, inv) {
				for _, r := range np.Spec.Ingress {
					for _, b := range cidrs(r.From) {
						p := netip.MustParsePrefix(b)
						require.False(t, IsReserved(p), b)
						if lc, ok := n[enf]; ok {
							require.False(t, overlapsAny(lc.PodCIDRs, p), "%s in %s's own CIDRs", b, enf)
						}
						owned := false
						for _, c := range clusters {
							if c != enf && within(n[c].PodCIDRs, p) {
								owned = true
							}
						}
						require.True(t, owned, "seed %d: %s rendered in %s outside every remote cluster's trusted CIDRs", seed, b, enf)
					}
				}
			}
		}
	}
}

// BenchmarkOwnershipFilter measures the check alone, per address.
func BenchmarkOwnershipFilter(b *testing.B) {
	local := &ClusterNetworks{PodCIDRs: []netip.Prefix{pfx("10.1.0.0/16")}, ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16")}}
	owner := &ClusterNetworks{PodCIDRs: []netip.Prefix{pfx("10.2.0.0/16"), pfx("fd02::/64")}}
	addrs := make([]netip.Prefix, 1024)
	for i := range addrs {
		addrs[i] = pfx(fmt.Sprintf("10.2.%d.%d", i/250, i%250+1))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if CheckRemoteAddr(local, owner, false, addrs[i%len(addrs)]) != DropNone {
			b.Fatal("dropped")
		}
	}
}

// BenchmarkPodIPDrops_100clusters_1000pods: the daemon's metric pass
// (every remote pod checked), per call; divide by 99,000 for ns per pod.
func BenchmarkPodIPDrops_100clusters_1000pods(b *testing.B) {
	inv := benchInventory(b, 100, 1000, 20, 0, 200)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := PodIPDrops(inv, "c000"); len(d) != 0 {
			b.Fatal(d)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/99000, "ns/pod")
}
