package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// brokerClusters are the Submariner Cluster objects the broker syncs into
// every cluster: the trusted source of pod and service CIDRs.
var brokerClusters = []kube.SubmarinerCluster{
	{ClusterID: "eu-1", PodCIDRs: []string{"10.1.0.0/16"}, ServiceCIDRs: []string{"100.1.0.0/16"}},
	{ClusterID: "eu-2", PodCIDRs: []string{"10.2.0.0/16"}, ServiceCIDRs: []string{"100.2.0.0/16"}},
	{ClusterID: "us-1", PodCIDRs: []string{"10.3.0.0/16"}, ServiceCIDRs: []string{"100.3.0.0/16"}},
}

// attackWorld: eu-2's writer (through gossip) advertises a pod CIDR of
// everything and pods claiming the metadata service, loopback and us-1's
// pod IP 10.3.1.10; eu-1's MCNP admits web pods of every cluster.
func attackWorld(t *testing.T, self string, trusted []kube.SubmarinerCluster) *world {
	w := newWorld(t, self, "eu-1", "eu-2", "us-1")
	nets, errs := NetworksFromSubmariner(trusted)
	require.Empty(t, errs)
	w.setNetworks(nets)
	for _, c := range []string{"eu-1", "eu-2", "us-1"} {
		v := &crdt.ClusterValue{Labels: map[string]string{"region": "x"}}
		if c == "eu-2" {
			v.PodCIDRs = []string{"0.0.0.0/0"}
		}
		w.write(c, crdt.KindCluster, "", v)
		w.write(c, crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	}
	web := map[string]string{"app": "web"}
	pod := func(origin, name, ip string) {
		w.write(origin, crdt.KindPod, "shop/"+name, &crdt.PodValue{Labels: web, IPs: []string{ip}, Phase: "Running"})
	}
	pod("eu-1", "web", "10.1.1.10")
	pod("us-1", "web", "10.3.1.10")
	pod("eu-2", "web", "10.2.1.10")
	pod("eu-2", "imds", "169.254.169.254")
	pod("eu-2", "lo", "127.0.0.1")
	pod("eu-2", "steal", "10.3.1.10")
	spec := apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{},
		PodSelector:     metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{
			ClusterSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: web}}}}},
	}
	w.write("eu-1", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, spec, 1))
	return w
}

func ingressCIDRs(w *world) []string {
	var out []string
	for _, np := range w.outputs.Desired() {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.From {
				if p.IPBlock != nil {
					out = append(out, p.IPBlock.CIDR)
				}
			}
		}
	}
	return out
}

// TestPodIPAttackThroughMirror: the pods eu-2 forges through gossip never
// become allow rules in eu-1 or us-1; the incremental path agrees with a
// from-scratch translation.
func TestPodIPAttackThroughMirror(t *testing.T) {
	for self, want := range map[string][]string{
		"eu-1": {"10.2.1.10/32", "10.3.1.10/32"},
		"us-1": {"10.1.1.10/32", "10.2.1.10/32"},
	} {
		w := attackWorld(t, self, brokerClusters)
		got := ingressCIDRs(w)
		require.ElementsMatch(t, want, got, "%s", self)
		for _, bad := range []string{"169.254.169.254/32", "127.0.0.1/32"} {
			require.NotContains(t, got, bad)
		}
		require.Equal(t, modeltest.NPNames(w.fromScratch(self)), modeltest.NPNames(w.outputs.Desired()))
		res, ok := w.outputs.Result(pref("eu-1/shop/db"))
		require.True(t, ok)
		require.Equal(t, enforce.ReasonPodIPReserved, res.Degraded)
		require.Contains(t, w.outputs.Report(pref("eu-1/shop/db"), res, 1).Degraded, "PodIPReservedAddress: eu-2")
	}
}

// TestUnknownCIDRsDegradeAndNameTheCluster: us-1 has no Submariner Cluster
// object here; its pods are dropped and the MCNP's Degraded condition
// names it and the reason.
func TestUnknownCIDRsDegradeAndNameTheCluster(t *testing.T) {
	w := attackWorld(t, "eu-1", brokerClusters[:2])
	require.ElementsMatch(t, []string{"10.2.1.10/32"}, ingressCIDRs(w))
	res, _ := w.outputs.Result(pref("eu-1/shop/db"))
	require.Equal(t, enforce.ReasonPodCIDRsUnknown, res.Degraded)
	rep := w.outputs.Report(pref("eu-1/shop/db"), res, 1)
	st := kube.Aggregate(kube.AggregateInput{Generation: 1, Enforcing: []string{"eu-1"},
		Reports: map[string]crdt.ReportValue{"eu-1": rep}, Now: time.Unix(0, 0)})
	var deg *metav1.Condition
	for i := range st.Conditions {
		if st.Conditions[i].Type == apiv1.ConditionDegraded {
			deg = &st.Conditions[i]
		}
	}
	require.NotNil(t, deg)
	require.Equal(t, metav1.ConditionTrue, deg.Status)
	require.Equal(t, "PodCIDRsUnknown", deg.Reason)
	require.Contains(t, deg.Message, "eu-1: PodCIDRsUnknown: us-1 (pod CIDRs unknown here; their pods are left out)")

	// The broker syncs us-1's Cluster object: its pod is allowed again.
	nets, _ := NetworksFromSubmariner(brokerClusters)
	require.True(t, w.mirror.SetNetworks(nets))
	require.False(t, w.mirror.SetNetworks(nets), "unchanged")
	w.outputs.Recompute(w.mirror.Inventory(), nil, true)
	require.ElementsMatch(t, []string{"10.2.1.10/32", "10.3.1.10/32"}, ingressCIDRs(w))
}

func TestNetworksFromSubmarinerAndConfig(t *testing.T) {
	sub, errs := NetworksFromSubmariner([]kube.SubmarinerCluster{
		{ClusterID: "eu-2", PodCIDRs: []string{"10.2.0.0/16", "nonsense"}, GlobalCIDRs: []string{"242.2.0.0/16"}},
		{ClusterID: "eu-2", PodCIDRs: []string{"10.22.0.0/16"}},
	})
	require.Len(t, errs, 1)
	require.ErrorContains(t, errs[0], `Submariner Cluster eu-2: "nonsense" is not a CIDR`)
	cfg, err := enforce.ParseClusterCIDRs([]string{"eu-2=10.20.0.0/16"})
	require.NoError(t, err)
	n := enforce.MergeNetworks(sub, cfg)
	require.Len(t, n["eu-2"].PodCIDRs, 3)
	require.Len(t, n["eu-2"].GlobalCIDRs, 1)
	require.Equal(t, []string{"config", "submariner"}, n["eu-2"].Sources)
}

func TestPodIPReportMetricAndRateLimitedLog(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := newPodIPReport(reg)
	require.NoError(t, err)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	w := attackWorld(t, "eu-1", brokerClusters)
	drops := enforce.PodIPDrops(w.mirror.Inventory(), "eu-1")
	t0 := time.Unix(1000, 0)
	r.update(log, drops, t0)
	require.Equal(t, 2.0, testutil.ToFloat64(r.gauge.WithLabelValues("eu-2", "reserved_address")))
	require.Equal(t, 1.0, testutil.ToFloat64(r.gauge.WithLabelValues("eu-2", "outside_owner_cidrs")))
	require.Equal(t, 2, strings.Count(buf.String(), "remote pod IPs dropped"))
	require.Contains(t, buf.String(), "example=\"shop/imds 169.254.169.254/32\"")

	// Same counts: no new line. A changed count within the interval: none
	// either; after it: one.
	r.update(log, drops, t0.Add(time.Second))
	drops[0].Count = 5
	r.update(log, drops, t0.Add(2*time.Second))
	require.Equal(t, 2, strings.Count(buf.String(), "remote pod IPs dropped"))
	require.Equal(t, 5.0, testutil.ToFloat64(r.gauge.WithLabelValues(drops[0].Cluster, string(drops[0].Reason))))
	drops[0].Count = 6
	r.update(log, drops, t0.Add(PodIPLogEvery+time.Second))
	require.Equal(t, 3, strings.Count(buf.String(), "remote pod IPs dropped"))

	// Resolved: the series goes away.
	r.update(log, nil, t0.Add(2*PodIPLogEvery))
	require.Equal(t, 0, testutil.CollectAndCount(r.gauge))
	require.Contains(t, buf.String(), "remote pod IPs no longer dropped")
}

// The clusters known independently of gossip (they always get an origin
// slot): itself, the trust bundle and the trusted networks, updated with
// the networks.
func TestKnownOrigins(t *testing.T) {
	d := &Daemon{opts: Options{ClusterID: "a", TrustBundle: map[string][]byte{"b": {1}}}}
	require.False(t, d.knownOrigin("a"), "nothing known before the first update")
	d.setKnownOrigins(mustNets(t, "c=10.3.0.0/16"))
	for _, id := range []string{"a", "b", "c"} {
		require.True(t, d.knownOrigin(id), id)
	}
	require.False(t, d.knownOrigin("invented"))
	d.setKnownOrigins(mustNets(t, "e=10.5.0.0/16"))
	require.False(t, d.knownOrigin("c"), "c's Cluster object went away")
	require.True(t, d.knownOrigin("e"))
}
