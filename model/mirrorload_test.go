package model

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model/modeltest"
)

// loadOneByOne is what Load did before its bulk path: every entry through
// apply, in Range order.
func loadOneByOne(m *Mirror, st *crdt.State) []error {
	var errs []error
	for _, origin := range st.Origins() {
		for _, k := range []crdt.Kind{crdt.KindCluster, crdt.KindNamespace, crdt.KindPod, crdt.KindPolicy, crdt.KindReport} {
			st.Range(origin, k, func(e crdt.Entry) bool {
				if _, err := m.apply(crdt.Change{Key: e.Key, New: &e}); err != nil {
					errs = append(errs, err)
				}
				return true
			})
		}
	}
	return errs
}

// Load's bulk path (unordered, decoded in batches through the mirror's
// Pipeline) builds the same view as applying every entry one by one, with
// the same errors: several batches per origin, tombstones, undecodable
// values and an origin the mirror refuses, through the sequential pipeline
// and one that decodes ahead into every buffer before applying.
func TestLoadMatchesPerEntryApply(t *testing.T) {
	obs, _ := modeltest.LoadFixture(t)
	want := NewMirror("a")
	wantErrs := loadOneByOne(want, obs)
	require.NotEmpty(t, wantErrs)
	wantNPs := modeltest.NPNames(enforce.Translate("a", want.Inventory()))
	require.NotEmpty(t, wantNPs)
	for name, p := range map[string]Pipeline{"sequential": nil, "ahead": decodeAhead} {
		t.Run(name, func(t *testing.T) {
			got := NewMirror("a")
			got.SetPipeline(p)
			require.Equal(t, modeltest.ErrStrings(wantErrs), modeltest.ErrStrings(got.Load(obs)))
			require.Equal(t, want.counts, got.counts)
			require.Equal(t, want.clusters, got.clusters)
			require.Equal(t, want.Inventory().Clusters(), got.Inventory().Clusters())
			require.Equal(t, wantNPs, modeltest.NPNames(enforce.Translate("a", got.Inventory())))
		})
	}
}

// decodeAhead is a Pipeline that keeps every buffer full: batch i is
// applied only after batch i+PipelineBuffers-1 was decoded (what an
// overlapping pipeline may do at worst), on one goroutine.
func decodeAhead(n int, decode func(i, buf int), apply func(buf int)) {
	next := 0
	for i := range n {
		for ; next < n && next < i+PipelineBuffers; next++ {
			decode(next, next%PipelineBuffers)
		}
		apply(i % PipelineBuffers)
	}
}
