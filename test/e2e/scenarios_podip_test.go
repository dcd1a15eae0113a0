//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestScenarioPodIPOwnership: cluster B (the attacker: whoever controls its
// apiserver or its coastguardd writes what B publishes) runs pods claiming
// the metadata service, loopback, A's pod IP and C's pod IP, next to one
// honest pod. The daemons know every cluster's CIDRs from the operator
// (--cluster-cidrs, the harness default). At no moment does A or C hold an
// allow rule for an address B does not own; the MCNP's Degraded condition
// and coastguard_pod_ips_dropped say why. Then A's daemon is restarted
// without B's CIDRs: B's pods are dropped, and Degraded names B.
func TestScenarioPodIPOwnership(t *testing.T) {
	env, bin, ds := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	a, b, c := env.Clusters[0], env.Clusters[1], env.Clusters[2]
	for _, cl := range env.Clusters {
		require.NoError(t, cl.EnsureNamespace(ctx, "shop", nil))
	}
	wa, wc := watchNPs(t, a, "shop"), watchNPs(t, c, "shop")

	runPod(t, ctx, a, "web-a", "10.1.0.1", web)
	runPod(t, ctx, c, "web-c", "10.3.1.10", web)
	runPod(t, ctx, b, "web-b", "10.2.0.1", web)
	runPod(t, ctx, b, "imds", "169.254.169.254", web)
	runPod(t, ctx, b, "lo", "127.0.0.1", web)
	runPod(t, ctx, b, "steal-c", "10.3.1.10", web)
	runPod(t, ctx, b, "steal-a", "10.1.0.1", web)
	applyYAML(t, ctx, a, webPolicy("db", "{}"))

	_, err := wa.waitFor(ctx, 60*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.2.0.1", "10.3.1.10")) })
	require.NoError(t, err, "A allows B's honest pod and C's pod")
	_, err = wc.waitFor(ctx, 60*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.1.0.1", "10.2.0.1")) })
	require.NoError(t, err, "C allows A's pod and B's honest pod")

	msg := waitCondition(t, ctx, a, "db", "Degraded", "True", "PodIPReservedAddress")
	require.Contains(t, msg, a.Name+": PodIPReservedAddress: "+b.Name)
	require.Contains(t, msg, c.Name+": PodIPReservedAddress: "+b.Name)
	for _, x := range []struct {
		d      *harness.Daemon
		reason string
		want   float64
	}{{ds[0], "reserved_address", 2}, {ds[0], "outside_owner_cidrs", 2}, {ds[2], "reserved_address", 2}, {ds[2], "outside_owner_cidrs", 2}} {
		err := harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			m, err := x.d.Metrics(ctx)
			if err != nil {
				return false, err
			}
			v, ok := harness.MetricValue(m, "coastguard_pod_ips_dropped", map[string]string{"remote_cluster": b.Name, "reason": x.reason})
			return ok && v == x.want, nil
		})
		require.NoError(t, err, "%s: coastguard_pod_ips_dropped{remote_cluster=%s,reason=%s} must be %v", x.d.Name, b.Name, x.reason, x.want)
	}
	log, err := ds[0].TailLog(3000)
	require.NoError(t, err)
	require.Contains(t, log, "remote pod IPs dropped")

	t.Run("B's CIDRs unknown in A: B's pods dropped, Degraded names B", func(t *testing.T) {
		require.NoError(t, ds[0].Stop())
		var known []string
		for _, e := range env.ClusterCIDRs() {
			if !strings.HasPrefix(e, b.Name+"=") && !strings.HasPrefix(e, b.Name+":") {
				known = append(known, e)
			}
		}
		d, err := env.StartDaemon(a, harness.DaemonOptions{Binary: bin, NodeName: a.Name + "-nob", T: t, ClusterCIDRs: known})
		require.NoError(t, err)
		require.NoError(t, d.WaitReady(ctx, 90*time.Second))
		_, err = wa.waitFor(ctx, 90*time.Second, func(bl []string) bool { return equal(bl, cidrs("10.3.1.10")) })
		require.NoError(t, err, "A drops every pod of B")
		msg := waitCondition(t, ctx, a, "db", "Degraded", "True", "MultipleReasons")
		require.Contains(t, msg, a.Name+": PodCIDRsUnknown: "+b.Name+" (pod CIDRs unknown here; their pods are left out)")
		err = harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			m, err := d.Metrics(ctx)
			if err != nil {
				return false, err
			}
			v, ok := harness.MetricValue(m, "coastguard_pod_ips_dropped", map[string]string{"remote_cluster": b.Name, "reason": "cidrs_unknown"})
			return ok && v == 5, nil
		})
		require.NoError(t, err, "coastguard_pod_ips_dropped{remote_cluster=%s,reason=cidrs_unknown} must be 5", b.Name)
	})

	// At no moment, in any generated policy.
	for _, w := range []struct {
		w         *npWatch
		forbidden []string
	}{
		{wa, cidrs("169.254.169.254", "127.0.0.1", "10.1.0.1")},
		{wc, cidrs("169.254.169.254", "127.0.0.1", "10.3.1.10")},
	} {
		for _, e := range w.w.eventsSince(0) {
			for _, f := range w.forbidden {
				require.False(t, slices.Contains(e.blocks, f), "%s: %s %s allowed %s at %s", w.w.c.Name, e.typ, e.name, f, e.at)
			}
		}
	}
}
