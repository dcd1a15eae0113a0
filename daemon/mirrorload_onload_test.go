package daemon

import (
	"fmt"
	"log/slog"
	"math/rand"
	"net/netip"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/store"
)

// requireSameMirror checks that got holds the view want holds.
func requireSameMirror(t *testing.T, want, got *Mirror) {
	t.Helper()
	require.Equal(t, want.counts, got.counts)
	require.Equal(t, want.clusters, got.clusters)
	require.Equal(t, want.reports, got.reports)
	require.Equal(t, want.Inventory().Clusters(), got.Inventory().Clusters())
	require.Equal(t, want.Inventory().Policies(), got.Inventory().Policies())
	require.Equal(t, names(enforce.Translate("a", want.Inventory())), names(enforce.Translate("a", got.Inventory())))
}

// The daemon's cold start builds its view from the entries while the
// replica restores them (LoadState: store.Options.OnLoad, on a real bbolt file): the
// view and the skipped entries are those of Mirror.Load on the state the
// replica ends up with, for several origins (one refused), tombstones and
// undecodable values, with one and with two Ps.
func TestOnLoadMatchesLoad(t *testing.T) {
	_, deltas := loadFixture(t)
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
			got := NewMirror("a")
			rep, gotErrs, err := LoadState(path, "", store.Options{Logger: quiet}, got)
			require.NoError(t, err)
			defer func() { require.NoError(t, rep.Close()) }()

			want := NewMirror("a")
			var wantErrs []error
			rep.View(func(st *crdt.State) { wantErrs = want.Load(st) })
			require.NotEmpty(t, wantErrs)
			require.Equal(t, errStrings(wantErrs), errStrings(gotErrs))
			requireSameMirror(t, want, got)
			require.NotEmpty(t, names(enforce.Translate("a", got.Inventory())))
		})
	}
}

// LoadEntries does not depend on the order of its input: shuffled entries
// (runs of one origin and kind broken up) give the view of Load.
func TestLoadEntriesAnyOrder(t *testing.T) {
	obs, _ := loadFixture(t)
	var entries []crdt.Entry
	for _, o := range obs.Origins() {
		for _, spec := range crdt.Kinds() {
			obs.Range(o, spec.Kind, func(e crdt.Entry) bool { entries = append(entries, e); return true })
		}
	}
	rand.New(rand.NewSource(3)).Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	want := NewMirror("a")
	wantErrs := want.Load(obs)
	got := NewMirror("a")
	require.Equal(t, errStrings(wantErrs), errStrings(got.LoadEntries(entries)))
	requireSameMirror(t, want, got)
}

// A store whose entries do not restore (here: entries of an origin its
// digest does not know) is dropped and the replica starts empty; OnLoad is
// called again with nothing, and the view built from the first call must
// be gone too, networks kept: nothing may be enforced from a state the
// replica refused.
func TestOnLoadCorruptStartsOver(t *testing.T) {
	_, deltas := loadFixture(t)
	mb := store.NewMemBackend()
	var changes []crdt.Change
	for _, d := range deltas {
		for i := range d.Entries {
			e := d.Entries[i]
			changes = append(changes, crdt.Change{Key: e.Key, New: &e})
		}
	}
	require.NoError(t, <-mb.Commit(&store.Batch{Changes: changes})) // no digests: Restore refuses

	m := NewMirror("a")
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
	requireSameMirror(t, NewMirror("a"), m)
	require.Empty(t, m.Inventory().Clusters())
	require.True(t, m.Inventory().Networks().Equal(nets))
}
