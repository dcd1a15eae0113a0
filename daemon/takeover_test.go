package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/store"
)

// The lagging takeover: the old leader of c1 created pods p and q; another
// cluster received both, the standby only q. p is deleted while the
// leaders change, so the new leader's API server no longer has it and its
// replica never had it: writing only the difference writes nothing for p,
// and p stays admitted elsewhere forever. The takeover re-publishes and
// seals: p is retired everywhere, also when its old entry arrives late, and
// the live entries (q, the report) survive.
func TestTakeoverRetiresWhatTheNewLeaderNeverSaw(t *testing.T) {
	old := crdt.NewState("c1")
	require.NoError(t, old.SetEpoch(1))
	elsewhere := crdt.NewState("c2") // another cluster's replica
	write := func(kind crdt.Kind, name string, v any) crdt.Delta {
		b, err := crdt.EncodeValue(v)
		require.NoError(t, err)
		d, _, err := old.Write(kind, name, b, false, 0)
		require.NoError(t, err)
		_, err = elsewhere.Apply(d)
		require.NoError(t, err)
		return d
	}
	podP := write(crdt.KindPod, "shop/p", &crdt.PodValue{IPs: []string{"10.1.0.1"}, Phase: "Running"})
	podQ := write(crdt.KindPod, "shop/q", &crdt.PodValue{IPs: []string{"10.1.0.2"}, Phase: "Running"})
	report := write(crdt.KindReport, "c2/shop/db", &crdt.ReportValue{ObservedGeneration: 1})

	rep, err := store.OpenReplica(filepath.Join(t.TempDir(), "s.db"), "c1", store.Options{})
	require.NoError(t, err)
	defer rep.Close()
	_, err = rep.Apply(podQ, report) // lagging: p never arrived
	require.NoError(t, err)
	require.NoError(t, rep.SetMinEpoch(2))

	// what the new leader writes reaches the other cluster
	pub := func(d crdt.Delta) {
		_, err := elsewhere.Apply(d)
		require.NoError(t, err)
	}
	ownWrite := func(kind crdt.Kind, name string, value []byte, deleted bool) error {
		d, err := rep.Write(kind, name, value, deleted)
		if err == nil {
			pub(d)
		}
		return err
	}
	// the inventory's desired state, from this cluster's API server: q only
	var qv crdt.Entry
	rep.View(func(st *crdt.State) { qv, _ = st.Get(crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: "shop/q"}) })
	inventory := func() error { return ownWrite(crdt.KindPod, "shop/q", qv.Value, false) }
	reports := newReporter(replicaReports{rep, "c1"}, ownWrite, func() bool { return true }, discard)
	var sealed crdt.Retire
	tk := takeover{epoch: rep.Epoch, republish: []func() error{inventory, reports.Republish},
		seal: rep.SealEpochsBelow, publish: func(r crdt.Retire) { sealed = r }}

	livePod := func(st interface {
		Get(crdt.Key) (crdt.Entry, bool)
	}, name string) bool {
		e, ok := st.Get(crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: name})
		return ok && !e.Deleted
	}
	require.True(t, livePod(elsewhere, "shop/p"), "before: the deleted pod is admitted elsewhere")

	require.NoError(t, tk.run())
	require.Equal(t, crdt.MakeVersion(2, 0)-1, sealed.UpTo)
	_, err = elsewhere.ApplyRetire(sealed)
	require.NoError(t, err)
	require.False(t, livePod(elsewhere, "shop/p"), "the seal retires what the new leader never saw")
	require.True(t, livePod(elsewhere, "shop/q"), "re-published live entries survive the seal")
	e, ok := elsewhere.Get(crdt.Key{Origin: "c1", Kind: crdt.KindReport, Name: "c2/shop/db"})
	require.True(t, ok && !e.Deleted, "reports are re-published too")

	// the old entry arriving late changes nothing, here or there
	_, _ = rep.Apply(podP)
	_, _ = elsewhere.Apply(podP)
	rep.View(func(st *crdt.State) { require.False(t, livePod(st, "shop/p")) })
	require.False(t, livePod(elsewhere, "shop/p"))
}

// At epoch 1 there is no prior epoch: nothing is re-published or sealed.
func TestTakeoverAtFirstEpochDoesNothing(t *testing.T) {
	calls := 0
	tk := takeover{epoch: func() uint32 { return 1 }, republish: []func() error{func() error { calls++; return nil }},
		seal: func(uint32) (crdt.Retire, []crdt.Change, error) { calls++; return crdt.Retire{}, nil, nil }, publish: func(crdt.Retire) { calls++ }}
	require.NoError(t, tk.run())
	require.Zero(t, calls)
}

// The seal waits for the re-publication to settle; a term that ends in
// between (settle fails) seals nothing, and a failed re-publication never
// seals (sealing without it would retire live entries).
func TestTakeoverNeverSealsWithoutRepublication(t *testing.T) {
	var order []string
	step := func(name string, err error) func() error {
		return func() error { order = append(order, name); return err }
	}
	mk := func(republish, settle error) takeover {
		return takeover{epoch: func() uint32 { return 3 },
			republish: []func() error{step("inventory", republish), step("reports", nil)},
			settle:    step("settle", settle),
			seal: func(uint32) (crdt.Retire, []crdt.Change, error) {
				order = append(order, "seal")
				return crdt.Retire{Origin: "c1", UpTo: crdt.MakeVersion(3, 0) - 1}, nil, nil
			},
			publish: func(crdt.Retire) { order = append(order, "publish") }}
	}
	require.NoError(t, mk(nil, nil).run())
	require.Equal(t, []string{"inventory", "reports", "settle", "seal", "publish"}, order)
	order = nil
	require.Error(t, mk(errors.New("not leader"), nil).run())
	require.Equal(t, []string{"inventory"}, order)
	order = nil
	require.Error(t, mk(nil, context.Canceled).run())
	require.Equal(t, []string{"inventory", "reports", "settle"}, order)
}

// A replica refilled from its peers bumps its writer epoch when it learns
// of its own earlier writes, often while a takeover waits for its
// re-publication to settle. The seal then stays below the epoch the entries
// were re-published at (sealing below the new epoch retired every live
// entry until the next re-publication: a restarted leader deleted remote
// policies whose namespace and cluster entries it had just re-published),
// and the takeover reports that it must run again at the new epoch.
func TestTakeoverSealsBelowTheRepublishedEpoch(t *testing.T) {
	rep, err := store.OpenReplica(filepath.Join(t.TempDir(), "s.db"), "c1", store.Options{})
	require.NoError(t, err)
	defer rep.Close()
	require.NoError(t, rep.SetMinEpoch(2))
	elsewhere := crdt.NewState("c2")
	ns, err := crdt.EncodeValue(&crdt.NamespaceValue{})
	require.NoError(t, err)
	inventory := func() error {
		d, err := rep.Write(crdt.KindNamespace, "shop", ns, false)
		if err == nil {
			_, err = elsewhere.Apply(d)
		}
		return err
	}
	var sealed []crdt.Retire
	bump := true
	tk := takeover{epoch: rep.Epoch, republish: []func() error{inventory},
		settle: func() error {
			if bump { // the refill reveals an own write at epoch 2
				bump = false
				return rep.SetMinEpoch(3)
			}
			return nil
		},
		seal: rep.SealEpochsBelow,
		publish: func(r crdt.Retire) {
			sealed = append(sealed, r)
			_, err := elsewhere.ApplyRetire(r)
			require.NoError(t, err)
		}}
	live := func() bool {
		e, ok := elsewhere.Get(crdt.Key{Origin: "c1", Kind: crdt.KindNamespace, Name: "shop"})
		return ok && !e.Deleted
	}

	err = tk.run()
	require.ErrorIs(t, err, errEpochMoved)
	require.Equal(t, crdt.MakeVersion(2, 0)-1, sealed[0].UpTo, "sealed below the re-published epoch, not the new one")
	require.True(t, live(), "the re-published namespace survives the seal")

	require.NoError(t, tk.run(), "the second run completes at the new epoch")
	require.Equal(t, crdt.MakeVersion(3, 0)-1, sealed[1].UpTo)
	require.True(t, live())
	rep.View(func(st *crdt.State) {
		e, ok := st.Get(crdt.Key{Origin: "c1", Kind: crdt.KindNamespace, Name: "shop"})
		require.True(t, ok && !e.Deleted && e.Version.Epoch() == 3)
	})
}

// A takeover fences its epoch on the Lease before it writes anything; a
// fence that fails (the Lease is someone else's) stops it.
func TestTakeoverFencesTheEpochFirst(t *testing.T) {
	var order []string
	tk := takeover{epoch: func() uint32 { return 3 },
		fence:     func() error { order = append(order, "fence"); return nil },
		republish: []func() error{func() error { order = append(order, "republish"); return nil }},
		seal: func(uint32) (crdt.Retire, []crdt.Change, error) {
			order = append(order, "seal")
			return crdt.Retire{}, nil, nil
		},
		publish: func(crdt.Retire) {}}
	require.NoError(t, tk.run())
	require.Equal(t, []string{"fence", "republish", "seal"}, order)

	order = nil
	tk.fence = func() error { return errors.New("held by another") }
	require.ErrorContains(t, tk.run(), "held by another")
	require.Empty(t, order, "nothing re-published or sealed without the fence")
}
