package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// globalnetTree: cluster a (plain, enforcing the MCNPs) and cluster b with
// Globalnet: cluster-wide egress IPs, a namespace-wide GlobalEgressIP for
// "billing" and a per-pod one for app=api in "shop"; b exports shop/db
// (global ingress IP 242.1.0.50; backends db-0, ready, and db-1, not
// ready), and a's to-db MCNP admits db-0 only.
func globalnetTree(t *testing.T) string {
	return writeTree(t, map[string]string{
		"a/to-db.yaml": `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: to-db, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Egress]
  egress:
  - to:
    - clusterSelector: {}
      podSelector: {matchLabels: {tier: primary}}
    ports: [{port: pg}]
`,
		"b/db.yaml": `apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: 10.96.0.50
  selector: {role: db}
  ports: [{name: pg, port: 15432, targetPort: pg}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: db, namespace: shop}
---
apiVersion: submariner.io/v1
kind: GlobalIngressIP
metadata: {name: db, namespace: shop}
spec: {target: ClusterIPService, serviceRef: {name: db}}
status: {allocatedIP: 242.1.0.50}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: shop, labels: {role: db, tier: primary}}
spec: {containers: [{name: pg, ports: [{name: pg, containerPort: 5432}]}]}
status: {phase: Running, podIP: 10.1.0.20, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: shop, labels: {role: db}}
spec: {containers: [{name: pg, ports: [{name: pg, containerPort: 5432}]}]}
status: {phase: Running, podIP: 10.1.0.21, conditions: [{type: Ready, status: "False"}]}
`,
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
	require.Contains(t, string(a), "cidr: 242.1.0.50/32", "the Service's global IP is exact: kept with drop")
}

// TestRenderGlobalnetService: b's exported shop/db is reached from a by
// its global ingress IP on the service port (the not-ready db-1 is no
// endpoint, so db-0 is every backend), never by its ClusterIP; once db-1
// is ready, the rule admits only some backends and the address goes.
func TestRenderGlobalnetService(t *testing.T) {
	in := globalnetTree(t)
	out := t.TempDir()
	var log bytes.Buffer
	require.NoError(t, render(in, out, &log))
	a, err := os.ReadFile(filepath.Join(out, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.Regexp(t, `(?s)- ports:\n\s+- port: 15432\n\s+protocol: TCP\n\s+to:\n\s+- ipBlock:\n\s+cidr: 242\.1\.0\.50/32`, string(a))
	require.NotContains(t, string(a), "10.96.0.50", "a Globalnet cluster's ClusterIP is not routable across the cable")

	ready := filepath.Join(in, "b", "db.yaml")
	b, err := os.ReadFile(ready)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ready, bytes.Replace(b, []byte(`status: "False"`), []byte(`status: "True"`), 1), 0o644))
	out = t.TempDir()
	log.Reset()
	require.NoError(t, render(in, out, &log))
	a, err = os.ReadFile(filepath.Join(out, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.NotContains(t, string(a), "242.1.0.50")
	require.Contains(t, log.String(), "ServiceBackendsPartiallyAdmitted: b/shop/db")

	// a global IP outside b's global CIDR as a knows it: never rendered
	require.NoError(t, os.WriteFile(ready, bytes.Replace(b, []byte("allocatedIP: 242.1.0.50"), []byte("allocatedIP: 242.9.0.50"), 1), 0o644))
	out = t.TempDir()
	log.Reset()
	require.NoError(t, render(in, out, &log))
	a, err = os.ReadFile(filepath.Join(out, "a", "networkpolicies.yaml"))
	require.NoError(t, err)
	require.NotContains(t, string(a), "242.9.0.50")
	require.Contains(t, log.String(), "ServiceGlobalIPOutsideGlobalCIDR: b/shop/db")
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
		"d/c.yaml": "apiVersion: submariner.io/v1\nkind: GlobalIngressIP\nmetadata: {name: db, namespace: shop}\nspec: {target: ClusterIPService, serviceRef: {name: db}}\nstatus: {allocatedIP: 242.0.0.x}\n",
	})
	err := render(in, t.TempDir(), &bytes.Buffer{})
	require.ErrorContains(t, err, `ClusterGlobalEgressIP default/x: status.allocatedIPs: "nope" is not an IP address`)
	require.ErrorContains(t, err, "GlobalEgressIP default/gy: spec.podSelector")
	require.ErrorContains(t, err, `"banana" is not a CIDR`)
	require.ErrorContains(t, err, `GlobalIngressIP shop/db: status.allocatedIP: "242.0.0.x" is not an IP address`)
}

func TestEffectiveSeeds(t *testing.T) {
	require.Equal(t, []string{"coastguard.cg.svc.clusterset.local"}, effectiveSeeds(nil, "cg"))
	require.Nil(t, effectiveSeeds([]string{"none"}, "cg"))
	require.Equal(t, []string{"x:1"}, effectiveSeeds([]string{"x:1"}, "cg"))
}
