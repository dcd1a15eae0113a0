//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

const gossipNS = "coastguard-system"

// gnDaemonPod is the name of cluster c's coastguardd pod (names are gossip
// identities: unique in the cluster set).
func gnDaemonPod(c *harness.Cluster) string { return "coastguard-" + c.Name }

// gossipService is the chart's headless gossip Service and its
// ServiceExport: Globalnet gives each backend pod its own global IP.
const gossipService = `apiVersion: v1
kind: Service
metadata: {name: coastguard, namespace: coastguard-system}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app.kubernetes.io/name: coastguard}
  ports:
  - {name: gossip-tcp, port: 7946, protocol: TCP}
  - {name: gossip-udp, port: 7946, protocol: UDP}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: coastguard, namespace: coastguard-system}
`

// gnMeshSetup: 3 Globalnet clusters on the dataplane (pod IPs not routed
// between clusters, per-pod global IPs DNATed at the gateways, cluster
// egress SNAT), Submariner Cluster objects with every global CIDR, the
// exported headless gossip Service and one daemon pod per cluster, and a db
// and a web pod per cluster.
func gnMeshSetup(t *testing.T, ctx context.Context) (*harness.Env, *harness.GlobalnetMesh) {
	env := dataplaneEnv(t, 3, harness.Options{})
	require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
	require.NoError(t, env.InstallCRDs(ctx, repoPath("test", "e2e", "testdata", "crds")))
	global := map[string]string{}
	for i, c := range env.Clusters {
		global[c.Name] = fmt.Sprintf("242.%d.0.0/16", i+1)
	}
	for _, c := range env.Clusters {
		for _, ns := range []string{submarinerNS, gossipNS, "shop"} {
			require.NoError(t, c.EnsureNamespace(ctx, ns, nil))
		}
		for _, r := range env.Clusters {
			applyYAML(t, ctx, c, submarinerClusterWith(r.Name, r.PodCIDR, r.ServiceCIDR, global[r.Name]))
		}
	}
	mesh, err := env.Dataplane().EnableGlobalnetMesh(global)
	require.NoError(t, err)
	for i, c := range env.Clusters {
		setAllocated(t, ctx, c, clusterGlobalEgressIPs, submarinerNS, "cluster-egress.submariner.io",
			map[string]any{"numberOfIPs": int64(1)}, mesh.ClusterEgressIP(c))
		applyYAML(t, ctx, c, []byte(gossipService))
		_, err := c.RunPod(ctx, gossipNS, gnDaemonPod(c), fmt.Sprintf("10.%d.0.50", i+1),
			map[string]string{"app.kubernetes.io/name": "coastguard"}, tcpPort("probe", 8080))
		require.NoError(t, err)
		runPod(t, ctx, c, "db-0", fmt.Sprintf("10.%d.0.10", i+1), map[string]string{"role": "db"})
		runPod(t, ctx, c, "web-0", fmt.Sprintf("10.%d.0.11", i+1), web)
	}
	return env, mesh
}

// TestGlobalnetMesh: a Globalnet cluster set whose daemons run in pod
// network namespaces and reach each other only through per-pod global IPs
// (docs/OPERATIONS.md "Globalnet"). Pod IPs are unreachable across
// clusters; a daemon with --advertise-global-ip waits, not ready and not
// joined, until its GlobalIngressIP is allocated; then the three daemons
// converge: an MCNP applied in cluster1 is enforced in cluster2 and
// cluster3, and cluster2's inventory (its global egress IP) reaches the
// others. Advertising pod IPs instead (the mode before
// --advertise-global-ip) does not form a working mesh.
func TestGlobalnetMesh(t *testing.T) {
	scenario(t, 3)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	env, mesh := gnMeshSetup(t, ctx)
	dp := env.Dataplane()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	bin, err := harness.Build("./cmd/coastguardd")
	require.NoError(t, err)

	bPodIP, err := dp.PodIP(b, gossipNS, gnDaemonPod(b))
	require.NoError(t, err)
	_, err = dp.DialWithin(ctx, a, gossipNS, gnDaemonPod(a), bPodIP, 8080, corev1.ProtocolTCP, time.Second)
	require.Error(t, err, "cluster1's daemon pod must not reach cluster2's pod IP %s under Globalnet", bPodIP)
	t.Logf("pod IP %s of cluster2's daemon pod unreachable from cluster1's: %v", bPodIP, err)

	// Fail closed: before its GlobalIngressIP exists the daemon does not join.
	first, err := env.StartDaemonInPod(a, gossipNS, gnDaemonPod(a), harness.DaemonOptions{Binary: bin, T: t,
		Args: []string{"--advertise-global-ip"}})
	require.NoError(t, err)
	waitNotJoining(t, ctx, first)

	ips := map[string]string{}
	for _, cl := range env.Clusters {
		ips[cl.Name], err = mesh.AllocatePodGlobalIP(ctx, cl, gossipNS, gnDaemonPod(cl), "coastguard")
		require.NoError(t, err)
	}
	ans, err := dp.Dial(ctx, a, gossipNS, gnDaemonPod(a), ips[b.Name], 8080, corev1.ProtocolTCP)
	require.NoError(t, err, "cluster1's daemon pod reaches cluster2's through its global IP")
	require.Equal(t, ips[a.Name], ans.Source, "cluster2 sees cluster1's daemon pod by its own global IP (per-pod SNAT)")
	require.Equal(t, gossipNS+"/"+gnDaemonPod(b), ans.Pod)
	t.Logf("global IPs %v; %s -> %s answered by %s, source seen %s", ips, a.Name, ips[b.Name], ans.Pod, ans.Source)

	ds := []*harness.Daemon{first}
	for _, cl := range []*harness.Cluster{b, c} {
		d, err := env.StartDaemonInPod(cl, gossipNS, gnDaemonPod(cl), harness.DaemonOptions{Binary: bin, T: t,
			Args: []string{"--advertise-global-ip"}, Seeds: []string{ips[a.Name] + ":7946"}})
		require.NoError(t, err)
		ds = append(ds, d)
	}
	for _, d := range ds {
		require.NoError(t, d.WaitReady(ctx, 90*time.Second))
		requireLogHas(t, d, "gossip started", ips[d.Cluster.Name]+":7946")
	}
	conv := applyAndWaitEnforced(t, ctx, env, "gn-from-web", b, mesh.ClusterEgressIP(b)+"/32", 60*time.Second)
	t.Logf("converged through global IPs only: MCNP applied in %s enforced in every cluster after %s (setup to convergence %s)",
		a.Name, conv.Round(time.Millisecond), time.Since(began).Round(time.Second))

	t.Run("pod IPs advertised: no working mesh", func(t *testing.T) { podIPMeshFails(t, ctx, env, bin, ds, ips) })
}

// waitNotJoining checks the fail-closed state: /readyz 503 naming the
// GlobalIngressIP, the metric at 0 and no gossip started.
func waitNotJoining(t *testing.T, ctx context.Context, d *harness.Daemon) {
	t.Helper()
	require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := d.Probe(ctx, "/readyz")
		return err != nil && strings.Contains(err.Error(), "not joining the mesh") &&
			strings.Contains(err.Error(), gossipNS+"/pod-"+d.NodeName), nil
	}), "readiness must name the missing GlobalIngressIP")
	m, err := d.Metrics(ctx)
	require.NoError(t, err)
	v, ok := harness.MetricValue(m, "coastguard_globalnet_advertise_ip_allocated", nil)
	require.True(t, ok && v == 0, "coastguard_globalnet_advertise_ip_allocated = %v (%v), want 0", v, ok)
	v, _ = harness.MetricValue(m, "coastguard_globalnet_advertise_problems_total", map[string]string{"reason": "not_allocated"})
	require.Equal(t, 1.0, v)
	tail, err := d.TailLog(200)
	require.NoError(t, err)
	require.NotContains(t, tail, "gossip started", "the daemon joined without an address to advertise")
}

// requireLogHas waits until a line of d's log holds all the parts.
func requireLogHas(t *testing.T, d *harness.Daemon, parts ...string) {
	t.Helper()
	require.NoError(t, harness.Eventually(context.Background(), 10*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		b, err := os.ReadFile(d.LogPath)
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(strings.Split(string(b), "\n"), func(l string) bool {
			for _, p := range parts {
				if !strings.Contains(l, p) {
					return false
				}
			}
			return true
		}), nil
	}), "%s log has no line with %q", d.Name, parts)
}

// everywhereFrom is an MCNP enforced in every cluster (clusterSelector {})
// that admits app=web pods of peerCluster to role=db pods.
func everywhereFrom(name, peerCluster string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: %s, namespace: shop}
spec:
  clusterSelector: {}
  podSelector: {matchLabels: {role: db}}
  ingress:
  - from:
    - clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: %s}}
      podSelector: {matchLabels: {app: web}}
`, name, peerCluster))
}

// applyAndWaitEnforced applies an MCNP in the first cluster (ingress to
// role=db from app=web of peer) and waits until every cluster has its
// generated NetworkPolicy and every cluster but the peer admits block (the
// peer's global egress IP: the peer's inventory came through gossip). It
// returns the time from apply to the last cluster.
func applyAndWaitEnforced(t *testing.T, ctx context.Context, env *harness.Env, name string, peer *harness.Cluster, block string, within time.Duration) time.Duration {
	t.Helper()
	origin := env.Clusters[0]
	start := time.Now()
	applyYAML(t, ctx, origin, everywhereFrom(name, peer.Name))
	seen := map[string][]string{}
	err := harness.Eventually(ctx, within, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		done := true
		for _, cl := range env.Clusters {
			nps, err := cl.ListNetworkPolicies(ctx, "shop", originSel(origin.Name))
			if err != nil {
				return false, err
			}
			seen[cl.Name] = blocksOf(nps...)
			if len(nps) == 0 || (cl != peer && !slices.Contains(seen[cl.Name], block)) {
				done = false
			}
		}
		return done, nil
	})
	require.NoError(t, err, "MCNP %s of %s not enforced in every cluster within %s (want %s except in %s); ipBlocks seen: %v",
		name, origin.Name, within, block, peer.Name, seen)
	return time.Since(start)
}

// podIPMeshFails restarts the daemons as before --advertise-global-ip:
// they advertise their pod IPs (the chart's POD_IP). The seed, cluster1's
// global IP, still answers the join, but every later packet goes to pod
// IPs that do not route across clusters, so an MCNP applied afterwards in
// cluster1 is not enforced in the other clusters.
func podIPMeshFails(t *testing.T, ctx context.Context, env *harness.Env, bin string, old []*harness.Daemon, ips map[string]string) {
	for _, d := range old {
		require.NoError(t, d.Stop())
	}
	a := env.Clusters[0]
	var ds []*harness.Daemon
	for _, cl := range env.Clusters {
		opts := harness.DaemonOptions{Binary: bin, T: t, NodeName: gnDaemonPod(cl) + "-podip"}
		if cl != a {
			opts.Seeds = []string{ips[a.Name] + ":7946"}
		}
		d, err := env.StartDaemonInPod(cl, gossipNS, gnDaemonPod(cl), opts)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	for _, d := range ds {
		requireLogHas(t, d, "gossip started", strings.Split(d.GossipAddr, ":")[0])
	}
	time.Sleep(5 * time.Second) // joins done, pod-IP members learnt
	applyYAML(t, ctx, a, everywhereFrom("gn-podip", env.Clusters[1].Name))
	const wait = 30 * time.Second
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		for _, cl := range env.Clusters[1:] {
			nps, err := cl.ListNetworkPolicies(ctx, "shop", originSel(a.Name))
			require.NoError(t, err)
			for _, np := range nps {
				require.NotContains(t, np.Name, "gn-podip", "%s enforces an MCNP of %s although the daemons advertise unreachable pod IPs", cl.Name, a.Name)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("advertising pod IPs: the MCNP applied in %s reached no other cluster in %s", a.Name, wait)
	for _, d := range ds {
		tail, err := d.TailLog(400)
		require.NoError(t, err)
		var bad []string
		for _, l := range strings.Split(tail, "\n") {
			if strings.Contains(l, "unreachable") || strings.Contains(l, "Suspect") || strings.Contains(l, "failed") {
				bad = append(bad, l)
			}
		}
		if len(bad) > 0 {
			t.Logf("%s: %d gossip failure lines, the last: %.300s", d.Name, len(bad), bad[len(bad)-1])
		}
	}
}
