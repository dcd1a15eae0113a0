//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/coastguard-mcnp/coastguard/cli"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// TestPluginVerdictService checks kubectl coastguard's model of the service
// path against packets: a pod in cluster1 dials cluster2's exported Service
// by its ClusterIP (15432 -> named targetPort pg), and every verdict --to
// cluster2/shop/service/db agrees with what the dataplane does; explain and
// conflicts show the exactness decision once a backend is not admitted.
func TestPluginVerdictService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, a, b, clusterIP := remoteServiceSetup(t, ctx)
	dp := env.Dataplane()
	applyYAML(t, ctx, b, []byte(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: db, namespace: shop}
`))
	startDaemons(t, ctx, env, harness.DaemonOptions{})
	_, err := a.RunPod(ctx, "shop", "other-0", "10.1.0.11", map[string]string{"app": "other"})
	require.NoError(t, err)
	applyYAML(t, ctx, b, []byte(dbFromCluster1Web))
	applyYAML(t, ctx, a, webEgress(inCluster2, nonReplicaDB))

	bin, err := harness.Build("./cmd/kubectl-coastguard")
	require.NoError(t, err)
	kubeconfig := mergedKubeconfig(t, env)
	// run returns the plugin's stdout and exit code.
	run := func(args ...string) (string, int) {
		t.Helper()
		args = append([]string{"--kubeconfig", kubeconfig, "--cluster-cidrs=" + strings.Join(env.ClusterCIDRs(), ",")}, args...)
		cmd := exec.CommandContext(ctx, bin, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return out.String(), 0
		case errors.As(err, &ee):
			if ee.ExitCode() == 1 {
				t.Logf("kubectl-coastguard %s: %s", strings.Join(args, " "), errb.String())
			}
			return out.String(), ee.ExitCode()
		}
		require.NoError(t, err)
		return "", -1
	}
	verdict := func(from string) (*cli.Verdict, int) {
		t.Helper()
		out, code := run("-o", "json", "verdict", "--from", "cluster1/shop/"+from, "--to", "cluster2/shop/service/db",
			"--port", "15432/TCP", "--exit-code")
		require.Contains(t, []int{0, 2}, code, out)
		var v cli.Verdict
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return &v, code
	}
	dial := func(from string) error {
		_, err := dp.Dial(ctx, a, "shop", from, clusterIP, 15432, corev1.ProtocolTCP)
		return err
	}

	// Every backend admitted: the ClusterIP path is open for web, closed for other.
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		return dial("web-0") == nil && dial("other-0") != nil, nil
	}), "web reaches the ClusterIP, other does not")
	v, code := verdict("web-0")
	require.Equal(t, 0, code)
	require.True(t, v.Allowed)
	require.Equal(t, cli.ResultAllowed, v.Result)
	require.Equal(t, clusterIP, v.Service.ClusterIP)
	require.Len(t, v.Backends, 1)
	require.Equal(t, "cluster2/shop/db-0", v.Backends[0].Pod)
	require.Equal(t, "5432/TCP", v.Backends[0].Port, "the named targetPort resolved on the backend")
	require.Equal(t, "ip 10.1.0.10", v.Backends[0].Ingress.PeerAs)
	t.Logf("verdict web-0 -> service db: %s, packets: connected", v.Result)

	v, code = verdict("other-0")
	require.Equal(t, 2, code)
	require.False(t, v.Allowed)
	require.True(t, v.Egress.Allowed, "other-0's egress is not isolated")
	require.False(t, v.Backends[0].Allowed, "db-from-web admits web only")
	t.Logf("verdict other-0 -> service db: %s (%s), packets: refused", v.Result, v.Reason)

	// A second backend the egress rule does not admit: the address rule is
	// withdrawn; the verdict says the egress denies the ClusterIP and why.
	_, err = b.RunPod(ctx, "shop", "db-1", "10.2.0.11", map[string]string{"role": "db", "replica": "true"}, tcpPort("pg", 5432))
	require.NoError(t, err)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		return dial("web-0") != nil, nil
	}), "a backend not admitted: the ClusterIP path is denied")
	waitCondition(t, ctx, a, "web-egress", "Degraded", "True", "ServiceBackendsPartiallyAdmitted")
	v, code = verdict("web-0")
	require.Equal(t, 2, code)
	require.Equal(t, cli.ResultDenied, v.Result)
	require.False(t, v.Egress.Allowed)
	require.True(t, v.Ingress.Allowed, "both backends admit web on pg")
	require.Len(t, v.Backends, 2)
	notes := strings.Join(v.Notes, "\n")
	require.Contains(t, notes, "the egress admits some backends by pod IP (cluster2/shop/db-0 on 5432) but not others (cluster2/shop/db-1 on 5432)")
	require.Contains(t, notes, "MCNP cluster1/shop/web-egress is Degraded ServiceBackendsPartiallyAdmitted for cluster2/shop/db")
	text, _ := run("verdict", "--from", "cluster1/shop/web-0", "--to", "cluster2/shop/service/db", "--port", "15432/TCP")
	t.Logf("verdict, text:\n%s", text)

	out, code := run("-o", "json", "explain", "-n", "shop", "web-egress")
	require.Equal(t, 0, code)
	var ex cli.Explanation
	require.NoError(t, json.Unmarshal([]byte(out), &ex))
	var sa *cli.ServiceAddress
	for _, c := range ex.Clusters {
		if c.Cluster == "cluster1" && len(c.Services) == 1 {
			sa = &c.Services[0]
		}
	}
	require.NotNil(t, sa, out)
	require.Equal(t, "cluster2/shop/db", sa.Service)
	require.False(t, sa.Admitted)
	require.Equal(t, []string{"cluster2/shop/db-0"}, sa.AdmittedBackends)

	out, code = run("-o", "json", "conflicts")
	require.Equal(t, 0, code)
	var rep cli.ConflictsReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	var found bool
	for _, h := range rep.ServiceHalfOpen {
		if h.Kind == cli.ServiceIngressAllowedAddressDenied && h.Service == "cluster2/shop/db" && h.Example == "cluster1/shop/web-0" {
			found = true
		}
	}
	require.True(t, found, "%+v", rep.ServiceHalfOpen)

	// Headless and unknown Services: clear errors (exit 1).
	_, code = run("verdict", "--from", "cluster1/shop/web-0", "--to", "cluster2/shop/service/nope", "--port", "15432/TCP")
	require.Equal(t, 1, code)
}
