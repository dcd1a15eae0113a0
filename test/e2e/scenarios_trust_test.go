//go:build e2e

package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioRogueClusterID (issue 15): a fourth coastguardd that holds the
// right gossip key but claims cluster A's ID with its own signing key joins
// the mesh and publishes a pod under A's name. No NetworkPolicy anywhere
// ever contains the rogue's pod IP, A's entries stay as A wrote them (A's
// new pods still arrive), and the rogue is reported by metric and log.
func TestScenarioRogueClusterID(t *testing.T) {
	env, bin, ds := startMesh(t, 4, meshOpts{Deferred: []int{3}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, b, c, r := env.Clusters[0], env.Clusters[1], env.Clusters[2], env.Clusters[3]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "web-a", "10.1.0.1", web)
	runPod(t, ctx, c, "web-c", "10.3.0.1", web)
	applyYAML(t, ctx, b, webPolicy("db", "{}"))
	waitNPs(t, ctx, b, harness.ManagedSelector, 60*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return equal(bl, cidrs("10.1.0.1", "10.3.0.1"))
	}, "B enforces with A's and C's pods")

	// The rogue: the Env's gossip key (added by the harness), A's cluster
	// ID, its own signing key; its inventory is cluster R's.
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "rogue.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(priv.Seed())+"\n"), 0o600))
	const evil = "10.4.0.9"
	runPod(t, ctx, r, "web-evil", evil, web)
	runPod(t, ctx, r, "web-a", "10.4.0.1", web) // same name as A's pod
	rogue, err := env.StartDaemon(r, harness.DaemonOptions{Binary: bin, NodeName: "rogue", ClusterID: a.Name,
		Args: []string{"--signing-key-file=" + keyFile}, T: t})
	require.NoError(t, err)
	require.NoError(t, rogue.WaitReady(ctx, 60*time.Second))

	// A keeps writing while the rogue is in the mesh.
	runPod(t, ctx, a, "web-a2", "10.1.0.2", web)
	want := cidrs("10.1.0.1", "10.1.0.2", "10.3.0.1")

	// The rogue is reported by every honest cluster it reaches.
	for _, d := range []*harness.Daemon{ds[1], ds[2]} {
		err := harness.Eventually(ctx, 90*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
			m, err := d.Metrics(ctx)
			if err != nil {
				return false, err
			}
			v, ok := harness.MetricValue(m, "coastguard_gossip_dropped_total", map[string]string{"reason": "key_mismatch"})
			return ok && v > 0, nil
		})
		require.NoError(t, err, "%s: coastguard_gossip_dropped_total{reason=key_mismatch} must count the rogue", d.NodeName)
		log, err := d.TailLog(5000)
		require.NoError(t, err)
		require.Contains(t, log, "REFUSING data for a cluster signed with a key that is not its trusted key")
	}
	// ... and as a Warning Event on A's CoastguardCluster, naming both keys.
	for _, cl := range []*harness.Cluster{b, c} {
		err := harness.Eventually(ctx, 90*time.Second, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
			out, _, err := cl.Kubectl(ctx, "get", "events", "-A", "--field-selector",
				"reason=SigningKeyMismatch,involvedObject.kind=CoastguardCluster,involvedObject.name="+a.Name,
				"-o", "jsonpath={.items[*].message}")
			return err == nil && strings.Count(out, "SHA256:") >= 2, err
		})
		require.NoError(t, err, "%s: Warning Event SigningKeyMismatch on CoastguardCluster %s", cl.Name, a.Name)
	}

	// For the rest of the scenario, no NetworkPolicy ever holds a rogue IP,
	// and B converges on A's real pods.
	deadline := time.Now().Add(30 * time.Second)
	sawWant := false
	for time.Now().Before(deadline) || !sawWant {
		require.NoError(t, ctx.Err(), "B never converged on A's real pods")
		for _, cl := range []*harness.Cluster{a, b, c} {
			nps, err := cl.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
			require.NoError(t, err)
			bl := blocksOf(nps...)
			require.True(t, containsNone(bl, cidrs(evil, "10.4.0.1")...), "%s enforces a rogue IP: %v", cl.Name, bl)
			if cl == b && equal(bl, want) {
				sawWant = true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
