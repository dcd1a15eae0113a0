package enforce

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

var (
	fuzzClusters = []string{"c1", "c2", "c3", "c4"}
	fuzzNS       = []string{"a", "b", "c"}
	fuzzApps     = []string{"fe", "be", "db"}
)

func randLabels(r *rand.Rand) map[string]string {
	m := map[string]string{"app": fuzzApps[r.Intn(len(fuzzApps))]}
	if r.Intn(2) == 0 {
		m["tier"] = []string{"gold", "silver"}[r.Intn(2)]
	}
	return m
}

func randPod(r *rand.Rand, ns string, i int) Pod {
	p := pod(ns, fmt.Sprintf("p%d", i), randLabels(r), fmt.Sprintf("10.%d.%d.%d", r.Intn(4), r.Intn(4), r.Intn(250)+1))
	switch r.Intn(8) {
	case 0:
		p.Phase = corev1.PodSucceeded
	case 1:
		p.IPs = nil
	case 2:
		p.HostNetwork = true
	}
	if r.Intn(2) == 0 {
		p.Ports = []Port{{Name: "web", Port: int32(8000 + r.Intn(3))}}
	}
	return p
}

var fuzzPeers = []string{
	"{podSelector: {matchLabels: {app: fe}}}",
	"{clusterSelector: {}, podSelector: {matchLabels: {app: fe}}}",
	"{clusterSelector: {matchLabels: {zone: x}}}",
	"{clusterSelector: {matchExpressions: [{key: zone, operator: NotIn, values: [x]}]}, namespaceSelector: {matchLabels: {team: t1}}}",
	"{clusterSelector: {}, namespaceSelector: {}, podSelector: {matchExpressions: [{key: tier, operator: Exists}]}}",
	"{ipBlock: {cidr: 192.168.0.0/16}}",
}

func randPolicyOf(t testing.TB, r *rand.Rand, i int, fuzzPeers []string) Policy {
	sel := []string{"", "clusterSelector: {}\n", "clusterSelector: {matchLabels: {zone: x}}\n"}[r.Intn(3)]
	s := sel + "podSelector: {matchLabels: {app: db}}\n"
	s += "ingress:\n- from: [" + fuzzPeers[r.Intn(len(fuzzPeers))] + ", " + fuzzPeers[r.Intn(len(fuzzPeers))] + "]\n"
	if r.Intn(2) == 0 {
		s += "egress:\n- to: [" + fuzzPeers[r.Intn(len(fuzzPeers))] + "]\n  ports: [{port: web}, {port: 53, protocol: UDP}]\n"
	}
	return pol(t, fuzzClusters[r.Intn(len(fuzzClusters))], fuzzNS[r.Intn(len(fuzzNS))], fmt.Sprintf("pol%d", i), s)
}

func snapshot(inv *Inventory, c string) map[PolicyRef]string {
	out := map[PolicyRef]string{}
	for _, ref := range inv.Policies() {
		res := Evaluate(c, inv, ref)
		b, _ := json.Marshal(res)
		out[ref] = string(b)
	}
	return out
}

// TestAffectedIsSuperset applies random changes and checks that every
// policy whose translation changed, in every enforcing cluster, was
// reported by Affected.
func TestAffectedIsSuperset(t *testing.T) {
	checkAffectedSuperset(t, 42, fuzzPeers, false)
}

// fuzzServicePeers adds service peers: local only, every cluster, and a
// Service of another namespace in some clusters.
var fuzzServicePeers = append(slices.Clone(fuzzPeers),
	"{service: {name: db}}",
	"{service: {name: db, clusterSelector: {}}}",
	"{service: {name: api, namespace: b, clusterSelector: {matchLabels: {zone: x}}}}",
)

// The same with service peers, and exported Services (with and without
// selectors, ClusterIPs inside and outside their service CIDRs) added,
// changed and withdrawn among the random changes.
func TestAffectedIsSupersetWithServicePeers(t *testing.T) {
	checkAffectedSuperset(t, 43, fuzzServicePeers, true)
}

// randService is an exported Service of namespace ns in cluster ci.
func randService(r *rand.Rand, ci int, ns string) Service {
	s := Service{Namespace: ns, Name: []string{"db", "api"}[r.Intn(2)],
		ClusterIPs: []string{fmt.Sprintf("10.%d.0.%d", 96+ci, r.Intn(3)+1)}}
	switch r.Intn(5) {
	case 0:
		s.Selector = l("app", "db")
	case 1:
		s.Selector = l("app", "fe", "tier", "gold")
	case 2:
		s.Selector = l("app", "be")
	case 3:
		s.Selector = l("tier", "gold") // may share backends with the others
	} // else no selector
	if r.Intn(2) == 0 {
		s.Ports = []ServicePort{{Name: "w", Port: 80, TargetPortName: "web"}}
	} else {
		s.Ports = []ServicePort{{Name: "w", Port: 80, TargetPort: 8000}}
	}
	if r.Intn(6) == 0 {
		s.ClusterIPs = []string{"10.99.0.1"} // in no cluster's service CIDR
	}
	return s
}

func checkAffectedSuperset(t *testing.T, seed int64, peers []string, services bool) {
	r := rand.New(rand.NewSource(seed))
	inv := NewInventory()
	// Pods get random 10.0-3.x.x IPs: some are inside their cluster's pod
	// CIDR, others outside or inside the enforcing cluster's (dropped).
	if services {
		inv.SetNetworks(nets(t, "c1=10.0.0.0/16", "c2=10.1.0.0/16", "c3=10.2.0.0/16", "c4=10.3.0.0/16",
			"c1:service=10.96.0.0/16", "c2:service=10.97.0.0/16", "c3:service=10.98.0.0/16", "c4:service=10.99.0.0/24"))
	} else {
		inv.SetNetworks(nets(t, "c1=10.0.0.0/16", "c2=10.1.0.0/16", "c3=10.2.0.0/16", "c4=10.3.0.0/16"))
	}
	for _, c := range fuzzClusters {
		lb := map[string]string{}
		if r.Intn(2) == 0 {
			lb["zone"] = "x"
		}
		inv.SetCluster(Cluster{ID: c, Labels: lb})
		for _, ns := range fuzzNS {
			if r.Intn(5) > 0 {
				inv.SetNamespace(c, Namespace{Name: ns, Labels: l("team", []string{"t1", "t2"}[r.Intn(2)])})
			}
		}
	}
	pods := map[string]map[string]Pod{} // cluster -> ns/name -> pod
	for _, c := range fuzzClusters {
		pods[c] = map[string]Pod{}
	}
	for i := 0; i < 60; i++ {
		c := fuzzClusters[r.Intn(len(fuzzClusters))]
		p := randPod(r, fuzzNS[r.Intn(len(fuzzNS))], i)
		inv.SetPod(c, p)
		pods[c][p.Namespace+"/"+p.Name] = p
	}
	if services {
		for ci, c := range fuzzClusters {
			for _, ns := range fuzzNS {
				if r.Intn(2) == 0 {
					inv.SetService(c, randService(r, ci, ns))
				}
			}
		}
	}
	for i := 0; i < 25; i++ {
		mustSet(t, inv, randPolicyOf(t, r, i, peers))
	}
	checked, precise, changedTotal := 0, 0, 0
	for step := 0; step < 200; step++ {
		before := map[string]map[PolicyRef]string{}
		for _, c := range fuzzClusters {
			before[c] = snapshot(inv, c)
		}
		var ch Change
		n := 10
		if services {
			n = 13
		}
		switch k := r.Intn(n); {
		case k >= 10: // exported Service added, changed or withdrawn
			ci := r.Intn(len(fuzzClusters))
			c, ns := fuzzClusters[ci], fuzzNS[r.Intn(len(fuzzNS))]
			ch = Change{Kind: ChangeService, Cluster: c, Namespace: ns}
			if r.Intn(3) == 0 {
				inv.RemoveService(c, ns, []string{"db", "api"}[r.Intn(2)])
			} else {
				inv.SetService(c, randService(r, ci, ns))
			}
		case k < 6: // pod add / update / delete
			c := fuzzClusters[r.Intn(len(fuzzClusters))]
			ns := fuzzNS[r.Intn(len(fuzzNS))]
			name := fmt.Sprintf("p%d", r.Intn(80))
			old, had := pods[c][ns+"/"+name]
			ch = Change{Kind: ChangePod, Cluster: c, Namespace: ns}
			var got labels.Labels // the labels before, as the inventory returns them
			if had && r.Intn(3) == 0 {
				got = inv.RemovePod(c, ns, name)
				delete(pods[c], ns+"/"+name)
			} else {
				p := randPod(r, ns, 0)
				p.Name = name
				got = inv.SetPod(c, p)
				pods[c][ns+"/"+name] = p
				ch.Labels = append(ch.Labels, labels.Set(p.Labels))
			}
			require.Equal(t, had, got != nil, "old labels returned exactly for a pod that was there")
			if had {
				require.Equal(t, labels.Set(old.Labels).String(), fmt.Sprint(got))
				ch.Labels = append(ch.Labels, got)
			}
			if r.Intn(4) == 0 {
				ch.Labels = nil // conservative mode
			}
		case k < 8: // namespace relabel / add / remove
			c := fuzzClusters[r.Intn(len(fuzzClusters))]
			ns := fuzzNS[r.Intn(len(fuzzNS))]
			ch = Change{Kind: ChangeNamespace, Cluster: c, Namespace: ns}
			before := inv.nsLabels(c, ns)
			var got labels.Labels
			if r.Intn(4) == 0 {
				got = inv.RemoveNamespace(c, ns)
			} else {
				nl := l("team", []string{"t1", "t2", "t3"}[r.Intn(3)])
				got = inv.SetNamespace(c, Namespace{Name: ns, Labels: nl})
				ch.Labels = append(ch.Labels, inv.nsLabels(c, ns))
			}
			require.Equal(t, before != nil, got != nil, "old labels returned exactly for a namespace that was there")
			if got != nil {
				require.Equal(t, before.String(), fmt.Sprint(got))
				ch.Labels = append(ch.Labels, got)
			}
		case k < 9: // policy change
			p := randPolicyOf(t, r, r.Intn(30), peers)
			if r.Intn(4) == 0 {
				inv.RemovePolicy(p.Ref())
			} else {
				mustSet(t, inv, p)
			}
			ch = Change{Kind: ChangePolicy, Policy: p.Ref()}
		default: // cluster relabel
			c := fuzzClusters[r.Intn(len(fuzzClusters))]
			lb := map[string]string{}
			if r.Intn(2) == 0 {
				lb["zone"] = "x"
			}
			inv.SetCluster(Cluster{ID: c, Labels: lb})
			ch = Change{Kind: ChangeCluster, Cluster: c}
		}
		if step%20 == 0 {
			// Batched evaluation (shared peer cache) equals one-by-one.
			for _, c := range fuzzClusters {
				var one []networkingv1.NetworkPolicy
				for _, ref := range inv.Policies() {
					one = append(one, Evaluate(c, inv, ref).NetworkPolicies...)
				}
				slices.SortFunc(one, func(a, b networkingv1.NetworkPolicy) int {
					return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
				})
				require.Equal(t, toYAML(t, one), toYAML(t, Translate(c, inv)))
			}
		}
		for _, c := range fuzzClusters {
			after := snapshot(inv, c)
			aff := Affected(c, inv, ch)
			require.True(t, slices.IsSortedFunc(aff, PolicyRef.Compare))
			refs := map[PolicyRef]bool{}
			for ref := range before[c] {
				refs[ref] = true
			}
			for ref := range after {
				refs[ref] = true
			}
			changed := 0
			for ref := range refs {
				if before[c][ref] != after[ref] {
					changed++
					require.Contains(t, aff, ref, "step %d change %+v cluster %s", step, ch, c)
				}
			}
			checked++
			if ch.Kind != ChangeCluster && len(aff) < len(refs) {
				precise++
			}
			changedTotal += changed
		}
	}
	// Affected must actually prune, not return everything.
	require.Greater(t, precise, checked/2)
	// ...and the random changes must actually change translations often.
	require.Greater(t, changedTotal, 100)
}

func TestAffectedLocalPodChangesNothing(t *testing.T) {
	inv := base(t)
	mustSet(t, inv, pol(t, "eu-1", "shop", "p", "clusterSelector: {}\npodSelector: {}\ningress: [{from: [{clusterSelector: {}}]}]"))
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "eu-1", Namespace: "shop"}))
	require.Equal(t, []PolicyRef{{"eu-1", "shop", "p"}}, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "us-1", Namespace: "shop"}))
	require.Empty(t, Affected("eu-1", inv, Change{Kind: ChangePod, Cluster: "us-1", Namespace: "other"}))
	require.Equal(t, []PolicyRef{{"eu-1", "shop", "p"}}, Affected("eu-1", inv, Change{Kind: ChangeNamespace, Cluster: "eu-1", Namespace: "shop"}))
}
