//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// dataplaneEnv starts n clusters with the packet-level dataplane, or skips
// the test with one line naming what this machine lacks.
func dataplaneEnv(t *testing.T, n int, opts harness.Options) *harness.Env {
	t.Helper()
	if err := harness.CheckDataplaneSupport(); err != nil {
		t.Skipf("packet-level scenario skipped: %v", err)
	}
	opts.Dataplane = true
	if opts.Clusters == 0 && len(opts.Names) == 0 {
		opts.Clusters = n
	}
	return harness.Start(t, opts)
}

// startDaemons starts one coastguardd per cluster with opts (Binary
// defaults to a fresh build) and waits until each is ready.
func startDaemons(t *testing.T, ctx context.Context, env *harness.Env, opts harness.DaemonOptions) []*harness.Daemon {
	t.Helper()
	if opts.Binary == "" {
		bin, err := harness.Build("./cmd/coastguardd")
		require.NoError(t, err)
		opts.Binary = bin
	}
	var ds []*harness.Daemon
	for _, c := range env.Clusters {
		d, err := env.StartDaemon(c, opts)
		require.NoError(t, err)
		require.NoError(t, d.WaitReady(ctx, 60*time.Second))
		ds = append(ds, d)
	}
	return ds
}

func tcpPort(name string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP}
}

func udpPort(name string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolUDP}
}

// TestDataplaneEngineEnforcesPlainNetworkPolicy checks the dataplane itself
// with no coastguard: pods reach each other within and across clusters
// (with their own source IPs), and an ordinary NetworkPolicy is enforced by
// the engine on packets.
func TestDataplaneEngineEnforcesPlainNetworkPolicy(t *testing.T) {
	scenario(t, 2)
	env := dataplaneEnv(t, 2, harness.Options{})
	dp := env.Dataplane()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := env.Clusters[0], env.Clusters[1]
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	_, err := a.RunPod(ctx, "shop", "db-0", "10.1.0.10", map[string]string{"role": "db"}, tcpPort("pg", 5432), udpPort("dns", 53))
	require.NoError(t, err)
	_, err = a.RunPod(ctx, "shop", "web-0", "10.1.0.11", web)
	require.NoError(t, err)
	_, err = b.RunPod(ctx, "shop", "web-1", "10.2.0.10", web)
	require.NoError(t, err)
	_, err = b.RunPod(ctx, "shop", "other-1", "10.2.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)

	all := func(_, _ harness.PodEndpoint, _ corev1.ContainerPort) bool { return true }
	m := dp.ProbeMatrix(ctx, all, nil)
	require.Empty(t, m.Unexpected(), "without policies everything connects:\n%s", m.Table(true))

	// An ordinary NetworkPolicy in cluster a admits only b's web-1 by
	// ipBlock, on TCP 5432.
	applyYAML(t, ctx, a, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db, namespace: shop}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - ipBlock: {cidr: 10.2.0.10/32}
    ports:
    - {protocol: TCP, port: 5432}
`))
	want := func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		if to.Name != "db-0" {
			return true
		}
		return from.Name == "web-1" && port.Protocol == corev1.ProtocolTCP
	}
	var last harness.Matrix
	err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		last = dp.ProbeMatrix(ctx, want, nil)
		return len(last.Unexpected()) == 0, nil
	})
	require.NoError(t, err, "engine enforcement:\n%s", last.Table(false))
	t.Logf("plain NetworkPolicy on packets:\n%s", last.Table(false))
}

// remoteServiceSetup starts two clusters with Services on the dataplane, a
// db pod in cluster2 behind Service shop/db (port 15432 -> named targetPort
// pg, 5432) and a web pod in cluster1; it returns the ClusterIP.
func remoteServiceSetup(t *testing.T, ctx context.Context) (*harness.Env, *harness.Cluster, *harness.Cluster, string) {
	t.Helper()
	scenario(t, 2)
	env := dataplaneEnv(t, 2, harness.Options{Services: true})
	require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
	// MCS ServiceExport (Lighthouse installs it in real cluster sets)
	require.NoError(t, env.InstallCRDs(ctx, repoPath("test", "e2e", "testdata", "crds")))
	a, b := env.Clusters[0], env.Clusters[1]
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	_, err := b.RunPod(ctx, "shop", "db-0", "10.2.0.10", map[string]string{"role": "db"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	_, err = a.RunPod(ctx, "shop", "web-0", "10.1.0.10", web)
	require.NoError(t, err)
	svc, err := b.Client.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"role": "db"},
			Ports:    []corev1.ServicePort{{Name: "pg", Port: 15432, TargetPort: intstr.FromString("pg"), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return env, a, b, svc.Spec.ClusterIP
}

// TestPacketsRemoteClusterIP is the traffic Submariner users send most: a
// pod in one cluster connects to another cluster's Service by its
// ClusterIP (what Lighthouse answers for <svc>.<ns>.svc.clusterset.local).
// The packet is routed through the gateways and translated by kube-proxy
// in the exporting cluster; the backend sees the client's own pod IP. An
// egress MCNP that admits every backend of the exported Service admits the
// ClusterIP path too; with a backend it does not admit, it fails closed.
func TestPacketsRemoteClusterIP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, a, b, clusterIP := remoteServiceSetup(t, ctx)
	dp := env.Dataplane()
	var err error
	t.Logf("cluster2 Service shop/db: ClusterIP %s port 15432 -> named targetPort pg (5432)", clusterIP)

	dialSvc := func() (harness.Answer, error) {
		return dp.Dial(ctx, a, "shop", "web-0", clusterIP, 15432, corev1.ProtocolTCP)
	}
	var ans harness.Answer
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		ans, err = dialSvc()
		return err == nil, err
	}), "cluster1 pod -> cluster2 ClusterIP")
	require.Equal(t, "shop/db-0", ans.Pod)
	require.Equal(t, "10.1.0.10", ans.Source, "the backend must see the client pod's own IP (no masquerade across the cable)")

	startDaemons(t, ctx, env, harness.DaemonOptions{})
	// An ingress MCNP in cluster2 admitting web pods of cluster1: the
	// remote ClusterIP path is admitted, because the backend sees the pod IP.
	applyYAML(t, ctx, b, []byte(dbFromCluster1Web))
	_, err = a.RunPod(ctx, "shop", "other-0", "10.1.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, denied := dp.Dial(ctx, a, "shop", "other-0", clusterIP, 15432, corev1.ProtocolTCP)
		_, allowed := dialSvc()
		return denied != nil && allowed == nil, nil
	}), "ingress MCNP on the remote ClusterIP path: web admitted, other denied")

	// An egress MCNP in cluster1 admitting cluster2's db pods that are not
	// replicas. Once cluster2 exports the Service (ServiceExport), every
	// backend of it is admitted on its target port (pg), so the generated
	// policy also admits the ClusterIP on the service port 15432
	// (docs/SEMANTICS.md "Services", the exactness rule).
	applyYAML(t, ctx, b, []byte(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: db, namespace: shop}
`))
	applyYAML(t, ctx, a, webEgress(inCluster2, nonReplicaDB))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, podErr := dp.Dial(ctx, a, "shop", "web-0", "10.2.0.10", 5432, corev1.ProtocolTCP)
		ans, svcErr := dialSvc()
		return podErr == nil && svcErr == nil && ans.Pod == "shop/db-0", nil
	}), "egress MCNP admitting every backend of the exported Service: pod IP and ClusterIP paths allowed")
	waitCondition(t, ctx, a, "web-egress", "Degraded", "False", "AsExpected")
	t.Logf("egress MCNP in cluster1: cluster2 pod IP and exported ClusterIP %s:15432 allowed", clusterIP)

	// A second backend the egress rule does not admit: kube-proxy in
	// cluster2 could pick it, so the address rule is withdrawn (fail
	// closed) and the MCNP is Degraded naming the Service.
	_, err = b.RunPod(ctx, "shop", "db-1", "10.2.0.11", map[string]string{"role": "db", "replica": "true"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, svcErr := dialSvc()
		return svcErr != nil, nil
	}), "a backend not admitted: the ClusterIP path is denied")
	msg := waitCondition(t, ctx, a, "web-egress", "Degraded", "True", "ServiceBackendsPartiallyAdmitted")
	require.Contains(t, msg, "cluster2/shop/db")
	t.Logf("Degraded: %s", msg)
	for i := 0; i < 10; i++ {
		ans, err := dialSvc()
		require.Error(t, err, "no connection through the ClusterIP may reach any backend (got %s)", ans.Pod)
	}
	_, podErr := dp.Dial(ctx, a, "shop", "web-0", "10.2.0.10", 5432, corev1.ProtocolTCP)
	require.NoError(t, podErr, "db-0 is still admitted by its pod IP")
	_, podErr = dp.Dial(ctx, a, "shop", "web-0", "10.2.0.11", 5432, corev1.ProtocolTCP)
	require.Error(t, podErr, "db-1 is not admitted")

	// Removing the replica label admits every backend again.
	_, err = b.Client.CoreV1().Pods("shop").Patch(ctx, "db-1", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"replica":null}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	seen := map[string]bool{}
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		ans, svcErr := dialSvc()
		if svcErr == nil {
			seen[ans.Pod] = true
		}
		return seen["shop/db-0"] && seen["shop/db-1"], nil
	}), "every backend admitted again: the ClusterIP reaches both")
	waitCondition(t, ctx, a, "web-egress", "Degraded", "False", "AsExpected")
}

// dbFromWeb is an MCNP that isolates the role=db pods of every cluster
// except from app=web pods of every cluster, on ports (a YAML flow
// sequence, "" for every port).
func dbFromWeb(name, ports string) []byte {
	y := `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: ` + name + `, namespace: shop}
spec:
  clusterSelector: {}
  podSelector: {matchLabels: {role: db}}
  ingress:
  - from:
    - clusterSelector: {}
      podSelector: {matchLabels: {app: web}}
`
	if ports != "" {
		y += "    ports: " + ports + "\n"
	}
	return []byte(y)
}

// webEgress is an MCNP isolating the egress of the applying cluster's
// app=web pods to the pods one peer selects (clusterSelector and
// podSelector in YAML flow form) on the named port pg.
func webEgress(clusterSelector, podSelector string) []byte {
	return []byte(`apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: web-egress, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
  egress:
  - to:
    - clusterSelector: ` + clusterSelector + `
      podSelector: ` + podSelector + `
    ports: [{protocol: TCP, port: pg}]
`)
}

// dbFromCluster1Web isolates the applying cluster's dbs except from
// cluster1's web pods on the named port pg.
const dbFromCluster1Web = `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: db-from-web, namespace: shop}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - clusterSelector: {matchLabels: {cluster.clusterset.k8s.io: cluster1}}
      podSelector: {matchLabels: {app: web}}
    ports: [{port: pg}]
`

// Selectors for webEgress.
const (
	inCluster2   = "{matchLabels: {cluster.clusterset.k8s.io: cluster2}}"
	nonReplicaDB = "{matchLabels: {role: db}, matchExpressions: [{key: replica, operator: DoesNotExist}]}"
)

// packetsEnv starts n clusters on the dataplane with the CRDs and a shop
// namespace in each, and a context bounded by timeout.
func packetsEnv(t *testing.T, n int, timeout time.Duration) (*harness.Env, context.Context) {
	t.Helper()
	scenario(t, n)
	env := dataplaneEnv(t, n, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	return env, ctx
}

// TestPacketsPartitionAndEndPort: an MCNP created in cluster3 protects a
// db in cluster1 with an endPort range. While cluster3 is cut off,
// cluster1 keeps enforcing the last-known policy on packets and still
// follows cluster2's pod changes; after the heal nothing changes. Then the
// MCNP is changed in its origin, and cluster2 is decommissioned.
func TestPacketsPartitionAndEndPort(t *testing.T) {
	env, ctx := packetsEnv(t, 3, 5*time.Minute)
	dp := env.Dataplane()
	c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	_, err := c1.RunPod(ctx, "shop", "db-0", "10.1.0.10", map[string]string{"role": "db"}, tcpPort("pg", 5432), tcpPort("pg2", 5433), tcpPort("admin", 5440))
	require.NoError(t, err)
	_, err = c2.RunPod(ctx, "shop", "web-0", "10.2.0.10", web)
	require.NoError(t, err)
	_, err = c2.RunPod(ctx, "shop", "other-0", "10.2.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	_, err = c3.RunPod(ctx, "shop", "web-1", "10.3.0.10", web)
	require.NoError(t, err)
	ds := startDaemons(t, ctx, env, harness.DaemonOptions{})
	applyYAML(t, ctx, c3, dbFromWeb("db-range", "[{protocol: TCP, port: 5432, endPort: 5433}]"))
	labels := map[string]string{"web-0": "web", "other-0": "other", "web-1": "web"}
	want := func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		if to.Name != "db-0" {
			return true
		}
		return labels[from.Name] == "web" && port.ContainerPort >= 5432 && port.ContainerPort <= 5433
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, "MCNP from cluster3 with endPort 5432-5433")

	require.NoError(t, env.Isolate(c3))
	_, err = c2.RunPod(ctx, "shop", "web-2", "10.2.0.12", web)
	require.NoError(t, err)
	labels["web-2"] = "web"
	patchLabels(t, ctx, c2, "shop", "other-0", `{"metadata":{"labels":{"app":"web"}}}`)
	labels["other-0"] = "web"
	waitMatrix(t, ctx, dp, want, 60*time.Second, "origin cluster3 partitioned: last-known policy enforced, cluster2's changes followed")

	require.NoError(t, env.Heal())
	_, err = c3.RunPod(ctx, "shop", "web-3", "10.3.0.11", web)
	require.NoError(t, err)
	labels["web-3"] = "web"
	waitMatrix(t, ctx, dp, want, 60*time.Second, "healed: cluster3's new pod admitted too")

	// The MCNP changes in its origin: only the admin port is admitted now.
	applyYAML(t, ctx, c3, dbFromWeb("db-range", "[{protocol: TCP, port: 5440}]"))
	want = func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		if to.Name != "db-0" {
			return true
		}
		return labels[from.Name] == "web" && port.ContainerPort == 5440
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, "MCNP changed to port 5440")

	// cluster2 is decommissioned: its pods leave every policy, so its web
	// pods lose access to cluster1's db (fail closed); cluster3's keep it.
	out, err := exec.CommandContext(ctx, ds[1].Path, "decommission", "--admin-addr", ds[1].AdminAddr).CombinedOutput()
	require.NoError(t, err, "coastguardd decommission: %s", out)
	inC2 := func(name string) bool { return name == "web-0" || name == "web-2" || name == "other-0" }
	base := want
	want = func(from, to harness.PodEndpoint, port corev1.ContainerPort) bool {
		if to.Name == "db-0" && inC2(from.Name) {
			return false
		}
		return base(from, to, port)
	}
	waitMatrix(t, ctx, dp, want, 60*time.Second, "cluster2 decommissioned: its pods denied, cluster3's admitted")
}

// TestPacketsGlobalnet: cluster2 has Globalnet, so its pods reach cluster1
// from its cluster-wide global egress IP. coastguard renders cluster2's
// peers as those IPs: on packets the web pod is admitted and, as
// docs/SEMANTICS.md says (GlobalnetCoarseIdentity), so is every other pod
// of cluster2 that shares the IP. With --globalnet-policy=drop both are
// denied (fail closed).
func TestPacketsGlobalnet(t *testing.T) {
	scenario(t, 2)
	env := dataplaneEnv(t, 2, harness.Options{})
	dp := env.Dataplane()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
	require.NoError(t, env.InstallCRDs(ctx, repoPath("test", "e2e", "testdata", "crds")))
	a, g := env.Clusters[0], env.Clusters[1]
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, submarinerNS, nil))
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
		applyYAML(t, ctx, c, submarinerCluster(a.Name, a.PodCIDR, ""))
		applyYAML(t, ctx, c, submarinerCluster(g.Name, g.PodCIDR, "242.2.0.0/16"))
	}
	require.NoError(t, dp.EnableGlobalnet(g, "242.2.0.0/16", "242.2.0.1"))
	setAllocated(t, ctx, g, clusterGlobalEgressIPs, submarinerNS, "cluster-egress.submariner.io", map[string]any{"numberOfIPs": int64(1)}, "242.2.0.1")
	_, err := a.RunPod(ctx, "shop", "db-0", "10.1.0.10", map[string]string{"role": "db"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	_, err = a.RunPod(ctx, "shop", "local-0", "10.1.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	_, err = g.RunPod(ctx, "shop", "web-0", "10.2.0.10", web)
	require.NoError(t, err)
	_, err = g.RunPod(ctx, "shop", "other-0", "10.2.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)

	ans, err := dp.Dial(ctx, g, "shop", "web-0", "10.1.0.10", 5432, corev1.ProtocolTCP)
	require.NoError(t, err)
	require.Equal(t, "242.2.0.1", ans.Source, "cluster1 sees cluster2's global egress IP, not the pod IP")

	ds := startDaemons(t, ctx, env, harness.DaemonOptions{ClusterCIDRs: []string{}})
	applyYAML(t, ctx, a, policyFrom("from-globalnet", g.Name))
	coarse := func(from, to harness.PodEndpoint, _ corev1.ContainerPort) bool {
		// every pod of cluster2 shares the cluster-wide egress IP; the
		// local non-web pod shows the policy is in force
		return to.Name != "db-0" || from.Cluster == g
	}
	waitMatrix(t, ctx, dp, coarse, 60*time.Second, "Globalnet cluster-wide egress IP admitted (coarse identity)")
	waitCondition(t, ctx, a, "from-globalnet", "Degraded", "True", "GlobalnetCoarseIdentity")

	for _, d := range ds {
		require.NoError(t, d.Stop())
	}
	startDaemons(t, ctx, env, harness.DaemonOptions{ClusterCIDRs: []string{}, Args: []string{"--globalnet-policy=drop"}})
	closed := func(from, to harness.PodEndpoint, _ corev1.ContainerPort) bool { return to.Name != "db-0" }
	waitMatrix(t, ctx, dp, closed, 60*time.Second, "--globalnet-policy=drop: cluster2's pods denied")
}

// TestPacketsRemoteClusterIPNotOwned: cluster1 knows (independently of
// gossip, --cluster-cidrs) a service CIDR for cluster2 that does not hold
// the exported Service's ClusterIP. The address is never rendered, even
// though the egress rule admits every backend: the ClusterIP path stays
// denied and the MCNP is Degraded naming the Service.
func TestPacketsRemoteClusterIPNotOwned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, a, b, clusterIP := remoteServiceSetup(t, ctx)
	dp := env.Dataplane()
	applyYAML(t, ctx, b, []byte(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: db, namespace: shop}
`))
	bin, err := harness.Build("./cmd/coastguardd")
	require.NoError(t, err)
	wrong := []string{a.Name + "=" + a.PodCIDR, a.Name + ":service=" + a.ServiceCIDR,
		b.Name + "=" + b.PodCIDR, b.Name + ":service=10.250.0.0/16"}
	for _, c := range env.Clusters {
		opts := harness.DaemonOptions{Binary: bin}
		if c == a {
			opts.ClusterCIDRs = wrong
		}
		d, err := env.StartDaemon(c, opts)
		require.NoError(t, err)
		require.NoError(t, d.WaitReady(ctx, 60*time.Second))
	}
	applyYAML(t, ctx, a, webEgress(inCluster2, "{matchLabels: {role: db}}"))
	msg := waitCondition(t, ctx, a, "web-egress", "Degraded", "True", "ServiceIPOutsideServiceCIDR")
	require.Contains(t, msg, "cluster2/shop/db")
	t.Logf("ClusterIP %s outside cluster2's service CIDR as cluster1 knows it (10.250.0.0/16): %s", clusterIP, msg)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		_, podErr := dp.Dial(ctx, a, "shop", "web-0", "10.2.0.10", 5432, corev1.ProtocolTCP)
		return podErr == nil, nil
	}), "the pod IP path is allowed")
	for i := 0; i < 5; i++ {
		ans, err := dp.Dial(ctx, a, "shop", "web-0", clusterIP, 15432, corev1.ProtocolTCP)
		require.Error(t, err, "the unowned ClusterIP must never be admitted (reached %s)", ans.Pod)
	}
}
