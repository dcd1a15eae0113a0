package enforce

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// benchInventory builds nClusters clusters (4 regions) × podsPerCluster pods
// spread over nNS namespaces and 5 apps, plus nPolicies MCNPs originated
// round-robin by the clusters, enforced everywhere ({}), mixing local,
// region-wide, all-cluster, namespaceSelector and named-port peers.
//
// nApps sets selector diversity: pod i has app (i % nApps) and lives in
// namespace (i % nNS); policy i lives in namespace (i % nNS) and its peers
// select apps of that namespace derived from i. With nApps = 5 every policy
// of a namespace shares its peer selectors (worst case for incremental
// work: one pod change affects ~50 policies of ~5000 remote peers each);
// with nApps = 200 selectors are diverse.
func benchInventory(b *testing.B, nClusters, podsPerCluster, nNS, nPolicies, nApps int) *Inventory {
	inv := NewInventory()
	var cidrs []string
	for c := 0; c < nClusters; c++ {
		cidrs = append(cidrs, fmt.Sprintf("c%03d=10.%d.0.0/16", c, c))
	}
	inv.SetNetworks(nets(b, cidrs...))
	for c := 0; c < nClusters; c++ {
		id := fmt.Sprintf("c%03d", c)
		inv.SetCluster(Cluster{ID: id, Labels: l("region", fmt.Sprintf("r%d", c%4))})
		for n := 0; n < nNS; n++ {
			inv.SetNamespace(id, Namespace{Name: fmt.Sprintf("ns%02d", n), Labels: l("team", fmt.Sprintf("t%d", n%3))})
		}
		for i := 0; i < podsPerCluster; i++ {
			p := pod(fmt.Sprintf("ns%02d", i%nNS), fmt.Sprintf("pod%05d", i),
				l("app", fmt.Sprintf("app%d", i%nApps), "version", fmt.Sprintf("v%d", i%2)),
				fmt.Sprintf("10.%d.%d.%d", c, i/250, i%250+1))
			p.Ports = []Port{{Name: "http", Port: 8080 + int32(i%3)}, {Name: "metrics", Port: 9100}}
			inv.SetPod(id, p)
		}
	}
	peers := []string{
		"{podSelector: {matchLabels: {app: app%d}}}",
		"{clusterSelector: {matchLabels: {region: r1}}, podSelector: {matchLabels: {app: app%d}}}",
		"{clusterSelector: {}, podSelector: {matchLabels: {app: app%d, version: v1}}}",
		"{clusterSelector: {matchExpressions: [{key: region, operator: In, values: [r2]}]}, namespaceSelector: {matchLabels: {team: t1}}, podSelector: {matchLabels: {app: app%d}}}",
	}
	// peerApp picks an app living in namespace i % nNS.
	peerApp := func(i, k int) int { return (i%nNS + nNS*(i/nNS+k)) % nApps }
	for i := 0; i < nPolicies; i++ {
		s := fmt.Sprintf("clusterSelector: {}\npodSelector: {matchLabels: {app: app%d}}\n", peerApp(i, 0))
		s += "ingress:\n- from: [" + fmt.Sprintf(peers[(i/nNS)%len(peers)], peerApp(i, 1)) + "]\n  ports: [{port: http}]\n"
		s += "egress:\n- to: [" + fmt.Sprintf(peers[(i/nNS+1)%len(peers)], peerApp(i, 2)) + "]\n  ports: [{port: http}, {port: 53, protocol: UDP}]\n"
		p := pol(b, fmt.Sprintf("c%03d", i%nClusters), fmt.Sprintf("ns%02d", i%nNS), fmt.Sprintf("policy-%04d", i), s)
		if err := inv.SetPolicy(p); err != nil {
			b.Fatal(err)
		}
	}
	return inv
}

func benchFull(b *testing.B, inv *Inventory) {
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		n = len(Translate("c000", inv))
	}
	b.ReportMetric(float64(n), "netpols")
}

// 300 MCNPs × 750 pods (3 clusters × 250): the conflict-detection thesis's
// largest setup. Target: < 100 ms per full regeneration.
func BenchmarkTranslateFull_300x750(b *testing.B) {
	benchFull(b, benchInventory(b, 3, 250, 10, 300, 50))
}

// 100 clusters × 1000 pods with 1000 MCNPs.
func BenchmarkTranslateFull_100clusters_1000pods_1000mcnp(b *testing.B) {
	benchFull(b, benchInventory(b, 100, 1000, 20, 1000, 200))
}

func BenchmarkTranslateFull_100clusters_1000pods_1000mcnp_shared(b *testing.B) {
	benchFull(b, benchInventory(b, 100, 1000, 20, 1000, 5))
}

func benchIncremental(b *testing.B, inv *Inventory, nClusters int, app string) {
	b.ReportAllocs()
	b.ResetTimer()
	affected := 0
	for i := 0; i < b.N; i++ {
		// A pod in a remote cluster changes labels (and IP).
		c := fmt.Sprintf("c%03d", 1+i%(nClusters-1))
		// pod00022 lives in ns02; flip its version label (matched by the
		// {clusterSelector: {}, version: v1} peers) and its IP.
		old := l("app", app, "version", fmt.Sprintf("v%d", (i+1)%2))
		p := pod("ns02", "pod00022", l("app", app, "version", fmt.Sprintf("v%d", i%2)), fmt.Sprintf("10.%d.200.%d", 1+i%(nClusters-1), i%250+1))
		inv.SetPod(c, p)
		refs := Affected("c000", inv, Change{Kind: ChangePod, Cluster: c, Namespace: "ns02", Labels: []labels.Labels{labels.Set(old), labels.Set(p.Labels)}})
		_ = EvaluateAll("c000", inv, refs)
		affected = len(refs)
	}
	b.ReportMetric(float64(affected), "affected")
}

func BenchmarkIncrementalPod_300x750(b *testing.B) {
	benchIncremental(b, benchInventory(b, 3, 250, 10, 300, 50), 3, "app22")
}

func BenchmarkIncrementalPod_100clusters_1000pods_1000mcnp(b *testing.B) {
	benchIncremental(b, benchInventory(b, 100, 1000, 20, 1000, 200), 100, "app22")
}

func BenchmarkIncrementalPod_100clusters_1000pods_1000mcnp_shared(b *testing.B) {
	benchIncremental(b, benchInventory(b, 100, 1000, 20, 1000, 5), 100, "app2")
}

// benchServiceInventory: nClusters clusters × podsPerCluster pods over nNS
// namespaces; every cluster exports nSvc Services (svcK selects appK, whose
// pods all live in one namespace; port 80 -> named targetPort http). Each
// of nPolicies MCNPs (enforced everywhere) names Services as ingress and
// egress peers in every cluster: as service peers, or (servicePeers false)
// as the equivalent namespace+pod selector peers, which select the same
// backends and get the same ClusterIP rules.
func benchServiceInventory(b testing.TB, nClusters, podsPerCluster, nNS, nSvc, nPolicies int, servicePeers bool) *Inventory {
	inv := NewInventory()
	var cidrs []string
	for c := 0; c < nClusters; c++ {
		cidrs = append(cidrs, fmt.Sprintf("c%03d=10.%d.0.0/16", c, c), fmt.Sprintf("c%03d:service=10.%d.0.0/16", c, 100+c))
	}
	inv.SetNetworks(nets(b, cidrs...))
	for c := 0; c < nClusters; c++ {
		id := fmt.Sprintf("c%03d", c)
		inv.SetCluster(Cluster{ID: id})
		for n := 0; n < nNS; n++ {
			inv.SetNamespace(id, Namespace{Name: fmt.Sprintf("ns%02d", n)})
		}
		for i := 0; i < podsPerCluster; i++ {
			p := pod(fmt.Sprintf("ns%02d", i%nNS), fmt.Sprintf("pod%05d", i), l("app", fmt.Sprintf("app%d", i%nSvc)),
				fmt.Sprintf("10.%d.%d.%d", c, i/250, i%250+1))
			p.Ports = []Port{{Name: "http", Port: 8080}}
			inv.SetPod(id, p)
		}
		for k := 0; k < nSvc; k++ {
			inv.SetService(id, Service{Namespace: fmt.Sprintf("ns%02d", k%nNS), Name: fmt.Sprintf("svc%03d", k),
				ClusterIPs: []string{fmt.Sprintf("10.%d.%d.%d", 100+c, k/250, k%250+1)}, Selector: l("app", fmt.Sprintf("app%d", k)),
				Ports: []ServicePort{{Name: "http", Port: 80, TargetPortName: "http"}}})
		}
	}
	peer := func(k int) string {
		if servicePeers {
			return fmt.Sprintf("{service: {name: svc%03d, namespace: ns%02d, clusterSelector: {}}}", k, k%nNS)
		}
		return fmt.Sprintf("{clusterSelector: {}, namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ns%02d}}, podSelector: {matchLabels: {app: app%d}}}", k%nNS, k)
	}
	for i := 0; i < nPolicies; i++ {
		s := fmt.Sprintf("clusterSelector: {}\npodSelector: {matchLabels: {app: app%d}}\n", i%nSvc)
		s += "ingress:\n- from: [" + peer((i+1)%nSvc) + "]\n  ports: [{port: http}]\n"
		s += "egress:\n- to: [" + peer((i+2)%nSvc) + "]\n  ports: [{port: http}]\n"
		if err := inv.SetPolicy(pol(b, fmt.Sprintf("c%03d", i%nClusters), fmt.Sprintf("ns%02d", i%nNS), fmt.Sprintf("policy-%04d", i), s)); err != nil {
			b.Fatal(err)
		}
	}
	return inv
}

// 10 clusters × 1000 exported Services (100 per cluster) × 1000 pods per
// cluster, 1000 MCNPs naming Services: a full regeneration, service peers
// against the equivalent selector peers.
func BenchmarkTranslateFull_ServicePeers_10clusters_100svc(b *testing.B) {
	benchFull(b, benchServiceInventory(b, 10, 1000, 20, 100, 1000, true))
}

func BenchmarkTranslateFull_SelectorPeers_10clusters_100svc(b *testing.B) {
	benchFull(b, benchServiceInventory(b, 10, 1000, 20, 100, 1000, false))
}

// A backend of svc022 changes IP in a remote cluster: Affected plus the
// re-evaluation of what it returns.
func benchServiceIncremental(b *testing.B, servicePeers bool) {
	inv := benchServiceInventory(b, 10, 1000, 20, 100, 1000, servicePeers)
	b.ReportAllocs()
	b.ResetTimer()
	affected := 0
	for i := 0; i < b.N; i++ {
		c := fmt.Sprintf("c%03d", 1+i%9)
		p := pod("ns02", "pod00022", l("app", "app22"), fmt.Sprintf("10.%d.200.%d", 1+i%9, i%250+1))
		p.Ports = []Port{{Name: "http", Port: 8080}}
		inv.SetPod(c, p)
		refs := Affected("c000", inv, Change{Kind: ChangePod, Cluster: c, Namespace: "ns02", Labels: []labels.Labels{labels.Set(p.Labels)}})
		_ = EvaluateAll("c000", inv, refs)
		affected = len(refs)
	}
	b.ReportMetric(float64(affected), "affected")
}

func BenchmarkIncrementalPod_ServicePeers_10clusters_100svc(b *testing.B) {
	benchServiceIncremental(b, true)
}

func BenchmarkIncrementalPod_SelectorPeers_10clusters_100svc(b *testing.B) {
	benchServiceIncremental(b, false)
}
