//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// podFromTemplate runs a DaemonSet's coastguardd container as a local
// process the way a kubelet would run its pod, so that what is tested is
// the installed manifests, not the harness's own flags:
//   - the container's args; its env with fieldRefs resolved (pod name,
//     namespace, pod IP) and its envFrom ConfigMaps read from the apiserver;
//   - its volumes materialised from the apiserver (Secrets and ConfigMaps
//     with their items, an emptyDir), and every env value under a mount path
//     rewritten to that volume's directory;
//   - the pod's own network namespace: an address the container binds on
//     0.0.0.0, "" or 127.0.0.1 is bound on the pod's IP instead (one
//     loopback alias per cluster here);
//   - in-cluster credentials: a kubeconfig for the pod's ServiceAccount, so
//     the chart's RBAC is what the daemon gets.
//
// Two things have no counterpart here and are substituted, each named in
// the returned environment: Lighthouse DNS (the default seed, the
// clusterset name, cannot resolve: seeds are given as addresses) and the
// memory limit (GOMEMLIMIT from resourceFieldRef is left out).
func podFromTemplate(t *testing.T, ctx context.Context, env *harness.Env, c *harness.Cluster, ds *appsv1.DaemonSet, bin, pod string, seeds []string) *harness.Daemon {
	t.Helper()
	spec := ds.Spec.Template.Spec
	var ctr *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "coastguardd" {
			ctr = &spec.Containers[i]
		}
	}
	require.NotNil(t, ctr, "DaemonSet %s has a coastguardd container", ds.Name)
	dir := filepath.Join(env.Dir, "pods", pod)
	mounts := map[string]string{} // mount path -> local directory
	for _, vm := range ctr.VolumeMounts {
		local := filepath.Join(dir, "volumes", vm.Name)
		require.NoError(t, os.MkdirAll(local, 0o700))
		materializeVolume(t, ctx, c, ds.Namespace, spec.Volumes, vm.Name, local)
		mounts[vm.MountPath] = local
	}
	podIP := c.GossipIP
	envv := map[string]string{}
	for _, from := range ctr.EnvFrom {
		require.NotNil(t, from.ConfigMapRef, "only ConfigMap envFrom is expected")
		cm, err := c.Client.CoreV1().ConfigMaps(ds.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		require.NoError(t, err)
		for k, v := range cm.Data {
			envv[k] = v
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			envv[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			envv[e.Name] = map[string]string{"metadata.name": pod, "metadata.namespace": ds.Namespace, "status.podIP": podIP,
				"spec.nodeName": pod}[e.ValueFrom.FieldRef.FieldPath]
		case e.ValueFrom.ResourceFieldRef != nil:
			// GOMEMLIMIT from the memory limit: no cgroup here
		default:
			t.Fatalf("env %s: unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	for k, v := range envv {
		for mp, local := range mounts {
			if v == mp || strings.HasPrefix(v, mp+"/") {
				envv[k] = local + strings.TrimPrefix(v, mp)
			}
		}
		for _, any := range []string{"0.0.0.0:", "127.0.0.1:"} {
			if rest, ok := strings.CutPrefix(v, any); ok {
				envv[k] = podIP + ":" + rest
			}
		}
		if strings.HasPrefix(v, ":") && strings.HasSuffix(k, "_ADDR") {
			envv[k] = podIP + v
		}
	}
	if _, set := envv["COASTGUARD_ADMIN_ADDR"]; !set {
		envv["COASTGUARD_ADMIN_ADDR"] = podIP + ":9091" // its default, 127.0.0.1:9091, is the pod's loopback
	}
	kc, _, err := c.ServiceAccountKubeconfig(ds.Namespace, spec.ServiceAccountName)
	require.NoError(t, err)
	envv["KUBECONFIG"] = kc
	envv["COASTGUARD_SEEDS"] = strings.Join(seeds, ",") // Lighthouse DNS stand-in
	var envList []string
	for k, v := range envv {
		envList = append(envList, k+"="+v)
	}
	slices.Sort(envList)
	d, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin, NodeName: pod, RawArgs: true, Args: ctr.Args, Env: envList, T: t})
	require.NoError(t, err)
	return d
}

// materializeVolume writes volume name's content into dir: a Secret's or
// ConfigMap's keys (its items when given), nothing for an emptyDir. An
// optional Secret that does not exist leaves dir empty, as the kubelet does.
func materializeVolume(t *testing.T, ctx context.Context, c *harness.Cluster, ns string, vols []corev1.Volume, name, dir string) {
	t.Helper()
	var v *corev1.Volume
	for i := range vols {
		if vols[i].Name == name {
			v = &vols[i]
		}
	}
	require.NotNil(t, v, "volume %s", name)
	write := func(data map[string][]byte, items []corev1.KeyToPath) {
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			require.True(t, ok, "volume %s: key %s missing", name, it.Key)
			require.NoError(t, os.WriteFile(filepath.Join(dir, it.Path), b, 0o600))
		}
	}
	switch {
	case v.Secret != nil:
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && v.Secret.Optional != nil && *v.Secret.Optional {
			return
		}
		require.NoError(t, err, "volume %s: Secret %s", name, v.Secret.SecretName)
		write(s.Data, v.Secret.Items)
	case v.ConfigMap != nil:
		cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		require.NoError(t, err, "volume %s: ConfigMap %s", name, v.ConfigMap.Name)
		data := map[string][]byte{}
		for k, s := range cm.Data {
			data[k] = []byte(s)
		}
		write(data, v.ConfigMap.Items)
	case v.EmptyDir != nil, v.HostPath != nil:
	default:
		t.Fatalf("volume %s: unexpected source", name)
	}
}

// installer installs coastguard into one cluster the documented way, after
// docs/OPERATIONS.md step 4 (namespace, Pod Security labels, gossip
// Secret); upgrade changes the gossip profile to lan the documented way.
type installer struct {
	install func(t *testing.T, ctx context.Context, c *harness.Cluster)
	upgrade func(t *testing.T, ctx context.Context, c *harness.Cluster)
	// uninstall removes the install the documented way, keeping what
	// docs/UNINSTALL.md says stays (nil: not exercised).
	uninstall func(t *testing.T, ctx context.Context, c *harness.Cluster)
}

// TestHelmInstallThreeClustersConverge installs coastguard into three
// clusters with the documented Helm commands only (docs/OPERATIONS.md step
// 4 and "Or with Helm"), then checks convergence (testInstallConverges).
func TestHelmInstallThreeClustersConverge(t *testing.T) {
	chart := repoPath("charts", "coastguard")
	testInstallConverges(t, installer{
		install: func(t *testing.T, ctx context.Context, c *harness.Cluster) {
			out, err := helmCmd(ctx, c, "install", "coastguard", chart, "--namespace", deployNS, "--set", "clusterID="+c.Name)
			require.NoError(t, err, out)
			require.NotContains(t, out, "MISSING", "the documented steps leave nothing missing")
		},
		upgrade: func(t *testing.T, ctx context.Context, c *harness.Cluster) {
			out, err := helmCmd(ctx, c, "upgrade", "coastguard", chart, "--namespace", deployNS, "--set", "clusterID="+c.Name, "--set", "gossipProfile=lan")
			require.NoError(t, err, out)
		},
		uninstall: func(t *testing.T, ctx context.Context, c *harness.Cluster) {
			out, err := helmCmd(ctx, c, "uninstall", "coastguard", "--namespace", deployNS)
			require.NoError(t, err, out)
		},
	})
}

// TestKustomizeInstallThreeClustersConverge is the same with the
// documented per-cluster overlay (docs/OPERATIONS.md steps 5 and 6).
func TestKustomizeInstallThreeClustersConverge(t *testing.T) {
	overlay := func(t *testing.T, ctx context.Context, c *harness.Cluster, literals ...string) {
		dir := filepath.Join(c.Dir, "overlay")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		base, err := filepath.Rel(dir, repoPath("deploy", "overlays", "submariner"))
		require.NoError(t, err)
		y := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + base + "\n" +
			"configMapGenerator:\n- name: coastguard-config\n  namespace: coastguard-system\n  behavior: merge\n  literals:\n" +
			"  - COASTGUARD_CLUSTER_ID=" + c.Name + "\n"
		for _, l := range literals {
			y += "  - " + l + "\n"
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(y), 0o644))
		out, errOut, err := c.Kubectl(ctx, "apply", "--server-side", "-k", dir)
		require.NoError(t, err, "%s %s", out, errOut)
	}
	testInstallConverges(t, installer{
		install: func(t *testing.T, ctx context.Context, c *harness.Cluster) {
			out, errOut, err := c.Kubectl(ctx, "apply", "--server-side", "-f", repoPath("deploy", "crds"))
			require.NoError(t, err, "%s %s", out, errOut)
			overlay(t, ctx, c)
		},
		upgrade: func(t *testing.T, ctx context.Context, c *harness.Cluster) {
			overlay(t, ctx, c, "COASTGUARD_GOSSIP_PROFILE=lan")
		},
	})
}

// testInstallConverges installs three clusters with inst, runs each
// cluster's daemon from the installed DaemonSet, ConfigMap and Secrets
// (podFromTemplate), and checks that the clusters find each other and
// enforce an MCNP across all three; then an upgrade that changes a value
// is rolled and converges again.
func testInstallConverges(t *testing.T, inst installer) {
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	env := harness.Start(t, harness.Options{Names: []string{"c1", "c2", "c3"}})
	bin := coastguarddBinary(t)
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	for _, c := range env.Clusters {
		require.NoError(t, c.InstallCRDs(ctx, filepath.Join("testdata", "crds")))
		require.NoError(t, c.EnsureNamespace(ctx, deployNS, map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}))
		_, err := c.Client.CoreV1().Secrets(deployNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "coastguard-gossip-key"},
			Data: map[string][]byte{"keyring": []byte(base64.StdEncoding.EncodeToString(key) + "\n")}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, c.EnsureNamespace(ctx, submarinerNS, nil))
		for _, o := range env.Clusters { // Submariner's Cluster objects, as its broker syncs them
			applyYAML(t, ctx, c, submarinerClusterWith(o.Name, o.PodCIDR, o.ServiceCIDR, ""))
		}
		inst.install(t, ctx, c)
	}
	start := func(c *harness.Cluster, gen int) *harness.Daemon {
		ds, err := c.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
		require.NoError(t, err)
		var seeds []string
		for _, o := range env.Clusters {
			if o != c {
				seeds = append(seeds, o.GossipIP+":7946")
			}
		}
		return podFromTemplate(t, ctx, env, c, ds, bin, fmt.Sprintf("coastguard-%s-%d", c.Name, gen), seeds)
	}
	daemons := map[string]*harness.Daemon{}
	for _, c := range env.Clusters {
		daemons[c.Name] = start(c, 0)
	}
	// An MCNP in c1 selecting every cluster admits c3's web pod to the db
	// pods of every cluster: each cluster must know every other.
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	ip := strings.TrimSuffix(c3.PodCIDR, "0.0/16") + "0.7"
	runPod(t, ctx, c3, "web", ip, web)
	webIP := ip + "/32"
	applyYAML(t, ctx, c1, dbFromWeb("db-from-web", ""))
	for _, c := range []*harness.Cluster{c1, c2} {
		waitBlocks(t, ctx, c, "shop", 90*time.Second, func(b []string, _ []networkingv1.NetworkPolicy) bool {
			return slices.Contains(b, webIP)
		}, "c1's MCNP admitting c3's web pod")
	}
	waitBlocks(t, ctx, c3, "shop", 90*time.Second, func(_ []string, nps []networkingv1.NetworkPolicy) bool {
		return len(nps) > 0 // c3's own web pods are admitted by podSelector, not ipBlock
	}, "c1's MCNP enforced in c3")

	// helm upgrade changing a value, then the DaemonSet's roll: the new
	// pod runs the new configuration and the set converges again.
	inst.upgrade(t, ctx, c2)
	require.NoError(t, daemons["c2"].Stop())
	daemons["c2"] = start(c2, 1)
	require.NoError(t, c3.Client.CoreV1().Pods("shop").Delete(ctx, "web", metav1.DeleteOptions{}))
	for _, c := range []*harness.Cluster{c1, c2} {
		waitBlocks(t, ctx, c, "shop", 90*time.Second, func(b []string, nps []networkingv1.NetworkPolicy) bool {
			return len(nps) > 0 && !slices.Contains(b, webIP)
		}, "c3's web pod gone after c2's upgrade")
	}
	log, err := daemons["c2"].TailLog(400)
	require.NoError(t, err)
	require.Contains(t, log, `"gossipProfile":"lan"`, "the upgraded pod runs the upgraded configuration")

	if inst.uninstall != nil {
		// Uninstall c3 and install it again, as documented: its signing key
		// and its shared pins stay (docs/UNINSTALL.md), so the others keep
		// trusting it and it keeps trusting them; nothing manual.
		require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			sec, err := c3.Client.CoreV1().Secrets(deployNS).Get(ctx, "coastguard-pins", metav1.GetOptions{})
			return err == nil && len(sec.Data) == 2, nil
		}), "c3's leader shares its pins of c1 and c2 (every 10 s)")
		inst.uninstall(t, ctx, c3)
		require.NoError(t, daemons["c3"].Stop())
		for _, name := range []string{"coastguard-signing-key", "coastguard-pins"} {
			_, err := c3.Client.CoreV1().Secrets(deployNS).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err, "Secret %s survives the uninstall", name)
		}
		inst.install(t, ctx, c3)
		daemons["c3"] = start(c3, 2) // a new pod: fresh data dir
		ip2 := strings.TrimSuffix(c3.PodCIDR, "0.0/16") + "0.8"
		runPod(t, ctx, c3, "web-2", ip2, web)
		for _, c := range []*harness.Cluster{c1, c2} {
			waitBlocks(t, ctx, c, "shop", 90*time.Second, func(b []string, _ []networkingv1.NetworkPolicy) bool {
				return slices.Contains(b, ip2+"/32")
			}, "a pod of the reinstalled c3 admitted")
		}
	}
	for _, d := range env.Daemons() {
		checkLogConventions(t, d.LogPath)
	}
}

// checkLogConventions reads a daemon's whole log: every JSON line has
// lowerCamelCase top-level keys, each once (Kubernetes structured-logging
// conventions, cmd/coastguardd/logging.go).
func checkLogConventions(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue // the harness's own header lines
		}
		lines++
		dec := json.NewDecoder(strings.NewReader(line))
		_, err := dec.Token() // {
		require.NoError(t, err, line)
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			require.NoError(t, err, line)
			key := k.(string)
			require.Regexp(t, `^[a-z][a-zA-Z0-9]*$`, key, "%s: %s", path, line)
			require.False(t, seen[key], "%s: key %q twice: %s", path, key, line)
			seen[key] = true
			var v json.RawMessage
			require.NoError(t, dec.Decode(&v), line)
		}
	}
	require.Positive(t, lines, "%s has log lines", path)
}
