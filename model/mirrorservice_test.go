package model

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// Exported Services: pod, Service and policy changes in any order; the
// incremental outputs (Mirror.Apply -> enforce.Affected) always equal a
// translation from scratch, so a backend added or relabelled withdraws or
// restores the ClusterIP rule without a full recompute. A second policy
// names the Service as a peer (egress and ingress, in every cluster or in
// b only, the Service db or db2), so its backends and addresses follow the
// same changes, the enforcing cluster's own export included. Backends
// flip readiness, and cluster c has Globalnet: its Services are admitted
// by their global IPs.
func TestIncrementalMatchesFullTranslationWithServices(t *testing.T) {
	clusters := []string{"a", "b", "c"}
	rendered, svcRendered, svcNative, globalRendered := 0, 0, 0, 0
	for seed := int64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewSource(seed))
		w := newWorld(t, "a", clusters...)
		nets, err := enforce.ParseClusterCIDRs([]string{"a=10.0.0.0/16", "a:service=10.96.0.0/16",
			"b=10.1.0.0/16", "b:service=10.97.0.0/16", "c=10.2.0.0/16", "c:service=10.98.0.0/16", "c:global=242.2.0.0/16"})
		require.NoError(t, err)
		w.setNetworks(nets)
		for _, c := range clusters {
			// known (empty) labels: a cluster whose labels are unknown
			// matches no clusterSelector but one naming its ID; c has
			// Globalnet (its Services are reached by global IPs)
			cv := &crdt.ClusterValue{}
			if c == "c" {
				cv = &crdt.ClusterValue{Globalnet: true, GlobalCIDRs: []string{"242.2.0.0/16"}}
			}
			w.write(c, crdt.KindCluster, "", cv)
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
		svcSpec := func(name string, everywhere bool) apiv1.MultiClusterNetworkPolicySpec {
			cs := &metav1.LabelSelector{MatchLabels: map[string]string{"cluster.clusterset.k8s.io": "b"}}
			if everywhere {
				cs = &metav1.LabelSelector{}
			}
			peer := apiv1.MultiClusterNetworkPolicyPeer{Service: &apiv1.ServicePeer{Name: name, ClusterSelector: cs}}
			return apiv1.MultiClusterNetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress:     []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{peer}}},
				Egress: []apiv1.MultiClusterNetworkPolicyEgressRule{{
					Ports: []networkingv1.NetworkPolicyPort{{Port: &port}},
					To:    []apiv1.MultiClusterNetworkPolicyPeer{peer}}},
			}
		}
		w.write("a", crdt.KindPolicy, "shop/egress", modeltest.PolicyValue(t, spec("x"), 1))
		w.write("a", crdt.KindPolicy, "shop/svcpeer", modeltest.PolicyValue(t, svcSpec("db", true), 1))
		for step := 0; step < 120; step++ {
			c := clusters[rng.Intn(3)]
			if c == "a" && rng.Intn(3) > 0 {
				c = clusters[1+rng.Intn(2)] // mostly remote changes
			}
			idx := map[string]int{"a": 0, "b": 1, "c": 2}[c]
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
					Ports: []crdt.NamedPort{{Name: "sql", Port: 5432}}, NotReady: rng.Intn(4) == 0})
			case r < 9:
				name := []string{"shop/db", "shop/db2"}[rng.Intn(2)]
				if rng.Intn(4) == 0 {
					w.write(c, crdt.KindService, name, nil)
					break
				}
				sel := map[string]string{"app": "db"}
				if name == "shop/db2" {
					sel = map[string]string{"tier": "y"}
				}
				w.write(c, crdt.KindService, name, &crdt.ServiceValue{
					ClusterIPs: []string{fmt.Sprintf("10.9%d.0.%d", 6+idx, rng.Intn(3)+1)},
					GlobalIPs:  []string{fmt.Sprintf("242.2.0.%d", rng.Intn(3)+1)},
					Selector:   sel,
					Ports:      []crdt.ServicePort{{Name: "sql", Port: 15432, TargetPortName: "sql"}}})
			default:
				if rng.Intn(2) == 0 {
					w.write("a", crdt.KindPolicy, "shop/egress", modeltest.PolicyValue(t, spec([]string{"x", "y"}[rng.Intn(2)]), int64(step)))
				} else {
					w.write("a", crdt.KindPolicy, "shop/svcpeer", modeltest.PolicyValue(t, svcSpec([]string{"db", "db2"}[rng.Intn(2)], rng.Intn(2) == 0), int64(step)))
				}
			}
			want := modeltest.NPNames(w.fromScratch("a"))
			require.Equal(t, want, modeltest.NPNames(w.outputs.Desired()), "seed %d step %d", seed, step)
			if strings.Contains(strings.Join(want, ""), "10.97.0.") || strings.Contains(strings.Join(want, ""), "10.98.0.") {
				rendered++
			}
			for _, ip := range []string{"242.2.0.1/32", "242.2.0.2/32", "242.2.0.3/32"} {
				if strings.Contains(strings.Join(want, ""), ip) {
					globalRendered++ // a Service's global IP (c's pods: its global CIDR)
					break
				}
			}
			for _, np := range w.fromScratch("a") {
				if np.Labels["coastguard.submariner.io/origin-name"] != "svcpeer" || len(np.Spec.Ingress) == 0 {
					continue
				}
				for _, p := range np.Spec.Ingress[0].From {
					if p.IPBlock != nil {
						svcRendered++
						break
					}
				}
				for _, p := range np.Spec.Ingress[0].From {
					if p.PodSelector != nil {
						svcNative++
						break
					}
				}
			}
		}
	}
	require.Greater(t, rendered, 10, "some steps must render a ClusterIP")
	require.Greater(t, svcRendered, 10, "some steps must render a service peer's backends")
	require.Greater(t, svcNative, 10, "some steps must render the enforcing cluster's own export natively")
	require.Greater(t, globalRendered, 5, "some steps must render a Globalnet Service's global IP")
}
