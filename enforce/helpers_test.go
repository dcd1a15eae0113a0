package enforce

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

func spec(t testing.TB, s string) apiv1.MultiClusterNetworkPolicySpec {
	t.Helper()
	var out apiv1.MultiClusterNetworkPolicySpec
	require.NoError(t, yaml.UnmarshalStrict([]byte(s), &out))
	return out
}

func pol(t testing.TB, origin, ns, name, s string) Policy {
	return Policy{Origin: origin, Namespace: ns, Name: name, Spec: spec(t, s)}
}

func pod(ns, name string, lbls map[string]string, ips ...string) Pod {
	return Pod{Namespace: ns, Name: name, Labels: lbls, IPs: ips, Phase: corev1.PodRunning}
}

func l(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// base builds three clusters (eu-1, eu-2 region=eu; us-1 region=us), each
// with namespace "shop".
func base(t testing.TB) *Inventory {
	inv := NewInventory()
	inv.SetCluster(Cluster{ID: "eu-1", Labels: l("region", "eu")})
	inv.SetCluster(Cluster{ID: "eu-2", Labels: l("region", "eu")})
	inv.SetCluster(Cluster{ID: "us-1", Labels: l("region", "us")})
	for _, c := range []string{"eu-1", "eu-2", "us-1"} {
		inv.SetNamespace(c, Namespace{Name: "shop"})
	}
	inv.SetNetworks(nets(t, "eu-1=10.1.0.0/16", "eu-1=fd01::/64", "eu-1:service=10.96.0.0/16",
		"eu-2=10.2.0.0/16", "eu-2=fd00::/64", "eu-2:service=10.96.0.0/16",
		"us-1=10.3.0.0/16", "us-1=fd03::/64", "us-1:service=10.96.0.0/16"))
	return inv
}

// nets parses --cluster-cidrs style entries.
func nets(t testing.TB, entries ...string) Networks {
	t.Helper()
	n, err := ParseClusterCIDRs(entries)
	require.NoError(t, err)
	return n
}

func mustSet(t testing.TB, inv *Inventory, p Policy) {
	t.Helper()
	require.NoError(t, inv.SetPolicy(p))
}

func toYAML(t testing.TB, nps []networkingv1.NetworkPolicy) string {
	t.Helper()
	var out []byte
	for i := range nps {
		b, err := yaml.Marshal(&nps[i])
		require.NoError(t, err)
		out = append(out, "---\n"...)
		out = append(out, b...)
	}
	return string(out)
}

// cidrs lists the ipBlock CIDRs of a peer list.
func cidrs(peers []networkingv1.NetworkPolicyPeer) []string {
	var out []string
	for _, p := range peers {
		if p.IPBlock != nil {
			out = append(out, p.IPBlock.CIDR)
		}
	}
	return out
}

func natives(peers []networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for _, p := range peers {
		if p.IPBlock == nil {
			out = append(out, p)
		}
	}
	return out
}
