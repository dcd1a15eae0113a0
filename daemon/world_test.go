package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
)

// world is a set of origin writers plus one observing replica, the way the
// daemon sees them (model/mirror_test.go has the model's own copy): every write becomes a delta applied to the observer,
// whose change feed drives the Mirror.
type world struct {
	t        *testing.T
	writers  map[string]*crdt.State
	observer *crdt.State
	mirror   *model.Mirror
	outputs  *model.Outputs
	nets     enforce.Networks // trusted networks (pod-IP ownership)
	// filter, when set, rewrites each write's changes before the mirror
	// sees them (to: the write's version), as the daemon's feed does.
	filter func(changes []crdt.Change, to crdt.Version) []crdt.Change
}

// setNetworks gives the observer its trusted networks, as the daemon does
// from Submariner's Cluster objects, and recomputes everything.
func (w *world) setNetworks(n enforce.Networks) {
	w.nets = n
	w.mirror.SetNetworks(n)
	w.outputs.Recompute(w.mirror.Inventory(), nil, true)
}

func newWorld(t *testing.T, self string, clusters ...string) *world {
	w := &world{t: t, writers: map[string]*crdt.State{}, observer: crdt.NewState(self),
		mirror: model.NewMirror(self), outputs: model.NewOutputs(self)}
	for _, c := range clusters {
		s := crdt.NewState(c)
		require.NoError(t, s.SetEpoch(1))
		w.writers[c] = s
	}
	return w
}

// labelled publishes the cluster entries (ID label only) of the given
// clusters: until its entry arrives a cluster's labels are unknown and it
// matches only clusterSelectors naming its ID.
func (w *world) labelled(clusters ...string) {
	w.t.Helper()
	for _, c := range clusters {
		w.write(c, crdt.KindCluster, "", &crdt.ClusterValue{})
	}
}

// write makes origin write one entry (v nil: a tombstone), feeds it to the
// observer and the mirror, and returns its version.
func (w *world) write(origin string, kind crdt.Kind, name string, v any) crdt.Version {
	w.t.Helper()
	var b []byte
	if v != nil {
		var err error
		b, err = crdt.EncodeValue(v)
		require.NoError(w.t, err)
	}
	d, _, err := w.writers[origin].Write(kind, name, b, v == nil, 0)
	require.NoError(w.t, err)
	changes, err := w.observer.Apply(d)
	require.NoError(w.t, err)
	if w.filter != nil {
		changes = w.filter(changes, d.To)
	}
	w.apply(changes)
	return d.To
}

// apply folds changes into the mirror and recomputes what they affect.
func (w *world) apply(changes []crdt.Change) {
	w.t.Helper()
	res := w.mirror.Apply(changes)
	require.Empty(w.t, res.Errors)
	w.outputs.Recompute(w.mirror.Inventory(), res.Affected, res.All)
}

// fromScratch rebuilds the inventory from the observer's full state and
// translates everything: the reference the incremental path must match.
func (w *world) fromScratch(self string) []networkingv1.NetworkPolicy {
	m := model.NewMirror(self)
	m.SetNetworks(w.nets)
	require.Empty(w.t, m.Load(w.observer))
	return enforce.Translate(self, m.Inventory())
}

// pref is the policy reference written "origin/namespace/name".
func pref(s string) enforce.PolicyRef {
	r, ok := enforce.ParsePolicyRef(s)
	if !ok {
		panic("not a policy reference: " + s)
	}
	return r
}

// prefs is pref of each.
func prefs(ss ...string) []enforce.PolicyRef {
	out := make([]enforce.PolicyRef, len(ss))
	for i, s := range ss {
		out[i] = pref(s)
	}
	return out
}
