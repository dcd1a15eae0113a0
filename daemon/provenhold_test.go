package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/model"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// holdWorld is cluster a's view of clusters a and b through the hold (the
// daemon's feed): a's MCNP shop/db admits every pod of every cluster.
type holdWorld struct {
	*world
	hold *inventoryHold
	// unproven names the origin whose writes arrive above its proven
	// watermark ("": every write is proven as it arrives)
	unproven string
}

func newHoldWorld(t *testing.T) *holdWorld {
	w := &holdWorld{world: newWorld(t, "a", "a", "b"), hold: newInventoryHold("a")}
	w.filter = func(changes []crdt.Change, to crdt.Version) []crdt.Change {
		dg := w.observer.Digest()
		if w.unproven != "" {
			dg = w.unprovenAbove(w.unproven, to)
		}
		return w.hold.filter(changes, dg)
	}
	w.setNetworks(mustNets(t, "a=10.1.0.0/16", "b=10.2.0.0/16"))
	w.labelled("a", "b")
	w.write("a", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{})
	w.write("a", crdt.KindPolicy, "shop/db", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{
		Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{
			{ClusterSelector: &metav1.LabelSelector{}, NamespaceSelector: &metav1.LabelSelector{}}}}},
	}, 1))
	return w
}

// unprovenAbove is the observer's digest with origin's proven watermark
// put just below v (a record at v arrived ahead of its proof).
func (w *holdWorld) unprovenAbove(origin string, v crdt.Version) crdt.Digest {
	dg := w.observer.Digest()
	od := dg[origin]
	od.Max, od.Top = v-1, max(od.Top, v)
	dg[origin] = od
	return dg
}

// writeUnproven writes as origin with the entry arriving unproven.
func (w *holdWorld) writeUnproven(origin string, kind crdt.Kind, name string, v any) crdt.Version {
	w.t.Helper()
	w.unproven = origin
	defer func() { w.unproven = "" }()
	return w.write(origin, kind, name, v)
}

func (w *holdWorld) admitted(cidr string) bool {
	for _, np := range w.outputs.Desired() {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.From {
				if p.IPBlock != nil && p.IPBlock.CIDR == cidr {
					return true
				}
			}
		}
	}
	return false
}

func web(ip, tier string) *crdt.PodValue {
	return &crdt.PodValue{Labels: map[string]string{"app": "web", "tier": tier}, IPs: []string{ip}, Phase: "Running"}
}

// An unproven remote pod is never admitted; once its origin's mark proves
// it, it is. A proven pod's unproven update keeps the proven value in the
// mirror (its last-known state, as in a partition) until the update is
// proven; a deletion is never held.
func TestUnprovenPodIsHeldUntilProven(t *testing.T) {
	w := newHoldWorld(t)
	w.writeUnproven("b", crdt.KindPod, "shop/web", web("10.2.0.1", "1"))
	require.False(t, w.admitted("10.2.0.1/32"), "an unproven pod must not be admitted")
	require.Equal(t, 1, w.hold.len())
	require.Empty(t, w.hold.release(w.observer, w.unprovenAbove("b", w.observer.Digest()["b"].Max)), "still unproven: nothing released")

	w.apply(w.hold.release(w.observer, w.observer.Digest()))
	require.True(t, w.admitted("10.2.0.1/32"), "proven: admitted")
	require.Zero(t, w.hold.len())

	// A proven pod updated by an unproven entry stays as proven (a new
	// leader's re-publication arriving out of order must not shrink any
	// allow list), a second unproven update too, and the proof hands over
	// the newest.
	w.writeUnproven("b", crdt.KindPod, "shop/web", web("10.2.0.1", "2"))
	require.True(t, w.admitted("10.2.0.1/32"), "an unproven update keeps the proven value")
	require.Equal(t, 1, w.hold.len())
	w.writeUnproven("b", crdt.KindPod, "shop/web", web("10.2.0.2", "3"))
	require.True(t, w.admitted("10.2.0.1/32"), "still the proven value")
	require.False(t, w.admitted("10.2.0.2/32"), "the unproven IP is not admitted")
	w.apply(w.hold.release(w.observer, w.observer.Digest()))
	require.True(t, w.admitted("10.2.0.2/32"))
	require.False(t, w.admitted("10.2.0.1/32"), "the old IP goes with the proof")
	require.Zero(t, w.hold.len())

	// A deletion of a kept pod is never held: the kept value goes at once.
	w.writeUnproven("b", crdt.KindPod, "shop/web", web("10.2.0.3", "4"))
	require.True(t, w.admitted("10.2.0.2/32"))
	w.writeUnproven("b", crdt.KindPod, "shop/web", nil)
	require.Zero(t, w.hold.len())
	require.False(t, w.admitted("10.2.0.2/32"), "deleted: out")
	require.False(t, w.admitted("10.2.0.3/32"))

	// A tombstone is never held; one for a held pod clears the hold.
	w.writeUnproven("b", crdt.KindPod, "shop/late", web("10.2.0.4", "1"))
	w.writeUnproven("b", crdt.KindPod, "shop/late", nil)
	require.Zero(t, w.hold.len())
	require.False(t, w.admitted("10.2.0.4/32"))
	require.Equal(t, w.fromScratch("a"), w.outputs.Desired(), "the incremental view equals a rebuild")
}

// A deleted pod's key written again unproven (a resurrection) has no
// proven live value to keep: it stays out until proven.
func TestUnprovenResurrectionIsHeld(t *testing.T) {
	w := newHoldWorld(t)
	w.write("b", crdt.KindPod, "shop/web", web("10.2.0.1", "1"))
	w.write("b", crdt.KindPod, "shop/web", nil)
	w.writeUnproven("b", crdt.KindPod, "shop/web", web("10.2.0.1", "1"))
	require.False(t, w.admitted("10.2.0.1/32"), "a resurrected pod is not admitted until proven")
	require.Equal(t, 1, w.hold.len())
}

// A held key whose entry moved on is not released at the old version.
func TestHeldEntryReleasedOnlyAtItsVersion(t *testing.T) {
	w := newHoldWorld(t)
	w.writeUnproven("b", crdt.KindPod, "shop/web", web("10.2.0.1", "1"))
	// the next change is committed but not yet delivered through the feed
	d, _, err := w.writers["b"].Write(crdt.KindPod, "shop/web", mustEncode(t, web("10.2.0.9", "2")), false, 0)
	require.NoError(t, err)
	pending, err := w.observer.Apply(d)
	require.NoError(t, err)
	require.Empty(t, w.hold.release(w.observer, w.observer.Digest()), "the state moved on: the feed decides")
	w.apply(w.hold.filter(pending, w.observer.Digest()))
	require.True(t, w.admitted("10.2.0.9/32"))
	require.False(t, w.admitted("10.2.0.1/32"))
	require.Zero(t, w.hold.len())
}

// Own entries, policies and reports are never held; namespaces and Services
// are.
func TestHoldKinds(t *testing.T) {
	w := newHoldWorld(t)
	w.writeUnproven("a", crdt.KindPod, "shop/own", web("10.1.0.1", "1"))
	require.Zero(t, w.hold.len(), "own entries are never held")
	w.writeUnproven("b", crdt.KindNamespace, "other", &crdt.NamespaceValue{})
	require.Equal(t, 1, w.hold.len(), "a remote namespace is held")
	require.False(t, w.mirror.Inventory().HasNamespace("b", "other"))
	w.writeUnproven("b", crdt.KindPolicy, "shop/p", modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{}, 1))
	require.Equal(t, 1, w.hold.len(), "policies are held by the applier, not here")
}

// A state loaded from the store holds its unproven entries too.
func TestHoldLoaded(t *testing.T) {
	w := newHoldWorld(t)
	v := w.write("b", crdt.KindPod, "shop/web", web("10.2.0.1", "1"))
	require.True(t, w.admitted("10.2.0.1/32"))

	m, out, h := model.NewMirror("a"), model.NewOutputs("a"), newInventoryHold("a")
	m.Inventory().SetNetworks(w.mirror.Inventory().Networks())
	require.Empty(t, m.Load(w.observer))
	w.mirror, w.outputs, w.hold = m, out, h
	w.apply(h.holdLoaded(w.observer, w.unprovenAbove("b", v)))
	require.False(t, w.admitted("10.2.0.1/32"), "loaded but unproven: held")
	require.Equal(t, 1, h.len())
	w.apply(h.release(w.observer, w.observer.Digest()))
	require.True(t, w.admitted("10.2.0.1/32"))
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := crdt.EncodeValue(v)
	require.NoError(t, err)
	return b
}

// A lost cluster (retired by membership up to its proven watermark) whose
// last updates were still unproven keeps them above the retirement for
// good (RELIABILITY.md, finding 16), and the mirror keeps the proven pod
// value the hold had kept. Nothing of it is admitted: the retirement
// removed the cluster's proven entries, its Cluster entry among them, so
// no cluster selector matches its pods.
func TestLostClusterLeftoverStaysOut(t *testing.T) {
	w := newHoldWorld(t)
	w.write("b", crdt.KindPod, "shop/web", web("10.2.0.1", "1"))
	v := w.writeUnproven("b", crdt.KindNamespace, "shop", &crdt.NamespaceValue{Labels: map[string]string{"x": "1"}})
	w.writeUnproven("b", crdt.KindPod, "shop/web", web("10.2.0.2", "2"))
	require.True(t, w.admitted("10.2.0.1/32"), "the proven value is kept")

	ch, err := w.observer.ApplyRetire(crdt.Retire{Origin: "b", UpTo: v - 1})
	require.NoError(t, err)
	lost := w.unprovenAbove("b", v)
	w.apply(w.hold.filter(ch, lost))
	w.apply(w.hold.release(w.observer, lost))
	require.Equal(t, 2, w.hold.len(), "the unproven updates stay held")
	require.False(t, w.admitted("10.2.0.1/32"), "the kept value of a lost cluster's pod is not admitted")
	require.False(t, w.admitted("10.2.0.2/32"), "nor its unproven update")
}
