package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// globalnetTree: cluster a (plain, enforcing the MCNP) and cluster b with
// Globalnet: cluster-wide egress IPs, a namespace-wide GlobalEgressIP for
// "billing" and a per-pod one for app=api in "shop".
func globalnetTree(t *testing.T) string {
	return writeTree(t, map[string]string{
		"a/ns.yaml": nsShop,
		"a/sub.yaml": `apiVersion: submariner.io/v1
kind: Cluster
metadata: {name: a, namespace: submariner-operator}
spec: {cluster_id: a, cluster_cidr: [10.1.0.0/16], service_cidr: [10.96.0.0/16]}
---
apiVersion: submariner.io/v1
kind: Cluster
metadata: {name: b, namespace: submariner-operator}
spec: {cluster_id: b, cluster_cidr: [10.1.0.0/16], global_cidr: [242.1.0.0/16]}
`,
		"a/pol.yaml": `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: p, namespace: shop}
spec:
  podSelector: {}
  ingress:
  - from:
    - clusterSelector: {}
      namespaceSelector: {}
      podSelector: {matchExpressions: [{key: app, operator: Exists}]}
`,
		"b/ns.yaml": nsShop + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: billing}\n",
		"b/pods.yaml": `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
status: {phase: Running, podIP: 10.1.0.7}
---
apiVersion: v1
kind: Pod
metadata: {name: api, namespace: shop, labels: {app: api}}
status: {phase: Running, podIP: 10.1.0.8}
---
apiVersion: v1
kind: Pod
metadata: {name: pay, namespace: billing, labels: {app: pay}}
status: {phase: Running, podIP: 10.1.0.9}
`,
		"b/sub.yaml": `apiVersion: submariner.io/v1
kind: Cluster
metadata: {name: b, namespace: submariner-operator}
spec: {cluster_id: b, cluster_cidr: [10.1.0.0/16], global_cidr: [242.1.0.0/16]}
---
apiVersion: submariner.io/v1
kind: ClusterGlobalEgressIP
metadata: {name: cluster-egress.submariner.io, namespace: submariner-operator}
status: {allocatedIPs: [242.1.0.1, 242.1.0.2]}
---
apiVersion: submariner.io/v1
kind: GlobalEgressIP
metadata: {name: ns-egress, namespace: billing}
status: {allocatedIPs: [242.1.1.1]}
---
apiVersion: submariner.io/v1
kind: GlobalEgressIP
metadata: {name: api-egress, namespace: shop}
spec: {podSelector: {matchLabels: {app: api}}}
status: {allocatedIPs: [242.1.2.1]}
`,
	})
}

func TestRenderGlobalnet(t *testing.T) {
	in := globalnetTree(t)
	out := t.TempDir()
	var log bytes.Buffer
	require.NoError(t, render(in, out, &log))
	a, err := os.ReadFile(filepath.Join(out, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
	for _, c := range []string{"242.1.0.1/32", "242.1.0.2/32", "242.1.1.1/32", "242.1.2.1/32"} {
		require.Contains(t, string(a), "cidr: "+c)
	}
	require.NotContains(t, string(a), "cidr: 10.1.0.", "Globalnet pods are never rendered by pod IP")
	require.Contains(t, log.String(), "a: MultiClusterNetworkPolicy a/shop/p degraded: GlobalnetCoarseIdentity: b")
	require.NotContains(t, log.String(), "never allowed", "a trusts b's global CIDR from the Cluster object in its directory")
	require.NotContains(t, log.String(), "overlapping", "b has Globalnet: same pod CIDR is fine")

	out2 := t.TempDir()
	log.Reset()
	require.NoError(t, renderWith(in, out2, &log, enforce.GlobalnetDrop, nil))
	a, err = os.ReadFile(filepath.Join(out2, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.NotContains(t, string(a), "242.1.0.1/32", "drop: the coarse web pod is left out")
	require.Contains(t, string(a), "cidr: 242.1.1.1/32")
	require.Contains(t, string(a), "cidr: 242.1.2.1/32")
	require.Contains(t, log.String(), "degraded: GlobalnetPeersDropped: b")
}

func TestRenderOverlappingCIDRsWarn(t *testing.T) {
	in := writeTree(t, map[string]string{
		"a/c.yaml": "apiVersion: submariner.io/v1\nkind: Cluster\nmetadata: {name: a}\nspec: {cluster_id: a, cluster_cidr: [10.0.0.0/16]}\n",
		"b/c.yaml": "apiVersion: submariner.io/v1\nkind: Cluster\nmetadata: {name: b}\nspec: {cluster_id: b, cluster_cidr: [10.0.0.0/8]}\n",
	})
	var log bytes.Buffer
	require.NoError(t, render(in, t.TempDir(), &log))
	require.Contains(t, log.String(), "warning: clusters a and b have overlapping pod CIDRs and no Globalnet")
}

func TestRenderSubmarinerInvalid(t *testing.T) {
	in := writeTree(t, map[string]string{
		"a/c.yaml": "apiVersion: submariner.io/v1\nkind: ClusterGlobalEgressIP\nmetadata: {name: x}\nstatus: {allocatedIPs: [nope]}\n",
		"b/c.yaml": "apiVersion: submariner.io/v1\nkind: GlobalEgressIP\nmetadata: {name: gy}\nspec: {podSelector: {matchExpressions: [{key: a, operator: Bogus}]}}\n",
		"c/c.yaml": "apiVersion: submariner.io/v1\nkind: Cluster\nmetadata: {name: c}\nspec: {cluster_id: c, cluster_cidr: [banana]}\n",
	})
	err := render(in, t.TempDir(), &bytes.Buffer{})
	require.ErrorContains(t, err, `ClusterGlobalEgressIP default/x: status.allocatedIPs: "nope" is not an IP address`)
	require.ErrorContains(t, err, "GlobalEgressIP default/gy: spec.podSelector")
	require.ErrorContains(t, err, `"banana" is not a CIDR`)
}

func TestEffectiveSeeds(t *testing.T) {
	require.Equal(t, []string{"coastguard.cg.svc.clusterset.local"}, effectiveSeeds(nil, "cg"))
	require.Nil(t, effectiveSeeds([]string{"none"}, "cg"))
	require.Equal(t, []string{"x:1"}, effectiveSeeds([]string{"x:1"}, "cg"))
}
