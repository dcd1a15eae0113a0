package cli

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
)

// agreeObj is a custom resource of the Globalnet cluster set below.
func agreeObj(apiVersion, kind, ns, name string, spec map[string]any, allocated ...any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}}
	if allocated != nil {
		u.Object["status"] = map[string]any{"allocatedIPs": allocated}
	}
	return u
}

// agreeSet is a Globalnet cluster set: b's pods egress through a
// per-pod GlobalEgressIP, both clusters know both Submariner Cluster
// objects (b's copy of its own with one range more than a's), a admits api pods of every cluster into shop, and b's MCNP in
// kube-system (protected by the default guards) must not reach a.
func agreeSet() map[string][2][]runtime.Object {
	ns := func(n string) runtime.Object { return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}} }
	pod := func(ns, name, ip string, labels map[string]string) runtime.Object {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	// b's own copy of its Cluster object claims one more global range than
	// the copy a holds (an edit in b, or a broker sync that has not reached
	// a): a's daemon trusts only what a holds.
	sub := func(bGlobal ...any) []runtime.Object {
		return []runtime.Object{
			agreeObj("submariner.io/v1", "Cluster", "submariner-operator", "a", map[string]any{"cluster_id": "a",
				"cluster_cidr": []any{"10.1.0.0/16"}, "global_cidr": []any{"242.0.0.0/16"}}),
			agreeObj("submariner.io/v1", "Cluster", "submariner-operator", "b", map[string]any{"cluster_id": "b",
				"cluster_cidr": []any{"10.2.0.0/16"}, "global_cidr": bGlobal}),
		}
	}
	mcnp := func(ns, name string, spec map[string]any) runtime.Object {
		return agreeObj(v1.SchemeGroupVersion.String(), "MultiClusterNetworkPolicy", ns, name, spec)
	}
	allowAPI := map[string]any{"podSelector": map[string]any{}, "policyTypes": []any{"Ingress"},
		"ingress": []any{map[string]any{"from": []any{map[string]any{"clusterSelector": map[string]any{},
			"podSelector": map[string]any{"matchLabels": map[string]any{"app": "api"}}}}}}}
	return map[string][2][]runtime.Object{
		"a": {{ns("shop"), ns("kube-system"), pod("shop", "web", "10.1.0.5", map[string]string{"app": "web"})},
			append(sub("242.1.0.0/16"), mcnp("shop", "allow-api", allowAPI),
				agreeObj("submariner.io/v1", "ClusterGlobalEgressIP", "submariner-operator", "cluster-egress.submariner.io", map[string]any{}, "242.0.0.1"))},
		"b": {{ns("shop"), ns("kube-system"), pod("shop", "api", "10.2.0.7", map[string]string{"app": "api", "tier": "main"}),
			pod("kube-system", "dns", "10.2.0.9", map[string]string{"app": "api"}),
			pod("shop", "api-extra", "10.2.0.8", map[string]string{"app": "api", "tier": "extra"})},
			append(sub("242.1.0.0/16", "242.9.0.0/16"), mcnp("kube-system", "lockdown", map[string]any{"podSelector": map[string]any{}, "policyTypes": []any{"Ingress"}}),
				agreeObj("submariner.io/v1", "GlobalEgressIP", "shop", "api", map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"tier": "main"}}}, "242.1.0.5"),
				agreeObj("submariner.io/v1", "GlobalEgressIP", "shop", "api-extra", map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"tier": "extra"}}}, "242.9.0.7"))},
	}
}

// The CLI's path (live objects -> static inventory -> model.Converge)
// and the daemon's (informers, SubmarinerWatcher, replicated state, the
// cluster's own Mirror and enforcer outputs) generate the same
// NetworkPolicies from the same objects of a Globalnet cluster set with a
// protected namespace.
func TestCLIAgreesWithDaemon(t *testing.T) {
	set := agreeSet()
	var ms []*member
	for _, id := range []string{"a", "b"} {
		ms = append(ms, fakeMember(id, set[id][0], set[id][1]))
	}
	o := &Options{Namespace: "coastguard-system", ErrOut: io.Discard}
	l, err := o.load(context.Background(), ms)
	require.NoError(t, err)

	st := crdt.NewState("")
	watchers := map[string]*kube.SubmarinerWatcher{}
	for _, id := range []string{"a", "b"} {
		snap, w := daemonEntries(t, id, set[id][0], set[id][1])
		watchers[id] = w
		wst := crdt.NewState(id)
		require.NoError(t, wst.SetEpoch(1))
		for kind, entries := range snap {
			for name, v := range entries {
				_, _, err := wst.Write(kind, name, v, false, 0)
				require.NoError(t, err)
			}
		}
		for _, d := range wst.DeltaSince(st.Digest(), 0) {
			_, err := st.Apply(d)
			require.NoError(t, err)
		}
	}
	require.Len(t, l.inv.Policies(), 2)
	sawGlobal := false
	for _, c := range []string{"a", "b"} {
		var cli []networkingv1.NetworkPolicy
		for _, ref := range l.inv.Policies() {
			cli = append(cli, l.admit(c, ref).NetworkPolicies...)
		}
		m := model.NewMirror(c)
		require.Empty(t, m.Load(st))
		nets, errs := daemon.NetworksFromSubmariner(watchers[c].Clusters())
		require.Empty(t, errs)
		m.SetNetworks(nets)
		outs := model.NewOutputs(c)
		outs.SetGuards(enforce.DefaultGuards("coastguard-system", submarinerNamespace))
		outs.Recompute(m.Inventory(), nil, true)
		want := outs.Desired()
		sortNPs(cli)
		sortNPs(want)
		require.Equal(t, want, cli, "cluster %s: the CLI and the daemon disagree", c)
		for i := range cli {
			if c == "a" {
				require.NotEqual(t, "kube-system", cli[i].Namespace, "b's MCNP in a protected namespace is not enforced in a")
			}
			for _, r := range cli[i].Spec.Ingress {
				for _, p := range r.From {
					sawGlobal = sawGlobal || (p.IPBlock != nil && p.IPBlock.CIDR == "242.1.0.5/32")
					if c == "a" && p.IPBlock != nil {
						require.NotEqual(t, "242.9.0.7/32", p.IPBlock.CIDR, "a admits an IP only b's copy of b's Cluster object vouches for")
					}
				}
			}
		}
	}
	require.True(t, sawGlobal, "b's api pod is allowed by its Globalnet egress IP")
}

func sortNPs(nps []networkingv1.NetworkPolicy) {
	sort.SliceStable(nps, func(i, j int) bool {
		return nps[i].Namespace+"/"+nps[i].Name < nps[j].Namespace+"/"+nps[j].Name
	})
}

// daemonEntries runs cluster id's informer-backed inventory and
// Submariner watcher against fake apiservers and returns its full-sync
// entries.
func daemonEntries(t *testing.T, id string, typed, dyn []runtime.Object) (kube.Snapshot, *kube.SubmarinerWatcher) {
	t.Helper()
	m := fakeMember(id, typed, dyn)
	client := m.Client.(*fake.Clientset)
	client.Resources = []*metav1.APIResourceList{
		{GroupVersion: v1.SchemeGroupVersion.String(), APIResources: []metav1.APIResource{{Name: "multiclusternetworkpolicies", Namespaced: true}}},
		{GroupVersion: "submariner.io/v1", APIResources: []metav1.APIResource{{Name: "clusters", Namespaced: true},
			{Name: "clusterglobalegressips", Namespaced: true}, {Name: "globalegressips", Namespaced: true}, {Name: "globalingressips", Namespaced: true}}},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := kube.NewSubmarinerWatcher(kube.SubmarinerConfig{ClusterID: id, Dynamic: m.Dynamic, Discovery: client.Discovery(), Logger: log})
	require.NoError(t, err)
	inv, err := kube.NewInventory(kube.InventoryConfig{ClusterID: id, Client: client, Dynamic: m.Dynamic, Discovery: client.Discovery(),
		Writer:      kube.WriterFunc(func(crdt.Kind, string, []byte, bool) error { return kube.ErrNotLeader }),
		Persisted:   func() (kube.Snapshot, error) { return kube.Snapshot{}, nil },
		ClusterInfo: w.Info, PodEgressIPs: w.PodEgressIPsFunc(), ServiceGlobalIPs: w.ServiceGlobalIPsFunc(), Logger: log})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.Start(ctx.Done())
	inv.Start(ctx)
	require.NoError(t, inv.WaitForSync(ctx))
	require.Eventually(t, w.HasSynced, 10*time.Second, 5*time.Millisecond)
	snap, failed, err := inv.Desired()
	require.NoError(t, err)
	require.Empty(t, failed)
	return snap, w
}
