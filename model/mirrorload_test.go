package model

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
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

func errStrings(errs []error) []string {
	out := make([]string, 0, len(errs))
	for _, err := range errs {
		out = append(out, err.Error())
	}
	sort.Strings(out)
	return out
}

// Load's bulk path (unordered, decoded in batches through the mirror's
// Pipeline) builds the same view as applying every entry one by one, with
// the same errors: several batches per origin, tombstones, undecodable
// values and an origin the mirror refuses, through the sequential pipeline
// and one that decodes ahead into every buffer before applying.
func TestLoadMatchesPerEntryApply(t *testing.T) {
	obs, _ := loadFixture(t)
	want := NewMirror("a")
	wantErrs := loadOneByOne(want, obs)
	require.NotEmpty(t, wantErrs)
	wantNPs := names(enforce.Translate("a", want.Inventory()))
	require.NotEmpty(t, wantNPs)
	for name, p := range map[string]Pipeline{"sequential": nil, "ahead": decodeAhead} {
		t.Run(name, func(t *testing.T) {
			got := NewMirror("a")
			got.SetPipeline(p)
			require.Equal(t, errStrings(wantErrs), errStrings(got.Load(obs)))
			require.Equal(t, want.counts, got.counts)
			require.Equal(t, want.clusters, got.clusters)
			require.Equal(t, want.Inventory().Clusters(), got.Inventory().Clusters())
			require.Equal(t, wantNPs, names(enforce.Translate("a", got.Inventory())))
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

// loadFixture is a state of three origins (one the mirror refuses, "c_bad")
// with clusters, namespaces, policies and 1300 pods each, some of them
// tombstones, undecodable or not running: the state as an observer that
// applied every delta, and the deltas.
func loadFixture(t *testing.T) (*crdt.State, []crdt.Delta) {
	rng := rand.New(rand.NewSource(9))
	obs := crdt.NewState("")
	var deltas []crdt.Delta
	write := func(st *crdt.State, kind crdt.Kind, name string, b []byte, deleted bool) {
		d, _, err := st.Write(kind, name, b, deleted, 0)
		require.NoError(t, err)
		_, err = obs.Apply(d)
		require.NoError(t, err)
		deltas = append(deltas, d)
	}
	enc := func(v any) []byte {
		b, err := crdt.EncodeValue(v)
		require.NoError(t, err)
		return b
	}
	spec := apiv1.MultiClusterNetworkPolicySpec{
		PodSelector:     metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		ClusterSelector: &metav1.LabelSelector{},
		Ingress: []apiv1.MultiClusterNetworkPolicyIngressRule{{From: []apiv1.MultiClusterNetworkPolicyPeer{{
			ClusterSelector:   &metav1.LabelSelector{},
			NamespaceSelector: &metav1.LabelSelector{},
			PodSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"db", "api"}}}},
		}}}},
	}
	for _, origin := range []string{"a", "b", "c_bad"} {
		st := crdt.NewState(origin)
		require.NoError(t, st.SetEpoch(1))
		write(st, crdt.KindCluster, "", enc(&crdt.ClusterValue{Labels: map[string]string{"region": "eu"}}), false)
		for _, ns := range []string{"shop", "web"} {
			write(st, crdt.KindNamespace, ns, enc(&crdt.NamespaceValue{Labels: map[string]string{"team": ns}}), false)
			write(st, crdt.KindPolicy, ns+"/pol", enc(policyValue(t, spec, 1)), false)
		}
		for i := 0; i < 1300; i++ {
			name := fmt.Sprintf("%s/p%d", []string{"shop", "web"}[i%2], i)
			switch rng.Intn(20) {
			case 0:
				write(st, crdt.KindPod, name, nil, true)
			case 1:
				write(st, crdt.KindPod, name, []byte{0xc1, 0xff}, false) // undecodable
			case 2:
				write(st, crdt.KindPod, name, enc(&crdt.PodValue{IPs: []string{"10.9.9.9"}, Phase: "Failed"}), false)
			default:
				write(st, crdt.KindPod, name, enc(&crdt.PodValue{
					Labels: map[string]string{"app": []string{"web", "db", "api"}[rng.Intn(3)], "pod-template-hash": fmt.Sprint(i / 4)},
					IPs:    []string{fmt.Sprintf("10.%d.%d.%d", len(origin), i/250, i%250+1)},
					Phase:  "Running",
					Ports:  []crdt.NamedPort{{Name: "http", Port: int32(8000 + rng.Intn(3))}}}), false)
			}
		}
	}
	return obs, deltas
}
