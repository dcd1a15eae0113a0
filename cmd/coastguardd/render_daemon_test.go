package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
)

// TestRenderEqualsDaemon proves that `coastguardd render` writes exactly
// the NetworkPolicies the daemons would apply for the same objects. The
// daemon side is built in-process from the daemon's own parts: per
// cluster, a (fake) apiserver holding the objects, the kube.Inventory's
// informers and converters and the SubmarinerWatcher; the entries each
// inventory would write go into that cluster's crdt.State and reach an
// observer by anti-entropy deltas (crdt.DeltaSince), as over gossip; then
// model.Mirror.Load and the enforcer's model.Outputs for every cluster.
func TestRenderEqualsDaemon(t *testing.T) {
	// Every cluster admits MCNPs of region=eu origins only, and pins eu-2
	// to region=us whatever it claims: MCNPs of us-1 and eu-2 are refused
	// in the others, and clusterSelectors see eu-2 as a us cluster.
	consent := &enforce.Consent{
		Rules: []enforce.ConsentRule{{Name: "eu", Origins: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}},
			Namespaces: &metav1.LabelSelector{}}},
		ClusterLabels: map[string]map[string]string{"eu-2": {"region": "us"}},
	}
	require.NoError(t, consent.Validate())
	trees := map[string]struct {
		in      string
		consent *enforce.Consent
	}{
		"examples":         {in: "../../examples"},
		"examples-consent": {in: "../../examples", consent: consent},
		"globalnet":        {in: globalnetTree(t)},
	}
	outputs := map[string]string{}
	for name, tc := range trees {
		in := tc.in
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			require.NoError(t, renderWith(in, out, io.Discard, enforce.GlobalnetCoarse, tc.consent))
			clusters, objs, _, err := readRenderInput(in, io.Discard)
			require.NoError(t, err)
			require.NotEmpty(t, clusters)

			st := crdt.NewState("")
			var watchers = map[string]*kube.SubmarinerWatcher{}
			for _, id := range clusters {
				snap, w := daemonInventory(t, id, objs[id])
				watchers[id] = w
				gossipInto(t, st, id, snap)
			}
			rendered := 0
			for _, c := range clusters {
				want, err := os.ReadFile(filepath.Join(out, c, "networkpolicies.yaml"))
				require.NoError(t, err)
				rendered += len(want)
				got := daemonOutput(t, st, c, watchers[c], tc.consent)
				require.Equal(t, string(want), got, "cluster %s: render and the daemon disagree", c)
				outputs[name] += got
			}
			require.NotZero(t, rendered, "the inputs must generate NetworkPolicies somewhere")
		})
	}
	require.NotEqual(t, outputs["examples"], outputs["examples-consent"], "the consent refuses some MCNPs of the examples")
}

// daemonInventory runs cluster id's inventory and Submariner watcher
// against a fake apiserver holding objs and returns the entries the
// inventory would write (its full-sync snapshot).
func daemonInventory(t *testing.T, id string, o *clusterObjects) (kube.Snapshot, *kube.SubmarinerWatcher) {
	t.Helper()
	var typed []runtime.Object
	for _, ns := range o.objs.Namespaces {
		typed = append(typed, ns.DeepCopy())
	}
	for _, p := range o.objs.Pods {
		typed = append(typed, p.DeepCopy())
	}
	for _, s := range o.objs.Services {
		typed = append(typed, s.DeepCopy())
	}
	var dyn []runtime.Object
	for _, u := range slices.Concat(o.objs.ServiceExports, o.objs.Policies, o.objs.ClusterProperties) {
		dyn = append(dyn, u.DeepCopy())
	}
	for _, u := range slices.Concat(o.objs.SubmarinerClusters, o.objs.ClusterGlobalEgressIPs) {
		require.Equal(t, "submariner-operator", u.GetNamespace(),
			"test inputs keep Submariner's Cluster and ClusterGlobalEgressIP objects where the watcher looks")
		dyn = append(dyn, u.DeepCopy())
	}
	for _, u := range slices.Concat(o.objs.GlobalEgressIPs, o.objs.GlobalIngressIPs) {
		dyn = append(dyn, u.DeepCopy())
	}
	client := fake.NewClientset(typed...)
	client.Resources = servedResources()
	dynClient := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kube.MCNPResource:                  "MultiClusterNetworkPolicyList",
		kube.ClusterPropertyResource:       "ClusterPropertyList",
		kube.SubmarinerClusterResource:     "ClusterList",
		kube.ClusterGlobalEgressIPResource: "ClusterGlobalEgressIPList",
		kube.GlobalEgressIPResource:        "GlobalEgressIPList",
		kube.GlobalIngressIPResource:       "GlobalIngressIPList",
		kube.ServiceExportResource:         "ServiceExportList",
	}, dyn...)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := kube.NewSubmarinerWatcher(kube.SubmarinerConfig{ClusterID: id, Dynamic: dynClient, Discovery: client.Discovery(), Logger: log})
	require.NoError(t, err)
	inv, err := kube.NewInventory(kube.InventoryConfig{
		ClusterID: id, Client: client, Dynamic: dynClient, Discovery: client.Discovery(),
		Writer: noWriter{}, Persisted: func() (kube.Snapshot, error) { return kube.Snapshot{}, nil },
		ClusterInfo: w.Info, PodEgressIPs: w.PodEgressIPsFunc(), ServiceGlobalIPs: w.ServiceGlobalIPsFunc(), Logger: log,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.Start(ctx.Done())
	inv.Start(ctx)
	require.NoError(t, inv.WaitForSync(ctx))
	require.Eventually(t, w.HasSynced, syncWait, tick)
	snap, failed, err := inv.Desired()
	require.NoError(t, err)
	require.Empty(t, failed)
	return snap, w
}

const (
	syncWait = 10 * time.Second
	tick     = 5 * time.Millisecond
)

// servedResources is the discovery of an apiserver with the MCNP,
// ClusterProperty and Submariner CRDs installed.
func servedResources() []*metav1.APIResourceList {
	var out []*metav1.APIResourceList
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		kind string
	}{
		{kube.MCNPResource, "MultiClusterNetworkPolicy"},
		{kube.ClusterPropertyResource, "ClusterProperty"},
		{kube.SubmarinerClusterResource, "Cluster"},
		{kube.ClusterGlobalEgressIPResource, "ClusterGlobalEgressIP"},
		{kube.GlobalEgressIPResource, "GlobalEgressIP"},
		{kube.GlobalIngressIPResource, "GlobalIngressIP"},
		{kube.ServiceExportResource, "ServiceExport"},
	} {
		gv := r.gvr.GroupVersion().String()
		var list *metav1.APIResourceList
		for _, l := range out {
			if l.GroupVersion == gv {
				list = l
			}
		}
		if list == nil {
			list = &metav1.APIResourceList{GroupVersion: gv}
			out = append(out, list)
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r.gvr.Resource, Kind: r.kind, Namespaced: r.kind != "ClusterProperty"})
	}
	return out
}

// noWriter: the test reads the inventory's snapshot, it never writes.
type noWriter struct{}

func (noWriter) Write(crdt.Kind, string, []byte, bool) error { return kube.ErrNotLeader }

// gossipInto writes a cluster's entries as that cluster (epoch 1) and
// brings them to the observer st by anti-entropy: the deltas DeltaSince
// computes for st's digest.
func gossipInto(t *testing.T, st *crdt.State, id string, snap kube.Snapshot) {
	t.Helper()
	w := crdt.NewState(id)
	require.NoError(t, w.SetEpoch(1))
	for kind, entries := range snap {
		for name, v := range entries {
			_, _, err := w.Write(kind, name, v, false, 0)
			require.NoError(t, err)
		}
	}
	for _, d := range w.DeltaSince(st.Digest(), 0) {
		_, err := st.Apply(d)
		require.NoError(t, err)
	}
	require.Equal(t, w.Len(id), st.Len(id))
}

// daemonOutput is what cluster c's daemon would apply: the mirror loaded
// from the converged state, the trusted networks from its Submariner
// watcher, the enforcer's outputs for every policy; rendered like render
// writes them.
func daemonOutput(t *testing.T, st *crdt.State, c string, w *kube.SubmarinerWatcher, consent *enforce.Consent) string {
	t.Helper()
	m := model.NewMirror(c)
	outs := model.NewOutputs(c)
	outs.SetGuards(guards(defaultConfig(), defaultSubmarinerNamespace)) // as run does without flags
	if consent != nil {                                                 // as daemon.New does
		m.SetTrustedLabels(consent.ClusterLabels)
		outs.SetConsent(consent)
	}
	require.Empty(t, m.Load(st))
	m.Inventory().SetGlobalnetPolicy(enforce.GlobalnetCoarse)
	nets, errs := daemon.NetworksFromSubmariner(w.Clusters())
	require.Empty(t, errs)
	m.SetNetworks(enforce.MergeNetworks(nets))
	outs.Recompute(m.Inventory(), nil, true)
	nps := outs.Desired()
	sort.SliceStable(nps, func(i, j int) bool { return npLess(&nps[i], &nps[j]) })
	var buf bytes.Buffer
	for i := range nps {
		b, err := marshalNetworkPolicy(&nps[i])
		require.NoError(t, err)
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.String()
}

func npLess(a, b *networkingv1.NetworkPolicy) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}
