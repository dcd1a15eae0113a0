package model

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// requireSameMirror checks that got holds the view want holds.
func requireSameMirror(t *testing.T, want, got *Mirror) {
	t.Helper()
	require.Equal(t, want.counts, got.counts)
	require.Equal(t, want.clusters, got.clusters)
	require.Equal(t, want.reports, got.reports)
	require.Equal(t, want.Inventory().Clusters(), got.Inventory().Clusters())
	require.Equal(t, want.Inventory().Policies(), got.Inventory().Policies())
	require.Equal(t, modeltest.NPNames(enforce.Translate("a", want.Inventory())), modeltest.NPNames(enforce.Translate("a", got.Inventory())))
}

// LoadEntries does not depend on the order of its input: shuffled entries
// (runs of one origin and kind broken up) give the view of Load.
func TestLoadEntriesAnyOrder(t *testing.T) {
	obs, _ := modeltest.LoadFixture(t)
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
	require.Equal(t, modeltest.ErrStrings(wantErrs), modeltest.ErrStrings(got.LoadEntries(entries)))
	requireSameMirror(t, want, got)
}
