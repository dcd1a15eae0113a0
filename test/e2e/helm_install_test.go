//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// helmCmd runs the pinned helm (tools/go.mod) against cluster c.
func helmCmd(ctx context.Context, c *harness.Cluster, args ...string) (string, error) {
	full := append([]string{"tool", "-modfile=" + repoPath("tools", "go.mod"), "helm", "--kubeconfig", c.Kubeconfig}, args...)
	cmd := exec.CommandContext(ctx, "go", full...)
	cmd.Dir = repoPath()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHelmInstall runs the documented Helm install against a real
// kube-apiserver: into a namespace created and labelled beforehand (the
// chart does not template its namespace), with NOTES naming the missing
// gossip Secret; an upgrade that changes clusterID is refused, one that
// changes another value goes through; uninstall keeps the namespace and the
// Secrets the release does not own.
func TestHelmInstall(t *testing.T) {
	ctx := t.Context()
	env := harness.Start(t, harness.Options{Names: []string{"helm"}})
	c := env.Clusters[0]
	require.NoError(t, c.InstallCRDs(ctx, filepath.Join("testdata", "crds")))
	require.NoError(t, c.EnsureNamespace(ctx, deployNS, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}))
	chart := repoPath("charts", "coastguard")

	out, err := helmCmd(ctx, c, "install", "coastguard", chart, "-n", deployNS, "--set", "clusterID=helm-1", "--wait=false")
	require.NoError(t, err, out)
	assert.Contains(t, out, "MISSING: Secret "+deployNS+"/coastguard-gossip-key", "NOTES name the missing gossip Secret")
	assert.NotContains(t, out, "enforces Pod Security", "the namespace is labelled as documented")
	cm, err := c.Client.CoreV1().ConfigMaps(deployNS).Get(ctx, "coastguard-config", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "helm-1", cm.Data["COASTGUARD_CLUSTER_ID"])
	assert.Equal(t, "kubernetes", cm.Data["COASTGUARD_METRICS_AUTH"])
	_, seeded := cm.Data["COASTGUARD_SEEDS"]
	assert.False(t, seeded, "the daemon's default seed (the cluster-set name) is kept")

	out, err = helmCmd(ctx, c, "upgrade", "coastguard", chart, "-n", deployNS, "--set", "clusterID=helm-2")
	require.Error(t, err, "changing clusterID must fail: %s", out)
	assert.Contains(t, out, `clusterID is "helm-1" in the running install`)

	out, err = helmCmd(ctx, c, "upgrade", "coastguard", chart, "-n", deployNS, "--set", "clusterID=helm-1", "--set", "gossipProfile=lan")
	require.NoError(t, err, out)
	cm, err = c.Client.CoreV1().ConfigMaps(deployNS).Get(ctx, "coastguard-config", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "lan", cm.Data["COASTGUARD_GOSSIP_PROFILE"])

	// A Secret made by the daemon (or the operator) outside the release.
	_, stderr, err := c.Kubectl(ctx, "-n", deployNS, "create", "secret", "generic", "coastguard-signing-key", "--from-literal=signing.key=x")
	require.NoError(t, err, stderr)
	out, err = helmCmd(ctx, c, "uninstall", "coastguard", "-n", deployNS)
	require.NoError(t, err, out)
	_, err = c.Client.CoreV1().Namespaces().Get(ctx, deployNS, metav1.GetOptions{})
	require.NoError(t, err, "uninstall leaves the namespace it does not own")
	_, err = c.Client.CoreV1().Secrets(deployNS).Get(ctx, "coastguard-signing-key", metav1.GetOptions{})
	require.NoError(t, err, "uninstall keeps the signing key")
	left, _, err := c.Kubectl(ctx, "-n", deployNS, "get", "daemonset,configmap,serviceaccount,role", "-o", "name")
	require.NoError(t, err)
	assert.NotContains(t, left, "coastguard", "the release's objects are gone: %s", left)
	_, stderr, err = c.Kubectl(ctx, "get", "crd", "multiclusternetworkpolicies.networking.submariner.io")
	assert.NoError(t, err, "Helm never deletes crds/: %s", stderr)
}
