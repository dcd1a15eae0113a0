package daemon

import (
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/model"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
	"github.com/coastguard-mcnp/coastguard/store"
)

// lostDaemon is a daemon of cluster a with just what the lost-origin path
// needs: a durable replica feeding a mirror through the daemon's hold of
// unproven entries, and metrics.
func lostDaemon(t *testing.T, path string) *Daemon {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	d := &Daemon{opts: Options{ClusterID: "a"}, log: discard, m: m,
		view: view{mirror: model.NewMirror("a"), outputs: model.NewOutputs("a"), hold: newInventoryHold("a")}}
	d.mu.Lock()
	rep, loadErrs, err := LoadState(path, "a", store.Options{}, d.mirror)
	require.NoError(t, err)
	require.Empty(t, loadErrs)
	t.Cleanup(func() { _ = rep.Close() })
	d.rep = rep
	d.lost.recs = map[string]store.LostOrigin{}
	d.restoreLost()
	d.mu.Unlock()
	rep.Subscribe(func(ch []crdt.Change) { // the daemon's feed (onChanges) up to the enforcer
		res := d.mirrorBatch(ch, d.rep.Digest())
		d.lostChanged(res.LostChanged)
	})
	return d
}

const (
	timeout = 5 * time.Second
	tick    = 10 * time.Millisecond
)

func (d *Daemon) kept() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mirror.LostPolicies()
}

func (d *Daemon) hasPolicy(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.mirror.Inventory().Policy(enforce.PolicyRef{Origin: "b", Namespace: "shop", Name: name})
	return ok
}

// A retirement decided by membership keeps b's policy (durably, across a
// restart); b's own signed retirement of everything (its decommission)
// releases it.
func TestLostGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	d := lostDaemon(t, path)
	b := crdt.NewState("b")
	require.NoError(t, b.SetEpoch(1))
	spec, err := crdt.EncodeValue(modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{ClusterSelector: &metav1.LabelSelector{}}, 1))
	require.NoError(t, err)
	for _, name := range []string{"shop/deny", "shop/gone"} {
		dl, _, err := b.Write(crdt.KindPolicy, name, spec, false, 0)
		require.NoError(t, err)
		_, err = d.rep.Apply(dl)
		require.NoError(t, err)
	}
	dl, _, err := b.Write(crdt.KindPolicy, "shop/gone", nil, true, 0) // deleted before the loss
	require.NoError(t, err)
	_, err = d.rep.Apply(dl)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return d.hasPolicy("deny") }, timeout, tick)

	g := lostGuard{Replica: d.rep, d: d}
	_, err = g.ApplyRetire(crdt.Retire{Origin: "b", UpTo: b.Digest()["b"].Max}) // unsigned: membership
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(d.kept()["b"]) == 1 }, timeout, tick)
	require.True(t, d.hasPolicy("deny"), "the lost origin's policy stays")
	require.False(t, d.hasPolicy("gone"))
	require.EqualValues(t, 1, testutil.ToFloat64(d.m.lostPolicies.WithLabelValues("b")))
	require.EqualValues(t, 1, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("lost")))
	_, err = g.ApplyRetire(crdt.Retire{Origin: "b", UpTo: 0}) // refused by the replica
	require.Error(t, err)
	require.True(t, d.hasPolicy("deny"), "a refused retirement keeps an earlier loss")

	// after a restart, the record brings it back
	require.NoError(t, d.rep.Close())
	d2 := lostDaemon(t, path)
	require.True(t, d2.hasPolicy("deny"), "restored from the store")
	require.Equal(t, map[string][]string{"b": {"shop/deny"}}, d2.kept())

	// the release drops it, and the record with it
	d2.dropLost("b", "released")
	require.False(t, d2.hasPolicy("deny"))
	recs, err := d2.rep.Store().LostOrigins()
	require.NoError(t, err)
	require.Empty(t, recs)
}

// lostDaemonWithDeny is a lostDaemon holding b's MCNP shop/deny (epoch 1),
// with b's writer state and the MCNP's encoded value.
func lostDaemonWithDeny(t *testing.T) (*Daemon, *crdt.State, []byte) {
	t.Helper()
	d := lostDaemon(t, filepath.Join(t.TempDir(), "s.db"))
	b := crdt.NewState("b")
	require.NoError(t, b.SetEpoch(1))
	spec, err := crdt.EncodeValue(modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{ClusterSelector: &metav1.LabelSelector{}}, 1))
	require.NoError(t, err)
	dl, _, err := b.Write(crdt.KindPolicy, "shop/deny", spec, false, 0)
	require.NoError(t, err)
	_, err = d.rep.Apply(dl)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return d.hasPolicy("deny") }, timeout, tick)
	return d, b, spec
}

// A decommission (b signs the retirement of everything it wrote) is not a
// loss: nothing is kept.
func TestLostGuardDecommissionIsNotALoss(t *testing.T) {
	d, b, _ := lostDaemonWithDeny(t)
	r := crdt.Retire{Origin: "b", UpTo: b.Digest()["b"].Max, Sig: []byte("signed")} // unverified here: the replica has no verifier
	_, err := lostGuard{Replica: d.rep, d: d}.ApplyRetire(r)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !d.hasPolicy("deny") }, timeout, tick)
	require.Empty(t, d.kept())
}

// A takeover's seal that arrives before the new leader's re-published
// entries (nemesis seed 29005: cluster1's MCNP left the other clusters and
// its key pin was forgotten, as for a decommission) keeps the sealed MCNP
// enforced until the re-published version replaces it, and is never taken
// for a decommission.
func TestLostGuardSealBeforeRepublish(t *testing.T) {
	d, b, spec := lostDaemonWithDeny(t)

	// b's new leader writes at epoch 2 and seals epoch 1; the seal comes first
	require.NoError(t, b.SetEpoch(2))
	again, _, err := b.Write(crdt.KindPolicy, "shop/deny", spec, false, 0)
	require.NoError(t, err)
	seal := crdt.Retire{Origin: "b", UpTo: crdt.MakeVersion(2, 0) - 1, Sig: []byte("signed")} // unverified here
	require.True(t, seal.UpTo.EpochEnd())
	_, err = lostGuard{Replica: d.rep, d: d}.ApplyRetire(seal)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(d.kept()["b"]) == 1 }, timeout, tick)
	require.True(t, d.hasPolicy("deny"), "the sealed MCNP stays enforced until re-published")
	require.EqualValues(t, 1, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("sealed")))
	require.Zero(t, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("decommissioned")), "a seal is not a decommission")

	_, err = d.rep.Apply(again) // the re-published version arrives
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(d.kept()) == 0 }, timeout, tick, "replaced by the origin: no longer kept")
	require.True(t, d.hasPolicy("deny"))
	require.False(t, crdt.MakeVersion(3, 17).EpochEnd(), "a decommission retires up to a real head")
}

// The same seal inside a delta (crdt applies a delta's Retired before its
// entries): a new leader's seal reached this replica in a delta that did
// not carry the re-published MCNP yet (nemesis seed 30006, finding 7: the
// generated policy left two clusters for a few hundred ms). The sealed MCNP
// stays enforced until the re-published version replaces it.
func TestLostGuardSealInDeltaBeforeRepublish(t *testing.T) {
	d, b, spec := lostDaemonWithDeny(t)
	g := lostGuard{Replica: d.rep, d: d}
	require.NoError(t, b.SetEpoch(2))
	again, _, err := b.Write(crdt.KindPolicy, "shop/deny", spec, false, 0)
	require.NoError(t, err)
	seal, _, err := b.SealEpochsBelow(2)
	require.NoError(t, err)
	require.True(t, seal.UpTo.EpochEnd())
	// what a peer that already holds the re-published entry sends on: the
	// origin's progress from there, with its retirement and no entry
	dg := d.rep.Digest()
	od := dg["b"]
	od.Max = again.To
	dg["b"] = od
	var carrier []crdt.Delta
	for _, dl := range b.DeltaSince(dg, 0) {
		if dl.Origin == "b" {
			require.Empty(t, dl.Entries, "the carrier holds no entry")
			require.Equal(t, seal.UpTo, dl.Retired)
			carrier = append(carrier, dl)
		}
	}
	require.NotEmpty(t, carrier)
	_, err = g.Apply(carrier...)
	require.NoError(t, err)
	require.Equal(t, seal.UpTo, d.rep.Digest()["b"].Retired, "the seal was applied")
	require.Eventually(t, func() bool { return len(d.kept()["b"]) == 1 }, timeout, tick)
	require.True(t, d.hasPolicy("deny"), "the sealed MCNP stays enforced until re-published")
	require.EqualValues(t, 1, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("sealed")))

	_, err = g.Apply(carrier...) // the same retirement again: handled, nothing new
	require.NoError(t, err)
	require.EqualValues(t, 1, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("sealed")))

	_, err = g.Apply(again) // the re-published version arrives
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(d.kept()) == 0 }, timeout, tick, "replaced by the origin: no longer kept")
	require.True(t, d.hasPolicy("deny"))
}

// carrierFrom returns what peer sends d for origin b: its deltas of b since
// d's digest (the retirement they carry included).
func carrierFrom(t *testing.T, d *Daemon, peer *crdt.State) []crdt.Delta {
	t.Helper()
	var out []crdt.Delta
	for _, dl := range peer.DeltaSince(d.rep.Digest(), 0) {
		if dl.Origin == "b" {
			out = append(out, dl)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// A loss relayed inside a delta: a peer retired b by membership (unsigned)
// and its anti-entropy carries that retirement here before this daemon's
// own membership view retires b. b's MCNP stays enforced as a lost
// cluster's, as when the retirement arrives on its own; before, the delta
// path only handled seals and the MCNP's generated policies went (fail
// open, for good: this daemon's own retirement then found nothing to keep).
func TestLostGuardLossInDelta(t *testing.T) {
	d, b, _ := lostDaemonWithDeny(t)
	peer := crdt.NewState("x")
	for _, dl := range b.DeltaSince(peer.Digest(), 0) {
		_, err := peer.Apply(dl)
		require.NoError(t, err)
	}
	_, err := peer.ApplyRetire(crdt.Retire{Origin: "b", UpTo: b.Digest()["b"].Max}) // membership: unsigned
	require.NoError(t, err)
	carrier := carrierFrom(t, d, peer)
	require.Nil(t, carrier[0].RetiredSig)

	_, err = lostGuard{Replica: d.rep, d: d}.Apply(carrier...)
	require.NoError(t, err)
	require.Equal(t, b.Digest()["b"].Max, d.rep.Digest()["b"].Retired, "the retirement was applied")
	require.Eventually(t, func() bool { return len(d.kept()["b"]) == 1 }, timeout, tick)
	require.True(t, d.hasPolicy("deny"), "the lost cluster's MCNP stays enforced")
	require.EqualValues(t, 1, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("lost")))
}

// A decommission that reaches this daemon only inside a delta (it missed
// the retire message) is handled as the message is: b's MCNP, kept after
// its takeover's seal, is released, and counted as decommissioned. Before,
// the delta path skipped it: the MCNP stayed kept and b's pin stayed, so a
// rejoin under the same ID with a new key was refused until `pins delete`.
func TestLostGuardDecommissionInDelta(t *testing.T) {
	d, b, _ := lostDaemonWithDeny(t)
	g := lostGuard{Replica: d.rep, d: d}
	require.NoError(t, b.SetEpoch(2))
	seal, _, err := b.SealEpochsBelow(2)
	require.NoError(t, err)
	seal.Sig = []byte("signed") // unverified here: the replica has no verifier
	_, err = g.ApplyRetire(seal)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(d.kept()["b"]) == 1 }, timeout, tick, "sealed: kept")

	// b's leader decommissions before re-publishing shop/deny
	_, _, err = b.Write(crdt.KindPod, "shop/web", []byte{0x80}, false, 0)
	require.NoError(t, err)
	_, err = b.ApplyRetire(crdt.Retire{Origin: "b", UpTo: b.Digest()["b"].Max})
	require.NoError(t, err)
	carrier := carrierFrom(t, d, b)
	for i := range carrier {
		carrier[i].RetiredSig = []byte("signed") // what a signed origin's delta carries
	}
	_, err = g.Apply(carrier...)
	require.NoError(t, err)
	require.Equal(t, b.Digest()["b"].Max, d.rep.Digest()["b"].Retired, "the decommission was applied")
	require.Eventually(t, func() bool { return len(d.kept()) == 0 }, timeout, tick, "released by the decommission")
	require.False(t, d.hasPolicy("deny"))
	require.EqualValues(t, 1, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("decommissioned")))
}

// An unsigned retirement the replica's retire authority refuses (b still
// has live members in this node's view) is not recorded as a loss first:
// a peer relaying it in every anti-entropy round costs no store write, no
// event and no digest.
func TestLostGuardRefusedUnsignedRetirementCostsNothing(t *testing.T) {
	d, b, _ := lostDaemonWithDeny(t)
	d.lost.authority = func(string) bool { return false }
	r := crdt.Retire{Origin: "b", UpTo: b.Digest()["b"].Max} // unsigned
	require.False(t, d.beforeRetire(r))
	require.Empty(t, d.deltaRetirements([]crdt.Delta{{Origin: "b", Retired: r.UpTo}}))
	require.Zero(t, testutil.ToFloat64(d.m.lostEvents.WithLabelValues("lost")))
	recs, err := d.rep.Store().LostOrigins()
	require.NoError(t, err)
	require.Empty(t, recs)
	signed := crdt.Retire{Origin: "b", UpTo: r.UpTo, Sig: []byte("signed")}
	require.Len(t, d.deltaRetirements([]crdt.Delta{{Origin: "b", Retired: signed.UpTo, RetiredSig: signed.Sig}}), 1,
		"a signed retirement is the origin's own: always handled")
}

// A cluster's heartbeat ages past the reconnect timeout between the guard's
// check of an unsigned retirement and the replica's (the authority flips
// from refuse to allow): both see the one decision latched for the apply,
// so the replica does not retire b while the guard kept nothing. Before,
// the replica applied it and b's MCNP went without a loss record (its
// generated policies deleted: fail open). The next apply, allowed from the
// start, keeps b's MCNP as a lost cluster's.
func TestLostGuardAuthorityFlipDecidedOnce(t *testing.T) {
	d, b, _ := lostDaemonWithDeny(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	b.SetSigner(gossip.NewSigner(priv))
	trust, err := gossip.NewTrust(map[string][]byte{"b": priv.Public().(ed25519.PublicKey)}, true, "", nil, nil, discard)
	require.NoError(t, err)
	calls := 0
	decidingReplica{Configurable: d.rep, lost: &d.lost}.SetVerifier(trust, func(string) bool {
		calls++
		return calls > 1 // refuses on the first question only
	})
	signed, _, err := b.Write(crdt.KindPolicy, "shop/deny", mustEncode(t, modeltest.PolicyValue(t, apiv1.MultiClusterNetworkPolicySpec{ClusterSelector: &metav1.LabelSelector{}}, 2)), false, 0)
	require.NoError(t, err)
	_, err = d.rep.Apply(signed)
	require.NoError(t, err)
	up := b.Digest()["b"].Max
	g := lostGuard{Replica: d.rep, d: d}

	_, err = g.ApplyRetire(crdt.Retire{Origin: "b", UpTo: up})
	require.ErrorContains(t, err, "unsigned retirement", "refused: the latched first answer")
	require.Equal(t, 1, calls, "one question for the guard and the replica")
	require.Zero(t, d.rep.Digest()["b"].Retired)
	require.True(t, d.hasPolicy("deny"))
	require.Empty(t, d.kept())

	_, err = g.ApplyRetire(crdt.Retire{Origin: "b", UpTo: up})
	require.NoError(t, err)
	require.Equal(t, up, d.rep.Digest()["b"].Retired)
	require.Eventually(t, func() bool { return len(d.kept()["b"]) == 1 }, timeout, tick, "allowed: kept as lost")
	require.True(t, d.hasPolicy("deny"), "the lost cluster's MCNP stays enforced")
}
