//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

const (
	deployNS = "coastguard-system"
	deploySA = "system:serviceaccount:coastguard-system:coastguard"
)

// TestDeployManifests renders deploy/ with kubectl's built-in kustomize,
// applies it to a real apiserver, checks the workload's security settings
// against the contract, and checks that the daemon's ServiceAccount can do
// exactly what coastguardd needs: every needed permission is granted, and a
// list of things it must not do is denied.
func TestDeployManifests(t *testing.T) {
	ctx := t.Context()
	env := harness.Start(t, harness.Options{Names: []string{"deploy"}})
	c := env.Clusters[0]
	// Third-party CRDs a real cluster set has (ServiceExport, ClusterProperty)
	// and the Prometheus Operator's, as minimal stand-ins.
	require.NoError(t, c.InstallCRDs(ctx, filepath.Join("testdata", "crds")))

	rendered, _, err := c.Kubectl(ctx, "kustomize", repoPath("deploy"))
	require.NoError(t, err)
	objs := decodeAll(t, []byte(rendered))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	assert.Equal(t, 2, kinds["CustomResourceDefinition"], "MultiClusterNetworkPolicy and CoastguardCluster CRDs in deploy/")
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Service", "DaemonSet"} {
		assert.Equal(t, 1, kinds[k], "kind %s in deploy/", k)
	}
	assert.Equal(t, 2, kinds["ClusterRole"], "the daemon's ClusterRole and coastguard-mcnp-view")
	assert.Zero(t, kinds["Secret"], "the gossip key must never be shipped in the manifests")
	assert.Zero(t, kinds["ServiceExport"], "the base must apply to a cluster without MCS CRDs")

	t.Run("base applies to a vanilla apiserver", func(t *testing.T) {
		_, stderr, err := c.KubectlInput(ctx, []byte(rendered), "apply", "--server-side", "-f", "-")
		require.NoError(t, err, stderr)
		_, _, err = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/multiclusternetworkpolicies.networking.submariner.io")
		require.NoError(t, err)
		// Idempotent: a second apply changes nothing and succeeds.
		out, _, err := c.KubectlInput(ctx, []byte(rendered), "apply", "--server-side", "-f", "-")
		require.NoError(t, err)
		assert.NotContains(t, out, "created")
	})

	t.Run("workload matches the contract", func(t *testing.T) {
		ds, err := c.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
		require.NoError(t, err)
		checkDaemonSet(t, ds)
		checkEnvAgainstContract(t, ctx, c.Client, ds)

		svc, err := c.Client.CoreV1().Services(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, "headless")
		assert.True(t, svc.Spec.PublishNotReadyAddresses)
		assert.Equal(t, ds.Spec.Template.Labels["app.kubernetes.io/name"], svc.Spec.Selector["app.kubernetes.io/name"])
		ports := map[string]int32{}
		for _, p := range svc.Spec.Ports {
			ports[string(p.Protocol)+"/"+p.Name] = p.Port
		}
		// Gossip only: the Service is what the submariner component exports
		// to the cluster set, and the metrics port must not be.
		assert.Equal(t, map[string]int32{"TCP/gossip-tcp": 7946, "UDP/gossip-udp": 7946}, ports)
	})

	t.Run("service account can do what the daemon needs", func(t *testing.T) {
		type check struct {
			verb, resource, ns string // ns "*" = all namespaces, "" = cluster scope
			sub                string
		}
		allowed := []check{}
		for _, v := range []string{"get", "list", "watch"} {
			allowed = append(allowed,
				check{v, "pods", "*", ""},
				check{v, "namespaces", "", ""},
				check{v, "multiclusternetworkpolicies.networking.submariner.io", "*", ""},
				check{v, "clusterproperties.about.k8s.io", "", ""},
				check{v, "networkpolicies.networking.k8s.io", "*", ""},
			)
		}
		for _, v := range []string{"update", "patch"} {
			allowed = append(allowed, check{v, "multiclusternetworkpolicies.networking.submariner.io", "shop", "status"})
		}
		for _, v := range []string{"create", "update", "patch", "delete"} {
			allowed = append(allowed, check{v, "networkpolicies.networking.k8s.io", "shop", ""})
		}
		allowed = append(allowed,
			check{"create", "events", "shop", ""},
			check{"patch", "events", "shop", ""},
			check{"create", "events.events.k8s.io", "shop", ""},
		)
		for _, v := range []string{"get", "create", "update"} {
			allowed = append(allowed, check{v, "leases.coordination.k8s.io", deployNS, ""})
		}
		// the signing key Secret: read it, create it when absent (#15)
		allowed = append(allowed, check{"get", "secrets/coastguard-signing-key", deployNS, ""},
			check{"create", "secrets", deployNS, ""},
			// the cluster's shared key pins: every pod reads, the leader writes
			check{"get", "secrets/coastguard-pins", deployNS, ""},
			check{"update", "secrets/coastguard-pins", deployNS, ""})
		denied := []check{
			{"delete", "pods", "shop", ""},
			{"create", "pods", "shop", ""},
			{"update", "pods", "shop", ""},
			{"patch", "pods", "shop", "status"},
			{"get", "secrets", "*", ""},
			{"list", "secrets", "*", ""},
			{"get", "secrets", deployNS, ""},
			{"get", "secrets/coastguard-gossip-key", deployNS, ""},
			{"update", "secrets/coastguard-signing-key", deployNS, ""},
			{"delete", "secrets/coastguard-signing-key", deployNS, ""},
			{"delete", "secrets/coastguard-pins", deployNS, ""},
			{"create", "secrets", "default", ""},
			{"get", "configmaps", "kube-system", ""},
			{"create", "leases.coordination.k8s.io", "kube-system", ""},
			{"update", "leases.coordination.k8s.io", "default", ""},
			{"get", "leases.coordination.k8s.io", "default", ""},
			{"delete", "leases.coordination.k8s.io", deployNS, ""},
			{"create", "multiclusternetworkpolicies.networking.submariner.io", "shop", ""},
			{"update", "multiclusternetworkpolicies.networking.submariner.io", "shop", ""},
			{"delete", "multiclusternetworkpolicies.networking.submariner.io", "shop", ""},
			{"update", "namespaces", "", ""},
			{"delete", "namespaces", "", ""},
			{"create", "clusterproperties.about.k8s.io", "", ""},
			{"list", "nodes", "", ""},
			{"create", "customresourcedefinitions.apiextensions.k8s.io", "", ""},
			{"create", "clusterrolebindings.rbac.authorization.k8s.io", "", ""},
			{"escalate", "clusterroles.rbac.authorization.k8s.io", "", ""},
			{"impersonate", "users", "", ""},
			{"create", "serviceaccounts", deployNS, "token"},
			{"update", "daemonsets.apps", deployNS, ""},
		}
		canI := func(ch check) (bool, error) {
			args := []string{"auth", "can-i", ch.verb, ch.resource, "--as=" + deploySA}
			switch ch.ns {
			case "*":
				args = append(args, "--all-namespaces")
			case "":
			default:
				args = append(args, "-n", ch.ns)
			}
			if ch.sub != "" {
				args = append(args, "--subresource="+ch.sub)
			}
			out, stderr, err := c.Kubectl(ctx, args...)
			switch strings.TrimSpace(out) {
			case "yes":
				return true, nil
			case "no":
				return false, nil
			}
			return false, errors.Join(err, errors.New(stderr))
		}
		type result struct {
			ch   check
			want bool
			got  bool
			err  error
		}
		var all []result
		for _, ch := range allowed {
			all = append(all, result{ch: ch, want: true})
		}
		for _, ch := range denied {
			all = append(all, result{ch: ch, want: false})
		}
		sem := make(chan struct{}, 4)
		var wg sync.WaitGroup
		for i := range all {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				all[i].got, all[i].err = canI(all[i].ch)
			}()
		}
		wg.Wait()
		for _, r := range all {
			if !assert.NoError(t, r.err, "can-i %v", r.ch) {
				continue
			}
			desc := r.ch.verb + " " + r.ch.resource
			if r.ch.sub != "" {
				desc += "/" + r.ch.sub
			}
			desc += " in namespace " + r.ch.ns
			if r.want {
				assert.True(t, r.got, "the daemon needs: %s", desc)
			} else {
				assert.False(t, r.got, "the daemon must not be able to: %s", desc)
			}
		}
	})

	t.Run("real requests with the service account's identity", func(t *testing.T) {
		_, err := c.CreateNamespace(ctx, "shop", nil)
		require.NoError(t, err)
		_, err = c.RunPod(ctx, "shop", "web-0", "10.244.0.9", map[string]string{"app": "web"})
		require.NoError(t, err)
		_, rc, err := c.ServiceAccountKubeconfig(deployNS, "coastguard")
		require.NoError(t, err)
		sa, err := kubernetes.NewForConfig(rc)
		require.NoError(t, err)

		pods, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		assert.Len(t, pods.Items, 1)
		err = sa.CoreV1().Pods("shop").Delete(ctx, "web-0", metav1.DeleteOptions{})
		assert.True(t, apierrors.IsForbidden(err), "delete pod: %v", err)
		_, err = sa.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "list secrets: %v", err)

		np := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "coastguard-test", Namespace: "shop", Labels: map[string]string{"app.kubernetes.io/managed-by": "coastguard"}},
			Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		}
		_, err = sa.NetworkingV1().NetworkPolicies("shop").Create(ctx, np, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, sa.NetworkingV1().NetworkPolicies("shop").Delete(ctx, "coastguard-test", metav1.DeleteOptions{}))

		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "coastguard"}}
		_, err = sa.CoordinationV1().Leases(deployNS).Create(ctx, lease, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = sa.CoordinationV1().Leases(metav1.NamespaceDefault).Create(ctx, lease, metav1.CreateOptions{})
		assert.True(t, apierrors.IsForbidden(err), "lease in default: %v", err)
	})

	t.Run("optional components apply with their CRDs", func(t *testing.T) {
		out, _, err := c.Kubectl(ctx, "kustomize", repoPath("deploy", "overlays", "monitoring"))
		require.NoError(t, err)
		kinds := map[string]bool{}
		for _, o := range decodeAll(t, []byte(out)) {
			kinds[o.GetKind()] = true
		}
		for _, k := range []string{"ServiceExport", "PodMonitor", "PrometheusRule", "DaemonSet"} {
			assert.True(t, kinds[k], "overlays/monitoring renders %s", k)
		}
		require.NoError(t, c.EnsureNamespace(ctx, "submariner-operator", nil))
		_, stderr, err := c.KubectlInput(ctx, []byte(out), "apply", "--server-side", "-f", "-")
		require.NoError(t, err, stderr)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"get", "clusters.submariner.io", "-n", "submariner-operator"}, "yes"},
			{[]string{"list", "clusters.submariner.io", "-n", "submariner-operator"}, "yes"},
			{[]string{"watch", "clusters.submariner.io", "-n", "submariner-operator"}, "yes"},
			{[]string{"watch", "clusterglobalegressips.submariner.io", "-n", "submariner-operator"}, "yes"},
			{[]string{"list", "globalegressips.submariner.io", "-n", "shop"}, "yes"},
			{[]string{"update", "globalegressips.submariner.io", "-n", "shop"}, "no"},
			// --advertise-global-ip: the daemon pod's own GlobalIngressIP.
			{[]string{"watch", "globalingressips.submariner.io", "-n", "coastguard-system"}, "yes"},
			{[]string{"update", "globalingressips.submariner.io", "-n", "coastguard-system"}, "no"},
			// exported Services' GlobalIngressIPs (the Service kind under Globalnet).
			{[]string{"watch", "globalingressips.submariner.io", "-n", "shop"}, "yes"},
			{[]string{"update", "globalingressips.submariner.io", "-n", "shop"}, "no"},
			{[]string{"update", "clusters.submariner.io", "-n", "submariner-operator"}, "no"},
			// The Submariner CR holds the broker token and the IPsec PSK.
			{[]string{"get", "submariners.submariner.io", "-n", "submariner-operator"}, "no"},
			{[]string{"get", "secrets", "-n", "submariner-operator"}, "no"},
		} {
			got, _, _ := c.Kubectl(ctx, append([]string{"auth", "can-i", "--as=" + deploySA}, tc.args...)...)
			assert.Equal(t, tc.want, strings.TrimSpace(got), "can-i %v", tc.args)
		}
		_, err = c.Dynamic.Resource(schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceexports"}).
			Namespace(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
		require.NoError(t, err, "ServiceExport named like the Service")

		ds, err := c.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
		require.NoError(t, err)
		cm, err := c.Client.CoreV1().ConfigMaps(deployNS).Get(ctx, ds.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name, metav1.GetOptions{})
		require.NoError(t, err)
		_, set := cm.Data["COASTGUARD_SEEDS"]
		assert.False(t, set, "with the ServiceExport the daemon's default seed (the cluster-set name) is kept: %v", cm.Data)

		checkAlertMetricsExist(t, out)
	})

	t.Run("default passes Pod Security restricted; hostpath-state does not", func(t *testing.T) {
		// The default install is restricted; the opt-in hostpath-state
		// component needs a hostPath and a root init container. Check that
		// Pod Security admission really accepts the first and rejects the
		// second under "restricted", using pods built from the DaemonSet
		// templates.
		ns, err := c.Client.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "restricted", ns.Labels["pod-security.kubernetes.io/enforce"])

		dir := t.TempDir()
		rel, err := filepath.Rel(dir, repoPath("deploy"))
		require.NoError(t, err)
		kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + filepath.Join(rel, "base") +
			"\ncomponents:\n- " + filepath.Join(rel, "components", "hostpath-state") + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644))
		out, _, err := c.Kubectl(ctx, "kustomize", dir)
		require.NoError(t, err)
		var hostpath *appsv1.DaemonSet
		for _, o := range decodeAll(t, []byte(out)) {
			switch o.GetKind() {
			case "DaemonSet":
				hostpath = &appsv1.DaemonSet{}
				require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, hostpath))
			case "Namespace":
				assert.Equal(t, "privileged", o.GetLabels()["pod-security.kubernetes.io/enforce"])
			}
		}
		require.NotNil(t, hostpath)
		require.Len(t, hostpath.Spec.Template.Spec.InitContainers, 1)
		isc := hostpath.Spec.Template.Spec.InitContainers[0].SecurityContext
		assert.Equal(t, []corev1.Capability{"ALL"}, isc.Capabilities.Drop)
		assert.ElementsMatch(t, []corev1.Capability{"CHOWN", "FOWNER"}, isc.Capabilities.Add)
		assert.False(t, *isc.AllowPrivilegeEscalation)
		require.NotNil(t, hostpath.Spec.Template.Spec.Volumes[0].HostPath)
		assert.Equal(t, "/var/lib/coastguard", hostpath.Spec.Template.Spec.Volumes[0].HostPath.Path)
		assert.Equal(t, "docker.io/library/busybox:1.36.1", hostpath.Spec.Template.Spec.InitContainers[0].Image)

		base, err := c.Client.AppsV1().DaemonSets(deployNS).Get(ctx, "coastguard", metav1.GetOptions{})
		require.NoError(t, err)
		_, err = c.CreateNamespace(ctx, "psa-restricted", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
		require.NoError(t, err)
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		podOf := func(ds *appsv1.DaemonSet, name string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "psa-restricted"}, Spec: *ds.Spec.Template.Spec.DeepCopy()}
		}
		_, err = c.Client.CoreV1().Pods("psa-restricted").Create(ctx, podOf(base, "base"), dry)
		assert.NoError(t, err, "the default install must pass Pod Security restricted")
		_, err = c.Client.CoreV1().Pods("psa-restricted").Create(ctx, podOf(hostpath, "hostpath"), dry)
		if assert.Error(t, err, "the hostpath-state variant must not pass restricted (docs say so)") {
			assert.Contains(t, err.Error(), "hostPath")
		}
	})
}

func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	assert.False(t, spec.HostNetwork, "pod network: Submariner routes pod CIDRs")
	assert.Equal(t, "coastguard", spec.ServiceAccountName)
	require.NotNil(t, spec.SecurityContext)
	require.NotNil(t, spec.SecurityContext.RunAsNonRoot)
	assert.True(t, *spec.SecurityContext.RunAsNonRoot)
	require.Len(t, spec.Containers, 1)
	ctr := spec.Containers[0]
	sc := ctr.SecurityContext
	require.NotNil(t, sc)
	assert.True(t, *sc.RunAsNonRoot)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)

	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
		assert.Zero(t, p.HostPort, "no host ports")
	}
	assert.Equal(t, int32(9090), ports["metrics"])
	assert.Equal(t, int32(7946), ports["gossip-tcp"])
	assert.Equal(t, int32(7946), ports["gossip-udp"])
	for name, pr := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe, "startup": ctr.StartupProbe} {
		require.NotNil(t, pr, name)
		require.NotNil(t, pr.HTTPGet, name)
		assert.Equal(t, "metrics", pr.HTTPGet.Port.String(), name)
	}
	assert.Equal(t, "/healthz", ctr.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "/readyz", ctr.ReadinessProbe.HTTPGet.Path)
	assert.False(t, ctr.Resources.Requests.Cpu().IsZero())
	assert.False(t, ctr.Resources.Requests.Memory().IsZero())
	assert.False(t, ctr.Resources.Limits.Memory().IsZero())

	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
		assert.Nil(t, v.HostPath, "no hostPath by default (restricted)")
	}
	require.NotNil(t, vols["data"].EmptyDir)
	require.NotNil(t, vols["gossip-key"].Secret)
	assert.Equal(t, "coastguard-gossip-key", vols["gossip-key"].Secret.SecretName)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m
	}
	assert.Equal(t, "/var/lib/coastguard", mounts["data"].MountPath)
	assert.Equal(t, "/etc/coastguard/keys", mounts["gossip-key"].MountPath)
	assert.True(t, mounts["gossip-key"].ReadOnly)

	assert.Empty(t, spec.InitContainers, "no root init container by default")
	require.NotNil(t, spec.SecurityContext.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, spec.SecurityContext.SeccompProfile.Type)
}

// checkEnvAgainstContract checks that every COASTGUARD_* setting the
// manifests pass is a documented coastguardd setting (docs/CONTRACTS.md), so
// a typo cannot silently fall back to a default.
func checkEnvAgainstContract(t *testing.T, ctx context.Context, client kubernetes.Interface, ds *appsv1.DaemonSet) {
	t.Helper()
	doc, err := os.ReadFile(repoPath("docs", "CONTRACTS.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "## coastguardd run flags")
	require.True(t, ok, "docs/CONTRACTS.md has no \"coastguardd run flags\" section")
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`\[([A-Z0-9_, ]+)\]`).FindAllStringSubmatch(section, -1) {
		for _, name := range strings.Split(m[1], ",") {
			known[strings.TrimSpace(name)] = true
		}
	}
	require.True(t, known["COASTGUARD_DATA_DIR"] && known["POD_IP"], "parsed contract env vars: %v", known)
	known["GOMEMLIMIT"] = true // Go runtime, not coastguardd

	ctr := ds.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range ctr.Env {
		assert.True(t, known[e.Name], "env %s is not a coastguardd setting in docs/CONTRACTS.md", e.Name)
		env[e.Name] = e.Value
	}
	for _, need := range []string{"POD_NAME", "POD_NAMESPACE", "POD_IP", "COASTGUARD_DATA_DIR", "COASTGUARD_GOSSIP_KEY_FILE", "COASTGUARD_METRICS_ADDR"} {
		_, ok := env[need]
		assert.True(t, ok, "env %s", need)
	}
	assert.Equal(t, "/var/lib/coastguard", env["COASTGUARD_DATA_DIR"])
	assert.Equal(t, "/etc/coastguard/keys/keyring", env["COASTGUARD_GOSSIP_KEY_FILE"])
	assert.Equal(t, ":9090", env["COASTGUARD_METRICS_ADDR"])
	require.Len(t, ctr.EnvFrom, 1)
	cm, err := client.CoreV1().ConfigMaps(deployNS).Get(ctx, ctr.EnvFrom[0].ConfigMapRef.Name, metav1.GetOptions{})
	require.NoError(t, err, "the DaemonSet's ConfigMap is applied under its hashed name")
	require.NotEmpty(t, cm.Data)
	for k := range cm.Data {
		assert.True(t, known[k], "ConfigMap key %s is not a coastguardd setting in docs/CONTRACTS.md", k)
	}
	assert.Equal(t, "coastguard.coastguard-system.svc.cluster.local", cm.Data["COASTGUARD_SEEDS"])
}

// decodeAll splits a multi-document YAML stream into objects.
func decodeAll(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// checkAlertMetricsExist checks that every coastguard_* metric the
// PrometheusRule uses is registered somewhere in the daemon's source, so an
// alert cannot silently watch a metric that does not exist.
func checkAlertMetricsExist(t *testing.T, rendered string) {
	t.Helper()
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`coastguard_[a-z_]+`).FindAllString(rendered, -1) {
		used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")] = true
	}
	require.NotEmpty(t, used)
	registered := map[string]bool{}
	nameRE := regexp.MustCompile(`Name:\s*"(coastguard_[a-z_]+)"`)
	for _, dir := range []string{"gossip", "store", "kube", "enforce", "daemon", "cmd/coastguardd"} {
		files, _ := filepath.Glob(repoPath(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, m := range nameRE.FindAllStringSubmatch(string(b), -1) {
				registered[m[1]] = true
			}
		}
	}
	for name := range used {
		assert.True(t, registered[name], "the PrometheusRule uses %s, which no daemon package registers", name)
	}
}
