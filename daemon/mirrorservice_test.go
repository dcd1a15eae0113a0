package daemon

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	networkingv1 "k8s.io/api/networking/v1"
)

// Exported Services: pod, Service and policy changes in any order; the
// incremental outputs (Mirror.Apply -> enforce.Affected) always equal a
// translation from scratch, so a backend added or relabelled withdraws or
// restores the ClusterIP rule without a full recompute.
func TestIncrementalMatchesFullTranslationWithServices(t *testing.T) {
	clusters := []string{"a", "b", "c"}
	rendered := 0
	for seed := int64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewSource(seed))
		w := newWorld(t, "a", clusters...)
		nets, err := enforce.ParseClusterCIDRs([]string{"a=10.0.0.0/16", "a:service=10.96.0.0/16",
			"b=10.1.0.0/16", "b:service=10.97.0.0/16", "c=10.2.0.0/16", "c:service=10.98.0.0/16"})
		require.NoError(t, err)
		w.setNetworks(nets)
		for _, c := range clusters {
			// known (empty) labels: a cluster whose labels are unknown
			// matches no clusterSelector but one naming its ID
			w.write(c, crdt.KindCluster, "", &crdt.ClusterValue{})
			w.write(c, crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
		}
		port := intstr.FromString("sql")
		spec := func(tier string) apiv1.MultiClusterNetworkPolicySpec {
			return apiv1.MultiClusterNetworkPolicySpec{
				PodSelector: metav1.LabelSelector{},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []apiv1.MultiClusterNetworkPolicyEgressRule{{
					Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
					To: []apiv1.MultiClusterNetworkPolicyPeer{{ClusterSelector: &metav1.LabelSelector{},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}}}}}},
			}
		}
		w.write("a", crdt.KindPolicy, "shop/egress", policyValue(t, spec("x"), 1))
		for step := 0; step < 120; step++ {
			c := clusters[1+rng.Intn(2)]
			idx := map[string]int{"b": 1, "c": 2}[c]
			switch r := rng.Intn(10); {
			case r < 6:
				name := fmt.Sprintf("shop/p%d", rng.Intn(4))
				if rng.Intn(5) == 0 {
					w.write(c, crdt.KindPod, name, nil)
					break
				}
				w.write(c, crdt.KindPod, name, &crdt.PodValue{
					Labels: map[string]string{"app": "db", "tier": []string{"x", "y"}[rng.Intn(2)]},
					IPs:    []string{fmt.Sprintf("10.%d.0.%d", idx, rng.Intn(250)+1)}, Phase: "Running",
					Ports: []crdt.NamedPort{{Name: "sql", Port: 5432}}})
			case r < 9:
				if rng.Intn(4) == 0 {
					w.write(c, crdt.KindService, "shop/db", nil)
					break
				}
				w.write(c, crdt.KindService, "shop/db", &crdt.ServiceValue{
					ClusterIPs: []string{fmt.Sprintf("10.9%d.0.%d", 6+idx, rng.Intn(3)+1)},
					Selector:   map[string]string{"app": "db"},
					Ports:      []crdt.ServicePort{{Name: "sql", Port: 15432, TargetPortName: "sql"}}})
			default:
				w.write("a", crdt.KindPolicy, "shop/egress", policyValue(t, spec([]string{"x", "y"}[rng.Intn(2)]), int64(step)))
			}
			want := names(w.fromScratch("a"))
			require.Equal(t, want, names(w.outputs.Desired()), "seed %d step %d", seed, step)
			if strings.Contains(strings.Join(want, ""), "10.97.0.") || strings.Contains(strings.Join(want, ""), "10.98.0.") {
				rendered++
			}
		}
	}
	require.Greater(t, rendered, 10, "some steps must render a ClusterIP")
}
