package model

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// lostWorld: a enforces; b originated a deny-by-default policy for shop
// (isolating a's shop pods except from app=web) and runs a web pod.
func lostWorld(t *testing.T) *world {
	w := newWorld(t, "a", "a", "b")
	nets, err := enforce.ParseClusterCIDRs([]string{"a=10.1.0.0/16", "b=10.2.0.0/16"})
	require.NoError(t, err)
	w.setNetworks(nets)
	w.labelled("a", "b")
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindPod, "shop/web", &crdt.PodValue{Labels: map[string]string{"app": "web"}, IPs: []string{"10.2.0.1"}, Phase: "Running"})
	spec := apiv1.MultiClusterNetworkPolicySpec{
		ClusterSelector: &metav1.LabelSelector{},
		PodSelector:     metav1.LabelSelector{},
		Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{
			ClusterSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}},
	}
	w.write("b", crdt.KindPolicy, "shop/from-b", modeltest.PolicyValue(t, spec, 1))
	require.Len(t, w.outputs.Desired(), 1)
	return w
}

func (w *world) retire(r crdt.Retire) Result {
	w.t.Helper()
	changes, err := w.observer.ApplyRetire(r)
	require.NoError(w.t, err)
	res := w.mirror.Apply(changes)
	require.Empty(w.t, res.Errors)
	w.outputs.Recompute(w.mirror.Inventory(), res.Affected, res.All)
	return res
}

func fromB(w *world) []string {
	var ips []string
	for _, np := range w.outputs.Desired() {
		if np.Labels[enforce.LabelOriginCluster] != "b" {
			continue
		}
		for _, r := range np.Spec.Ingress {
			for _, p := range r.From {
				if p.IPBlock != nil {
					ips = append(ips, p.IPBlock.CIDR)
				}
			}
		}
	}
	return ips
}

// A lost origin's policy keeps isolating (fail closed), its pods are gone
// (which only narrows), and only a release lifts it.
func TestLostOriginPoliciesKeepEnforcing(t *testing.T) {
	w := lostWorld(t)
	require.Equal(t, []string{"10.2.0.1/32"}, fromB(w))

	r := w.observer.RetireRecord("b") // decided by membership: unsigned
	w.mirror.MarkLost("b", r.UpTo)
	res := w.retire(r)
	require.True(t, res.All)
	desired := w.outputs.Desired()
	require.Len(t, desired, 1, "b's policy is still enforced here")
	require.Equal(t, "b", desired[0].Labels[enforce.LabelOriginCluster])
	require.Empty(t, fromB(w), "b's pod IP is gone: the kept policy only narrows")
	require.NotContains(t, w.mirror.Inventory().Clusters(), "b")
	require.Equal(t, map[string][]string{"b": {"shop/from-b"}}, w.mirror.LostPolicies())
	require.Equal(t, w.fromScratchWithLost(), modeltest.NPNames(desired), "incremental equals a rebuild with the kept policies restored")

	keys := w.mirror.ReleaseLost("b")
	require.Equal(t, []enforce.PolicyRef{{Origin: "b", Namespace: "shop", Name: "from-b"}}, keys)
	w.outputs.Recompute(w.mirror.Inventory(), keys, false)
	require.Empty(t, w.outputs.Desired(), "released: the policy is gone")
	require.Empty(t, w.mirror.LostPolicies())
}

// A decommissioned (not lost) origin's policies go at once, as before.
func TestRetiredNotLostOriginPoliciesGo(t *testing.T) {
	w := lostWorld(t)
	w.retire(w.observer.RetireRecord("b"))
	require.Empty(t, w.outputs.Desired())
	require.Empty(t, w.mirror.LostPolicies())
}

// The origin comes back: its own writes replace the kept copies, and what
// it removes later (a seal of its newer epochs) is not kept.
func TestLostOriginBack(t *testing.T) {
	w := lostWorld(t)
	r := w.observer.RetireRecord("b")
	w.mirror.MarkLost("b", r.UpTo)
	w.retire(r)

	// b rejoins at a new epoch and re-publishes its policy (generation 2)
	nb := crdt.NewState("b")
	require.NoError(t, nb.SetEpoch(r.UpTo.Epoch()+1))
	w.writers["b"] = nb
	w.labelled("b")
	spec := apiv1.MultiClusterNetworkPolicySpec{ClusterSelector: &metav1.LabelSelector{}, PodSelector: metav1.LabelSelector{}}
	b, err := crdt.EncodeValue(modeltest.PolicyValue(t, spec, 2))
	require.NoError(t, err)
	d, _, err := nb.Write(crdt.KindPolicy, "shop/from-b", b, false, 0)
	require.NoError(t, err)
	changes, err := w.observer.Apply(d)
	require.NoError(t, err)
	res := w.mirror.Apply(changes)
	require.Equal(t, []string{"b"}, res.LostChanged)
	require.Empty(t, w.mirror.LostPolicies()["b"], "nothing kept: b wrote it again")
	p, ok := w.mirror.Inventory().Policy(enforce.PolicyRef{Origin: "b", Namespace: "shop", Name: "from-b"})
	require.True(t, ok)
	require.EqualValues(t, 2, p.Generation)

	// b's own seal of this epoch removes it; that removal is not kept
	require.NoError(t, nb.SetEpoch(r.UpTo.Epoch()+2))
	seal, _, err := nb.SealEpochsBelow(r.UpTo.Epoch() + 2)
	require.NoError(t, err)
	w.retire(seal)
	_, ok = w.mirror.Inventory().Policy(enforce.PolicyRef{Origin: "b", Namespace: "shop", Name: "from-b"})
	require.False(t, ok, "a removal above the lost retirement is applied")
}

// After a restart the kept policies come back from the store's record;
// one the replica holds live again is not overwritten.
func TestRestoreLost(t *testing.T) {
	w := lostWorld(t)
	var kept []crdt.Entry
	w.observer.Range("b", crdt.KindPolicy, func(e crdt.Entry) bool { kept = append(kept, e); return true })
	r := w.observer.RetireRecord("b")
	w.mirror.MarkLost("b", r.UpTo)
	w.retire(r)

	m := NewMirror("a")
	m.SetNetworks(w.nets)
	require.Empty(t, m.Load(w.observer))
	keys, errs := m.RestoreLost("b", r.UpTo, append(kept, crdt.Entry{Key: crdt.Key{Origin: "b", Kind: crdt.KindPod, Name: "shop/x"}}))
	require.Len(t, errs, 1, "a non-policy entry in the record is reported")
	require.Equal(t, []enforce.PolicyRef{{Origin: "b", Namespace: "shop", Name: "from-b"}}, keys)
	require.Equal(t, modeltest.NPNames(w.outputs.Desired()), modeltest.NPNames(enforce.Translate("a", m.Inventory())))
}

// fromScratchWithLost rebuilds from the observer and restores the kept
// policies from the mirror's own inventory.
func (w *world) fromScratchWithLost() []string {
	m := NewMirror("a")
	m.SetNetworks(w.nets)
	require.Empty(w.t, m.Load(w.observer))
	for origin, ns := range w.mirror.LostPolicies() {
		m.MarkLost(origin, w.mirror.lost[origin].upTo)
		for _, n := range ns {
			ref, _ := lostRef(origin, n)
			p, ok := w.mirror.Inventory().Policy(ref)
			require.True(w.t, ok)
			require.NoError(w.t, m.inv.SetPolicy(p))
		}
	}
	return modeltest.NPNames(enforce.Translate("a", m.Inventory()))
}
