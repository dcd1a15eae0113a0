//go:build e2e

package e2e

import (
	"context"
	"crypto/ed25519"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioSigningKeyRotation (issue 15): cluster A rotates its signing
// key (`coastguardd keys rotate`, the new key endorsed by the old one) and
// restarts its daemon with it while A churns pods. B and C re-pin A's new
// key from the endorsement: no update of A is lost, no generated
// NetworkPolicy anywhere is deleted or loses a live pod's IP, nothing is
// refused as a key mismatch, and B reports A's new key fingerprint.
func TestScenarioSigningKeyRotation(t *testing.T) {
	env, bin, ds := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a1", "10.1.0.1", web)
	runPod(t, ctx, b, "web-b1", "10.2.0.1", web)
	runPod(t, ctx, c, "web-c1", "10.3.0.1", web)
	applyYAML(t, ctx, a, webPolicy("from-a", "{}"))
	watches := map[*harness.Cluster]*npWatch{}
	for _, cl := range env.Clusters {
		watches[cl] = watchNPs(t, cl, "shop")
	}
	for _, cl := range []*harness.Cluster{b, c} {
		_, err := watches[cl].waitFor(ctx, 60*time.Second, func(bl []string) bool { return slices.Contains(bl, "10.1.0.1/32") })
		require.NoError(t, err, "%s enforces A's pod before the rotation", cl.Name)
	}
	var oldFP string
	err := harness.Eventually(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		oldFP = clusterFingerprint(t, ctx, b, a.Name)
		return oldFP != "", nil
	})
	require.NoError(t, err, "B reports A's pinned key")
	marks := map[*harness.Cluster]int{}
	for cl, w := range watches {
		marks[cl] = w.mark()
	}

	// churn in A: new pods only, so every ipBlock change must be a growth
	stopChurn := startGrowthChurn(ctx, a, web)

	// rotate A's key: the operator's procedure (OPERATIONS.md), with the
	// harness's key file standing for the Secret
	keyFile, err := env.SigningKeyFile(a.Name)
	require.NoError(t, err)
	out, err := exec.CommandContext(ctx, bin, "keys", "rotate", "--signing-key-file", keyFile, "--cluster-id", a.Name).Output()
	require.NoError(t, err)
	newKey, endorsement, err := gossip.ParseSigningKeyFile(out)
	require.NoError(t, err)
	require.NotNil(t, endorsement)
	newFP := gossip.KeyFingerprint(newKey.Public().(ed25519.PublicKey))
	require.NotEqual(t, oldFP, newFP)
	time.Sleep(2 * time.Second) // some churn under the old key
	require.NoError(t, ds[0].Stop())
	require.NoError(t, os.WriteFile(keyFile, out, 0o600))
	require.NoError(t, ds[0].Restart())
	require.NoError(t, ds[0].WaitReady(ctx, 60*time.Second))
	err = harness.Eventually(ctx, 90*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, err := debugState(ctx, ds[0])
		return s.Leader, err
	})
	require.NoError(t, err, "A leads again with the new key")
	time.Sleep(2 * time.Second) // some churn under the new key
	churned, churnErr := stopChurn()
	require.NoError(t, churnErr)
	require.NotEmpty(t, churned)

	want := cidrs(append([]string{"10.1.0.1", "10.2.0.1", "10.3.0.1"}, churned...)...)
	for _, cl := range []*harness.Cluster{b, c} {
		_, err := watches[cl].waitFor(ctx, 90*time.Second, func(bl []string) bool {
			var own string
			switch cl {
			case b:
				own = "10.2.0.1/32"
			case c:
				own = "10.3.0.1/32"
			}
			var exp []string
			for _, x := range want {
				if x != own {
					exp = append(exp, x)
				}
			}
			return containsAll(bl, exp...)
		})
		require.NoError(t, err, "%s got every one of A's %d pods (0 lost updates)", cl.Name, len(churned))
	}
	for cl, w := range watches {
		require.Empty(t, flaps(w.eventsSince(marks[cl])), "%s: generated NetworkPolicies deleted or shrunk around the rotation", cl.Name)
	}

	// B and C re-pinned from the endorsement: no mismatch, the new key shown
	for i, d := range []*harness.Daemon{ds[1], ds[2]} {
		cl := []*harness.Cluster{b, c}[i]
		err := harness.Eventually(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
			return clusterFingerprint(t, ctx, cl, a.Name) == newFP, nil
		})
		require.NoError(t, err, "%s reports A's new key fingerprint %s", cl.Name, newFP)
		m, err := d.Metrics(ctx)
		require.NoError(t, err)
		v, _ := harness.MetricValue(m, "coastguard_gossip_dropped_total", map[string]string{"reason": "key_mismatch"})
		require.Zero(t, v, "%s refused A's data as a key mismatch", cl.Name)
		log, err := d.TailLog(20000)
		require.NoError(t, err)
		require.Contains(t, log, "a cluster rotated its signing key")
		evs, _, err := cl.Kubectl(ctx, "get", "events", "-A", "--field-selector", "reason=SigningKeyMismatch", "-o", "name")
		require.NoError(t, err)
		require.Empty(t, strings.TrimSpace(evs), "%s: a rotation is not a mismatch", cl.Name)
	}
	require.Equal(t, newFP, clusterFingerprint(t, ctx, a, a.Name), "A reports its own new key")
	m, err := ds[0].Metrics(ctx)
	require.NoError(t, err)
	v, _ := harness.MetricValue(m, "coastguard_gossip_dropped_total", map[string]string{"reason": "key_mismatch"})
	require.Zero(t, v, "A refused its own old-key records relayed back as a key mismatch")
	t.Logf("rotation: %d pods churned across the key rotation; B and C re-pinned %s -> %s", len(churned), oldFP, newFP)
}

// clusterFingerprint reads status.signingKeyFingerprint of the
// CoastguardCluster id in cl ("" when absent).
func clusterFingerprint(t *testing.T, ctx context.Context, cl *harness.Cluster, id string) string {
	t.Helper()
	out, _, err := cl.Kubectl(ctx, "get", "coastguardcluster", id, "-o", "jsonpath={.status.signingKeyFingerprint}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// TestScenarioSigningKeySecretCreated (issue 15): B's daemons start
// without a signing key file (the DaemonSet's optional mount is empty).
// Two of them start at once: exactly one creates Secret
// coastguard-signing-key, both sign with that key (never unsigned), and A
// pins it: A reports B's fingerprint as the Secret's key.
func TestScenarioSigningKeySecretCreated(t *testing.T) {
	env, bin, ds := startMesh(t, 2, meshOpts{Deferred: []int{1}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	a, b := env.Clusters[0], env.Clusters[1]
	absent := "--signing-key-file=" + t.TempDir() + "/absent.key"
	var bs []*harness.Daemon
	for _, n := range []string{"b-x", "b-y"} {
		d, err := env.StartDaemon(b, harness.DaemonOptions{Binary: bin, NodeName: n, Args: []string{absent}, T: t})
		require.NoError(t, err)
		bs = append(bs, d)
	}
	for _, d := range bs {
		require.NoError(t, d.WaitReady(ctx, 90*time.Second))
	}
	sec, err := b.Client.CoreV1().Secrets(harness.DaemonNamespace).Get(ctx, "coastguard-signing-key", metav1.GetOptions{})
	require.NoError(t, err, "the first daemon created the signing key Secret")
	key, err := gossip.ParseSigningKey(sec.Data["signing.key"])
	require.NoError(t, err)
	fp := gossip.KeyFingerprint(key.Public().(ed25519.PublicKey))

	created := 0
	for _, d := range bs {
		log, err := d.TailLog(20000)
		require.NoError(t, err)
		if strings.Contains(log, "created this cluster's signing key") {
			created++
		}
		require.Contains(t, log, "using the signing key of Secret coastguard-signing-key")
		require.Contains(t, log, fp, "%s signs with the Secret's key", d.NodeName)
	}
	require.Equal(t, 1, created, "exactly one daemon created the key")

	// A pins B's key (it verified B's signed data) and reports it.
	err = harness.Eventually(ctx, 90*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		return clusterFingerprint(t, ctx, a, b.Name) == fp, nil
	})
	require.NoError(t, err, "A reports B's key fingerprint %s", fp)
	m, err := ds[0].Metrics(ctx)
	require.NoError(t, err)
	v, _ := harness.MetricValue(m, "coastguard_gossip_dropped_total", map[string]string{"reason": "unsigned"})
	require.Zero(t, v, "nothing of B arrived unsigned")
}
