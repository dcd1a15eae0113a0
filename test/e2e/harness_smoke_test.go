//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	mcnpv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestHarnessSmoke checks the harness itself on three real clusters: their
// isolation, the CRD, simulated pods, kubectl, CRD validation, daemon process
// control, partitions, and that cleanup leaves nothing behind.
func TestHarnessSmoke(t *testing.T) {
	ctx := t.Context()
	env := harness.Start(t, harness.Options{Clusters: 3})
	require.Len(t, env.Clusters, 3)
	t.Logf("startup of etcd + 3 kube-apiservers: %s", env.StartupTime.Round(time.Millisecond))
	logRSS(t, env)
	c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]

	t.Run("clusters are separate", func(t *testing.T) {
		_, err := c1.CreateNamespace(ctx, "only-in-one", map[string]string{"team": "a"})
		require.NoError(t, err)
		_, err = c2.Client.CoreV1().Namespaces().Get(ctx, "only-in-one", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "namespace of %s visible in %s: %v", c1.Name, c2.Name, err)
		for _, c := range env.Clusters {
			out, _, err := c.Kubectl(ctx, "get", "--raw", "/version")
			require.NoError(t, err)
			assert.Contains(t, out, `"gitVersion": "v1.33`, "%s", c.Name)
		}
		seen := map[string]bool{}
		for _, c := range env.Clusters {
			assert.False(t, seen[c.GossipIP], "gossip IP %s reused", c.GossipIP)
			seen[c.GossipIP] = true
		}
	})

	t.Run("simulated pod lifecycle", func(t *testing.T) {
		_, err := c1.CreateNamespace(ctx, "shop", map[string]string{"team": "shop"})
		require.NoError(t, err)
		_, err = c1.CreatePod(ctx, "shop", "web-0", map[string]string{"app": "web"},
			corev1.ContainerPort{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP})
		require.NoError(t, err)
		p, err := c1.Client.CoreV1().Pods("shop").Get(ctx, "web-0", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, corev1.PodPending, p.Status.Phase)
		assert.Empty(t, p.Status.PodIP)

		_, err = c1.SetPodStatus(ctx, "shop", "web-0", "10.244.1.5", corev1.PodRunning)
		require.NoError(t, err)
		p, err = c1.Client.CoreV1().Pods("shop").Get(ctx, "web-0", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, corev1.PodRunning, p.Status.Phase)
		assert.Equal(t, "10.244.1.5", p.Status.PodIP)
		require.Len(t, p.Status.PodIPs, 1)
		assert.Equal(t, "10.244.1.5", p.Status.PodIPs[0].IP)
		assert.Equal(t, int32(8080), p.Spec.Containers[0].Ports[0].ContainerPort)

		// Re-IP, as after a sandbox recreation.
		_, err = c1.SetPodStatus(ctx, "shop", "web-0", "10.244.1.6", corev1.PodRunning)
		require.NoError(t, err)
		out, _, err := c1.Kubectl(ctx, "get", "pod", "-n", "shop", "web-0", "-o", "jsonpath={.status.podIP} {.status.phase}")
		require.NoError(t, err)
		assert.Equal(t, "10.244.1.6 Running", out)

		_, err = c1.SetPodStatus(ctx, "shop", "web-0", "not-an-ip", corev1.PodRunning)
		assert.ErrorContains(t, err, "not-an-ip")

		require.NoError(t, c1.DeletePod(ctx, "shop", "web-0"))
		_, err = c1.Client.CoreV1().Pods("shop").Get(ctx, "web-0", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "pod still there: %v", err)
		require.NoError(t, c1.DeletePod(ctx, "shop", "web-0"), "deleting a missing pod is not an error")
	})

	t.Run("NetworkPolicy through kubectl", func(t *testing.T) {
		np := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-web
  namespace: shop
  labels:
    app.kubernetes.io/managed-by: coastguard
spec:
  podSelector:
    matchLabels: {app: web}
  ingress:
  - from:
    - ipBlock: {cidr: 10.245.0.7/32}
    ports:
    - {protocol: TCP, port: 8080}
`
		_, _, err := c1.KubectlInput(ctx, []byte(np), "apply", "-f", "-")
		require.NoError(t, err)
		nps, err := c1.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
		require.NoError(t, err)
		require.Len(t, nps, 1)
		assert.Equal(t, "10.245.0.7/32", nps[0].Spec.Ingress[0].From[0].IPBlock.CIDR)
		assert.Equal(t, intstr.FromInt32(8080), *nps[0].Spec.Ingress[0].Ports[0].Port)
		nps, err = c2.ListNetworkPolicies(ctx, "", "")
		require.NoError(t, err)
		assert.Empty(t, nps, "policy leaked into %s", c2.Name)
	})

	t.Run("MCNP validation through kubectl", func(t *testing.T) {
		require.NoError(t, env.InstallCRDs(ctx, crdDir(t)), "the CRD must install on a real apiserver")
		require.NoError(t, c1.EnsureNamespace(ctx, "shop", nil))
		for _, c := range env.Clusters {
			out, _, err := c.Kubectl(ctx, "get", "crd", "multiclusternetworkpolicies.networking.submariner.io",
				"-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
			require.NoError(t, err)
			assert.Equal(t, "True", out, "%s", c.Name)
		}
		valid := `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: db, namespace: shop}
spec:
  clusterSelector: {matchLabels: {region: eu}}
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - clusterSelector: {}
      podSelector: {matchLabels: {role: backend}}
    ports:
    - {protocol: TCP, port: 5432}
`
		_, _, err := c1.KubectlInput(ctx, []byte(valid), "apply", "-f", "-")
		require.NoError(t, err)
		got, err := c1.Dynamic.Resource(mcnpv1.GroupVersionResource).Namespace("shop").Get(ctx, "db", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "eu", got.Object["spec"].(map[string]any)["clusterSelector"].(map[string]any)["matchLabels"].(map[string]any)["region"])
		out, _, err := c1.Kubectl(ctx, "get", "mcnp", "-n", "shop", "-o", "name")
		require.NoError(t, err)
		assert.Equal(t, "multiclusternetworkpolicy.networking.submariner.io/db\n", out)

		for _, tc := range []struct {
			name, spec string
			want       []string
		}{
			{"unknown policy type", `
  podSelector: {}
  policyTypes: [Sideways]`, []string{"spec.policyTypes[0]", "Sideways"}},
			{"ipBlock combined with selector", `
  podSelector: {}
  ingress:
  - from:
    - ipBlock: {cidr: 10.0.0.0/8}
      podSelector: {matchLabels: {a: b}}`, []string{"spec.ingress[0].from[0]", "ipBlock cannot be combined"}},
			{"port out of range", `
  podSelector: {}
  ingress:
  - ports:
    - {protocol: TCP, port: 70000}`, []string{"spec.ingress[0].ports", "port must be between 1 and 65535"}},
			{"missing podSelector", `
  policyTypes: [Ingress]`, []string{"spec.podSelector", "Required value"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				name := "bad-" + strings.ReplaceAll(tc.name, " ", "-")
				doc := "apiVersion: networking.submariner.io/v1\nkind: MultiClusterNetworkPolicy\nmetadata: {name: " + name + ", namespace: shop}\nspec:" + tc.spec + "\n"
				_, stderr, err := c1.KubectlInput(ctx, []byte(doc), "apply", "-f", "-")
				require.Error(t, err, "kubectl accepted an invalid MCNP")
				for _, w := range tc.want {
					assert.Contains(t, stderr, w)
				}
				_, err = c1.Dynamic.Resource(mcnpv1.GroupVersionResource).Namespace("shop").Get(ctx, name, metav1.GetOptions{})
				assert.True(t, apierrors.IsNotFound(err), "invalid MCNP stored: %v", err)
			})
		}
	})

	t.Run("daemons and partitions", func(t *testing.T) {
		if err := harness.CheckPartitionSupport(); err != nil {
			t.Fatal(err) // a prerequisite, never a skip
		}
		bin := probeBinary(t)
		var ds []*harness.Daemon
		for _, c := range []*harness.Cluster{c1, c1, c2, c3} {
			d, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin})
			require.NoError(t, err)
			ds = append(ds, d)
		}
		for _, d := range ds {
			require.NoError(t, d.WaitReady(ctx, 20*time.Second))
		}
		a0, a1, b, c := ds[0], ds[1], ds[2], ds[3]
		assert.Equal(t, "cluster1-0", a0.NodeName)
		assert.Equal(t, "cluster1-1", a1.NodeName)
		assert.NotEqual(t, a0.GossipAddr, a1.GossipAddr)
		assert.Contains(t, strings.Join(b.Args, " "), "--seeds="+a0.GossipAddr+","+a1.GossipAddr, "default seeds are the earlier daemons")
		assert.Contains(t, strings.Join(b.Args, " "), "--cluster-id=cluster2")

		reach := func(from, to *harness.Daemon, want bool) {
			t.Helper()
			for _, proto := range []string{"tcp", "udp"} {
				err := ping(ctx, from, to, proto)
				if want {
					assert.NoError(t, err, "%s -> %s over %s", from.NodeName, to.NodeName, proto)
				} else {
					assert.Error(t, err, "%s -> %s over %s must be cut", from.NodeName, to.NodeName, proto)
				}
			}
		}
		all := func(want bool) {
			t.Helper()
			for _, x := range ds {
				for _, y := range ds {
					if x != y {
						reach(x, y, want)
					}
				}
			}
		}
		all(true)

		require.NoError(t, env.Partition(c1, c2))
		assert.Equal(t, 2, env.PartitionRules())
		for _, a := range []*harness.Daemon{a0, a1} {
			reach(a, b, false)
			reach(b, a, false)
			reach(a, c, true)
			reach(c, a, true)
		}
		reach(a0, a1, true) // same cluster
		reach(b, c, true)
		reach(c, b, true)
		require.NoError(t, env.HealPair(c1, c2))
		all(true)

		require.NoError(t, env.Isolate(c3))
		reach(c, a0, false)
		reach(b, c, false)
		reach(a1, b, true)
		require.NoError(t, env.Heal())
		assert.Equal(t, 0, env.PartitionRules())
		all(true)

		// kill -9 and restart keep the identity and address.
		addr, pid := b.GossipAddr, b.Pid()
		require.NoError(t, b.Kill())
		assert.False(t, b.Running())
		assert.Error(t, ping(ctx, a0, b, "tcp"))
		require.NoError(t, b.Restart())
		assert.NotEqual(t, pid, b.Pid())
		require.NoError(t, b.WaitReady(ctx, 20*time.Second))
		assert.Equal(t, addr, b.GossipAddr)
		reach(a0, b, true)
		log, err := b.TailLog(200)
		require.NoError(t, err)
		assert.Equal(t, 2, strings.Count(log, "=== harness: starting coastguardd/cluster2-0"), "one log across restarts:\n%s", log)

		// The first daemon started with no peer to seed from; restarted, it
		// dials every other daemon, as a deployed one dials the clusterset
		// DNS name (without this it stayed alone until a peer's periodic
		// push/pull found it: RELIABILITY.md, finding 9).
		assert.NotContains(t, strings.Join(a0.Args, " "), "--seeds=", "a0 was started first")
		require.NoError(t, a0.Kill())
		require.NoError(t, a0.Restart())
		require.NoError(t, a0.WaitReady(ctx, 20*time.Second))
		assert.Contains(t, a0.Args, "--seeds="+strings.Join([]string{a1.GossipAddr, b.GossipAddr, c.GossipAddr}, ","))

		m, err := b.Metrics(ctx)
		require.NoError(t, err)
		v, ok := harness.MetricValue(m, "probe_pings_received_total", map[string]string{"proto": "tcp"})
		assert.True(t, ok)
		assert.GreaterOrEqual(t, v, 1.0)

		// Graceful stop.
		require.NoError(t, c.Stop())
		assert.NoError(t, c.ExitErr())
	})

	t.Run("cleanup leaves nothing behind", func(t *testing.T) {
		logRSS(t, env)
		require.NoError(t, env.Partition(c1, c3)) // a rule Close must remove
		chain := env.PartitionChain()
		procs := env.Processes()
		var pids []int
		for _, p := range procs {
			if p.Pid() != 0 {
				pids = append(pids, p.Pid())
			}
		}
		require.GreaterOrEqual(t, len(pids), 4)
		dir := env.Dir
		require.NoError(t, env.Close())
		for _, pid := range pids {
			assert.False(t, processExists(pid), "pid %d still exists", pid)
			assert.ErrorIs(t, syscall.Kill(-pid, 0), syscall.ESRCH, "process group %d still exists", pid)
		}
		assert.Error(t, exec.Command("iptables", "-w", "-S", chain).Run(), "iptables chain %s left behind", chain)
		_, err := os.Stat(dir)
		assert.True(t, os.IsNotExist(err), "%s left behind", dir)
	})
}

func processExists(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func logRSS(t *testing.T, env *harness.Env) {
	t.Helper()
	rss := env.RSS()
	names := make([]string, 0, len(rss))
	var total uint64
	for n, v := range rss {
		names = append(names, n)
		total += v
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n + "=" + mib(rss[n]) + " ")
	}
	t.Logf("RSS: %s total=%s", b.String(), mib(total))
}

func mib(v uint64) string { return strconv.FormatUint(v>>20, 10) + "MiB" }

// TestHarnessControllerManager checks the optional kube-controller-manager:
// namespaces are finalised, garbage collection follows owner references and
// default ServiceAccounts appear.
func TestHarnessControllerManager(t *testing.T) {
	ctx := t.Context()
	env := harness.Start(t, harness.Options{Names: []string{"kcm"}, ControllerManager: true})
	c := env.Clusters[0]
	t.Logf("startup with kube-controller-manager: %s", env.StartupTime.Round(time.Millisecond))
	logRSS(t, env)

	_, err := c.CreateNamespace(ctx, "doomed", nil)
	require.NoError(t, err)
	_, err = c.RunPod(ctx, "doomed", "p", "10.244.9.9", map[string]string{"app": "x"})
	require.NoError(t, err)
	require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("doomed").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}), "serviceaccount controller")

	owner, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name:            "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, c.Client.CoreV1().ConfigMaps("default").Delete(ctx, "owner", metav1.DeleteOptions{}))

	start := time.Now()
	require.NoError(t, c.Client.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}), "namespace deletion is finalised")
	t.Logf("namespace finalised in %s", time.Since(start).Round(time.Millisecond))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "dependent", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}), "garbage collector deletes the dependent")
}

// TestHarnessDetachedDown checks the mode `make demo` uses: clusters that
// outlive the program that started them, stopped later by Down(dir).
func TestHarnessDetachedDown(t *testing.T) {
	dir := t.TempDir() + "/demo"
	env, err := harness.New(t.Context(), harness.Options{Names: []string{"east"}, Dir: dir, Detach: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Close() })
	probe, err := env.StartDaemon(env.Clusters[0], harness.DaemonOptions{Binary: probeBinary(t)})
	require.NoError(t, err)
	require.NoError(t, probe.WaitReady(t.Context(), 20*time.Second))
	var pids []int
	for _, p := range env.Processes() {
		pids = append(pids, p.Pid())
	}
	require.Len(t, pids, 3)
	_, err = os.Stat(dir + "/" + harness.StateFile)
	require.NoError(t, err)

	// A fresh program only knows the directory.
	require.NoError(t, harness.Down(dir))
	for _, pid := range pids {
		assert.False(t, processExists(pid), "pid %d survived Down", pid)
	}
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err))
}
