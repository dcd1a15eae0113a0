package enforce

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 29, item 8: a cluster's trusted CIDRs (its own Submariner Cluster
// object or --cluster-cidrs) declaring 0.0.0.0/0 or another cluster's range
// made every address inside pass as that cluster's pod: another cluster's
// pods, this cluster's nodes, public addresses were rendered. Such ranges
// are now refused before the ownership check; Globalnet explains overlaps.
func TestAttackTrustedCIDRsChecked(t *testing.T) {
	inv := base(t)
	inv.SetCluster(Cluster{ID: "eu-1"})
	inv.SetCluster(Cluster{ID: "evil"})
	inv.SetCluster(Cluster{ID: "us-1"})
	inv.SetPod("evil", pod("shop", "node", l("app", "web"), "192.168.7.7")) // a node or public address
	inv.SetPod("evil", pod("shop", "steal", l("app", "web"), "10.3.0.9"))   // us-1's pod range
	inv.SetPod("us-1", pod("shop", "w", l("app", "web"), "10.3.0.10"))      // us-1's own pod
	inv.SetNetworks(nets(t, "eu-1=10.0.0.0/16", "evil=0.0.0.0/0", "evil=10.3.0.0/24", "us-1=10.3.0.0/16"))
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", fromEveryWeb))
	res := Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "p"})
	require.Equal(t, []string{}, ingressCIDRsOrEmpty(t, res), "nothing of evil's claim is rendered; us-1's overlapped range is left out too (fail closed)")
	var why []string
	for _, p := range inv.NetworkProblems() {
		why = append(why, p.String())
	}
	require.Equal(t, []string{
		"cluster evil: trusted range 0.0.0.0/0 refused: a /0 range covers every address",
		"cluster evil: trusted range 10.3.0.0/24 refused: overlaps 10.3.0.0/16 of cluster us-1",
		"cluster us-1: trusted range 10.3.0.0/16 refused: overlaps 10.3.0.0/24 of cluster evil",
	}, why)

	// Without the claim, us-1's pods are rendered again.
	inv.SetNetworks(nets(t, "eu-1=10.0.0.0/16", "us-1=10.3.0.0/16"))
	res = Evaluate("eu-1", inv, PolicyRef{"eu-1", "shop", "p"})
	require.Equal(t, []string{"10.3.0.10/32"}, ingressCIDRsOrEmpty(t, res))
	require.Empty(t, inv.NetworkProblems())

	// Globalnet on both sides explains overlapping pod ranges.
	n, problems := CheckNetworks(Networks{
		"a": {PodCIDRs: []netip.Prefix{pfx("10.0.0.0/16")}, GlobalCIDRs: []netip.Prefix{pfx("242.0.0.0/16")}},
		"b": {PodCIDRs: []netip.Prefix{pfx("10.0.0.0/16")}, GlobalCIDRs: []netip.Prefix{pfx("242.1.0.0/16")}},
	})
	require.Empty(t, problems)
	require.Len(t, n["b"].PodCIDRs, 1)
	_, problems = CheckNetworks(Networks{
		"a": {GlobalCIDRs: []netip.Prefix{pfx("242.0.0.0/16")}},
		"b": {GlobalCIDRs: []netip.Prefix{pfx("242.0.0.0/8")}},
	})
	require.Len(t, problems, 2, "overlapping global ranges are refused")
}

func ingressCIDRsOrEmpty(t *testing.T, res Result) []string {
	out := []string{}
	for _, np := range res.NetworkPolicies {
		for _, r := range np.Spec.Ingress {
			out = append(out, cidrs(r.From)...)
		}
	}
	return out
}
