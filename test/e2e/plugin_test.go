//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/coastguard-mcnp/coastguard/cli"
	"github.com/coastguard-mcnp/coastguard/reach"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// mergedKubeconfig writes one kubeconfig with a context per cluster, named
// after the cluster, as an operator of a cluster set has.
func mergedKubeconfig(t *testing.T, env *harness.Env) string {
	t.Helper()
	out := clientcmdapi.NewConfig()
	for _, c := range env.Clusters {
		cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
		require.NoError(t, err)
		ctx := cfg.Contexts[cfg.CurrentContext]
		user := c.Name + "-" + ctx.AuthInfo
		out.Clusters[c.Name] = cfg.Clusters[ctx.Cluster]
		out.AuthInfos[user] = cfg.AuthInfos[ctx.AuthInfo]
		out.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: user}
	}
	out.CurrentContext = env.Clusters[0].Name
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*out, path))
	return path
}

const pluginDBPolicy = `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata:
  name: db-allow-api
  namespace: shop
spec:
  clusterSelector: {}
  podSelector:
    matchLabels: {role: db}
  ingress:
  - from:
    - clusterSelector: {}
      podSelector:
        matchLabels: {role: api}
    ports:
    - {protocol: TCP, port: %d}
`

// the planted shadowed rule: a strict subset of db-allow-api's rule
const pluginShadowPolicy = `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata:
  name: db-from-first
  namespace: shop
spec:
  clusterSelector: {}
  podSelector:
    matchLabels: {role: db}
  ingress:
  - from:
    - clusterSelector:
        matchLabels: {cluster.clusterset.k8s.io: %s}
      podSelector:
        matchLabels: {role: api}
    ports:
    - {protocol: TCP, port: 5432}
`

// origin-only policy whose rule selects nothing
const pluginLocalPolicy = `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata:
  name: web-local
  namespace: shop
spec:
  podSelector:
    matchLabels: {role: web}
  ingress:
  - from:
    - podSelector:
        matchLabels: {role: nobody}
`

// the planted half-open flow: a user-written egress policy in the second
// cluster lets its api pods talk only to the first cluster's pod range,
// while db-allow-api admits them everywhere.
const pluginUserEgress = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: api-egress-first-only
  namespace: shop
spec:
  podSelector:
    matchLabels: {role: api}
  policyTypes: [Egress]
  egress:
  - to:
    - ipBlock: {cidr: 10.1.0.0/16}
`

// TestKubectlPlugin runs the real kubectl with kubectl-coastguard on PATH
// against three harness clusters, for every command.
func TestKubectlPlugin(t *testing.T) {
	env, _, _ := startMesh(t, 3, meshOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c1, c2, c3 := env.Clusters[0], env.Clusters[1], env.Clusters[2]

	bin, err := harness.Build("./cmd/kubectl-coastguard")
	require.NoError(t, err)
	pathDir := t.TempDir()
	require.NoError(t, os.Symlink(bin, filepath.Join(pathDir, "kubectl-coastguard")))
	t.Setenv("PATH", pathDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	kubeconfig := mergedKubeconfig(t, env)
	// kubectl refuses global flags before a plugin name, so it runs with
	// KUBECONFIG in its environment, as an operator's shell would.
	tdir, err := harness.TestbinDir()
	require.NoError(t, err)
	kubectlBin, err := harness.Binary(tdir, "kubectl")
	require.NoError(t, err)
	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, kubectlBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+pathDir)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}
	coastguard := func(args ...string) string {
		t.Helper()
		// the daemons' --cluster-cidrs (harness default), so the plugin
		// computes what they render
		args = append(args, "--cluster-cidrs="+strings.Join(env.ClusterCIDRs(), ","))
		out, err := kubectl("", append([]string{"coastguard"}, args...)...)
		require.NoError(t, err)
		return out
	}

	out, err := kubectl("", "plugin", "list")
	require.NoError(t, err, out)
	require.Contains(t, out, "kubectl-coastguard", "kubectl discovers the plugin on PATH")

	// workload: 5 pods per cluster (roles api, db, web), IPs 10.<i+1>.0.x
	roles := []string{"api", "db", "web", "api", "db"}
	type podRef struct{ cluster, name, role string }
	var pods []podRef
	for i, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
		for j, r := range roles {
			name := fmt.Sprintf("%s-%d", r, j)
			_, err := c.RunPod(ctx, "shop", name, fmt.Sprintf("10.%d.0.%d", i+1, j+10), map[string]string{"role": r},
				corev1.ContainerPort{Name: "pg", ContainerPort: 5432})
			require.NoError(t, err)
			pods = append(pods, podRef{c.Name, name, r})
		}
	}
	applyYAML(t, ctx, c1, []byte(fmt.Sprintf(pluginDBPolicy, 5432)))
	applyYAML(t, ctx, c2, []byte(fmt.Sprintf(pluginShadowPolicy, c1.Name)))
	applyYAML(t, ctx, c3, []byte(pluginLocalPolicy))
	applyYAML(t, ctx, c2, []byte(pluginUserEgress))

	// the generated policies admit every remote api pod by IP
	for i, c := range env.Clusters {
		var want []string
		for k := range env.Clusters {
			if k != i {
				want = append(want, fmt.Sprintf("10.%d.0.10/32", k+1), fmt.Sprintf("10.%d.0.13/32", k+1))
			}
		}
		waitNPs(t, ctx, c, originSel(c1.Name), 2*time.Minute, func(b []string, _ []networkingv1.NetworkPolicy) bool { return containsAll(b, want...) },
			"db-allow-api admits every remote api pod in "+c.Name)
	}

	t.Run("status", func(t *testing.T) {
		out := coastguard("status", "--wait", "--timeout=3m", "-o", "json")
		var st cli.Status
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		assert.True(t, st.Healthy, "problems: %v", st.Problems)
		require.Len(t, st.Views, 3)
		for _, v := range st.Views {
			require.Len(t, v.Clusters, 3, "view from %s", v.Cluster)
			for _, r := range v.Clusters {
				assert.True(t, r.Alive, "%s sees %s", v.Cluster, r.Cluster)
				assert.NotEmpty(t, r.Leader)
				assert.NotEmpty(t, r.Version)
			}
		}
		require.Len(t, st.Policies, 3)
		text := coastguard("status")
		t.Logf("kubectl coastguard status:\n%s", text)
		assert.Contains(t, text, "cluster set healthy")
		// a newcomer's kubeconfig: the three clusters' own files joined
		// with colons (issue 31: clashing user names made this hang for 5
		// minutes, then fail)
		var files []string
		for _, c := range env.Clusters {
			files = append(files, c.Kubeconfig)
		}
		joined := exec.CommandContext(ctx, kubectlBin, "coastguard", "status", "-o", "json",
			"--cluster-cidrs="+strings.Join(env.ClusterCIDRs(), ","))
		joined.Env = append(os.Environ(), "KUBECONFIG="+strings.Join(files, string(os.PathListSeparator)), "HOME="+pathDir)
		began := time.Now()
		jout, err := joined.Output()
		took := time.Since(began)
		var js cli.Status
		require.NoError(t, json.Unmarshal(jout, &js), "%s: %v", jout, err)
		var ee *exec.ExitError
		if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 2) {
			require.NoError(t, err, "status over KUBECONFIG=a:b:c (exit 2 only says unhealthy)")
		}
		require.Len(t, js.Views, 3, "every cluster of the joined kubeconfigs")
		for _, v := range js.Views {
			require.Empty(t, v.Error, v.Context)
			require.Len(t, v.Clusters, 3, "view from %s", v.Cluster)
		}
		t.Logf("status over the colon-joined kubeconfigs: %d views in %s (problems of the moment: %v)",
			len(js.Views), took.Round(time.Millisecond), js.Problems)
		require.Less(t, took, 30*time.Second, "per-context timeouts: never the old 5-minute hang")
		// the CRD itself, through plain kubectl
		out, err = kubectl("", "--context", c2.Name, "get", "coastguardclusters")
		require.NoError(t, err)
		for _, c := range env.Clusters {
			assert.Contains(t, out, c.Name)
		}
	})

	t.Run("explain", func(t *testing.T) {
		var ex cli.Explanation
		require.NoError(t, json.Unmarshal([]byte(coastguard("explain", "-n", "shop", "db-allow-api", "-o", "json")), &ex))
		require.Len(t, ex.Clusters, 3)
		for _, c := range ex.Clusters {
			assert.True(t, c.Enforced, c.Cluster)
			assert.Equal(t, "in sync", c.Live, c.Cluster)
			admitted := map[string]bool{}
			for _, p := range c.Peers {
				for _, pod := range p.Pods {
					admitted[pod] = true
				}
			}
			assert.Len(t, admitted, 6, "every api pod of the set, in %s: %v", c.Cluster, c.Peers)
		}
		require.NoError(t, json.Unmarshal([]byte(coastguard("explain", "-n", "shop", "web-local", "-o", "json")), &ex))
		for _, c := range ex.Clusters {
			assert.Equal(t, c.Cluster == c3.Name, c.Enforced, c.Cluster)
			if c.Cluster != c3.Name {
				assert.Contains(t, c.Why, "only the origin cluster "+c3.Name)
			}
		}
		t.Logf("kubectl coastguard explain:\n%s", coastguard("explain", "-n", "shop", "db-allow-api"))
	})

	t.Run("verdict", func(t *testing.T) {
		// 5 sources x 5 destinations spanning the 3 clusters
		pick := func(idx ...int) []podRef {
			var out []podRef
			for _, i := range idx {
				out = append(out, pods[i])
			}
			return out
		}
		srcs := pick(0, 5, 10, 7, 2)  // api c1, api c2, api c3, web c2, web c1
		dsts := pick(1, 6, 11, 14, 8) // db c1, db c2, db c3, db c3, api c2
		for _, s := range srcs {
			for _, d := range dsts {
				ingressOK := d.role != "db" || s.role == "api"
				// c2's api pods may send only to c1.
				apiInC2 := s.cluster == c2.Name && s.role == "api"
				egressOK := !apiInC2 || d.cluster == c1.Name
				var v cli.Verdict
				out := coastguard("verdict", "--from", s.cluster+"/shop/"+s.name, "--to", d.cluster+"/shop/"+d.name, "--port", "5432/TCP", "-o", "json")
				require.NoError(t, json.Unmarshal([]byte(out), &v), out)
				assert.Equal(t, ingressOK, v.Ingress.Allowed, "ingress %s -> %s", v.From, v.To)
				assert.Equal(t, egressOK, v.Egress.Allowed, "egress %s -> %s", v.From, v.To)
				assert.Equal(t, ingressOK && egressOK, v.Allowed, "%s -> %s", v.From, v.To)
				if d.role == "db" && ingressOK {
					// names the generated policy and rule that admit it
					found := false
					for _, dec := range v.Ingress.Decisions {
						if dec.Allows && dec.Origin == c1.Name+"/shop/db-allow-api" {
							found = assert.NotEmpty(t, dec.Rules)
						}
					}
					assert.True(t, found, "%s -> %s: %+v", v.From, v.To, v.Ingress.Decisions)
				}
				if !egressOK {
					require.Len(t, v.Egress.Decisions, 1)
					assert.Equal(t, "shop/api-egress-first-only", v.Egress.Decisions[0].Policy)
					assert.False(t, v.Egress.Decisions[0].Generated)
				}
			}
		}
		t.Logf("kubectl coastguard verdict:\n%s", coastguard("verdict", "--from", c2.Name+"/shop/api-0", "--to", c3.Name+"/shop/db-1", "--port", "5432/TCP"))
	})

	t.Run("what-if", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "candidate.yaml")
		require.NoError(t, os.WriteFile(f, []byte(fmt.Sprintf(pluginDBPolicy, 5433)), 0o600))
		var wi cli.WhatIf
		require.NoError(t, json.Unmarshal([]byte(coastguard("what-if", "-f", f, "--origin", c1.Name, "-o", "json")), &wi))
		assert.True(t, wi.Exists)
		require.Len(t, wi.Clusters, 3)
		for _, c := range wi.Clusters {
			assert.Len(t, c.Changed, 1, c.Cluster)
			assert.Contains(t, c.Diff, "5433")
		}
		t.Logf("kubectl coastguard what-if:\n%s", coastguard("what-if", "-f", f, "--origin", c1.Name))
		// nothing was applied
		nps, err := c2.ListNetworkPolicies(ctx, "shop", originSel(c1.Name))
		require.NoError(t, err)
		require.NotEmpty(t, nps)
		assert.Equal(t, int32(5432), nps[0].Spec.Ingress[0].Ports[0].Port.IntVal)
	})

	t.Run("conflicts", func(t *testing.T) {
		var rep reach.Report
		require.NoError(t, json.Unmarshal([]byte(coastguard("conflicts", "-o", "json")), &rep))
		var half *reach.HalfOpen
		for i, h := range rep.HalfOpen {
			if h.From == c2.Name+"/shop" && h.To == c3.Name+"/shop" && h.Port == "5432/TCP" {
				half = &rep.HalfOpen[i]
			}
		}
		require.NotNil(t, half, "planted half-open flow c2 api -> c3 db: %+v", rep.HalfOpen)
		assert.Equal(t, "ingress-allowed-egress-denied", half.Kind)
		assert.Equal(t, 4, half.Flows, "2 api pods x 2 db pods")
		assert.Contains(t, half.AllowedBy, "mcnp "+c1.Name+"/shop/db-allow-api ingress[0]")
		assert.Contains(t, half.DeniedBy, "networkpolicy "+c2.Name+"/shop/api-egress-first-only")
		var shadow *reach.Redundant
		for i, r := range rep.Redundant {
			if r.Group == "mcnp "+c2.Name+"/shop/db-from-first ingress[0]" {
				shadow = &rep.Redundant[i]
			}
		}
		require.NotNil(t, shadow, "planted shadowed rule: %+v", rep.Redundant)
		assert.Contains(t, shadow.ShadowedBy, "mcnp "+c1.Name+"/shop/db-allow-api ingress[0]")
		assert.Contains(t, rep.EmptyRules, "mcnp "+c3.Name+"/shop/web-local ingress[0]")
		t.Logf("kubectl coastguard conflicts:\n%s", coastguard("conflicts"))
	})

	t.Run("decommission", func(t *testing.T) {
		out, err := kubectl("no\n", "coastguard", "decommission", "--context", c3.Name)
		require.NoError(t, err, out)
		assert.Contains(t, out, "cluster "+c3.Name)
		assert.Contains(t, out, "leader ")
		assert.Contains(t, out, "aborted: nothing was changed")
		// still a member
		var st cli.Status
		require.NoError(t, json.Unmarshal([]byte(coastguard("status", "-o", "json")), &st))
		for _, v := range st.Views {
			for _, r := range v.Clusters {
				assert.False(t, r.Retired, "%s sees %s retired", v.Cluster, r.Cluster)
			}
		}
	})
}
