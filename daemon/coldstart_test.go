package daemon

import (
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
	"github.com/coastguard-mcnp/coastguard/store"
)

// requireSameMirror checks that got holds the view want holds, as far as
// the model shows it (its clusters, policies, lost origins, reports and
// what it translates to).
func requireSameMirror(t *testing.T, want, got *model.Mirror) {
	t.Helper()
	require.Equal(t, want.Inventory().Clusters(), got.Inventory().Clusters())
	require.Equal(t, want.Inventory().Policies(), got.Inventory().Policies())
	require.Equal(t, want.LostPolicies(), got.LostPolicies())
	for _, r := range want.Inventory().Policies() {
		require.Equal(t, want.Reports(r), got.Reports(r))
	}
	require.Equal(t, modeltest.NPNames(enforce.Translate("a", want.Inventory())), modeltest.NPNames(enforce.Translate("a", got.Inventory())))
}

// The daemon's cold start builds its view from the entries while the
// replica restores them (LoadState: store.Options.OnLoad, on a real bbolt file): the
// view and the skipped entries are those of Mirror.Load on the state the
// replica ends up with, for several origins (one refused), tombstones and
// undecodable values, with one and with two Ps.
func TestOnLoadMatchesLoad(t *testing.T) {
	_, deltas := modeltest.LoadFixture(t)
	path := filepath.Join(t.TempDir(), "state.db")
	quiet := slog.New(slog.DiscardHandler)
	rep, err := store.OpenReplica(path, "", store.Options{Logger: quiet})
	require.NoError(t, err)
	_, err = rep.Apply(deltas...)
	require.NoError(t, err)
	require.NoError(t, rep.Close())

	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("procs%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			got := newMirror("a")
			rep, gotErrs, err := LoadState(path, "", store.Options{Logger: quiet}, got)
			require.NoError(t, err)
			defer func() { require.NoError(t, rep.Close()) }()

			want := model.NewMirror("a")
			var wantErrs []error
			rep.View(func(st *crdt.State) { wantErrs = want.Load(st) })
			require.NotEmpty(t, wantErrs)
			require.Equal(t, modeltest.ErrStrings(wantErrs), modeltest.ErrStrings(gotErrs))
			requireSameMirror(t, want, got)
			require.NotEmpty(t, modeltest.NPNames(enforce.Translate("a", got.Inventory())))
		})
	}
}

// A store whose entries do not restore (here: entries of an origin its
// digest does not know) is dropped and the replica starts empty; OnLoad is
// called again with nothing, and the view built from the first call must
// be gone too, networks kept: nothing may be enforced from a state the
// replica refused.
func TestOnLoadCorruptStartsOver(t *testing.T) {
	_, deltas := modeltest.LoadFixture(t)
	mb := store.NewMemBackend()
	var changes []crdt.Change
	for _, d := range deltas {
		for i := range d.Entries {
			e := d.Entries[i]
			changes = append(changes, crdt.Change{Key: e.Key, New: &e})
		}
	}
	require.NoError(t, <-mb.Commit(&store.Batch{Changes: changes})) // no digests: Restore refuses

	m := newMirror("a")
	nets := enforce.Networks{"b": {PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, Sources: []string{"config"}}}
	m.SetNetworks(nets)
	var errs []error
	var seen []int
	load := mirrorLoader(m, &errs)
	rep, err := store.NewReplica(mb, "", store.Options{Logger: slog.New(slog.DiscardHandler),
		OnLoad: func(entries []crdt.Entry) { seen = append(seen, len(entries)); load(entries) }})
	require.NoError(t, err)
	defer func() { require.NoError(t, rep.Close()) }()
	require.Equal(t, []int{len(changes), 0}, seen)
	require.Empty(t, rep.Digest())
	require.Empty(t, errs)
	requireSameMirror(t, model.NewMirror("a"), m)
	require.Empty(t, m.Inventory().Clusters())
	require.True(t, m.Inventory().Networks().Equal(nets))
}
