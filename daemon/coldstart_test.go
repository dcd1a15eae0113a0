package daemon

import (
	"fmt"
	"log/slog"
	"math/rand"
	"net/netip"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
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
		require.Equal(t, want.Reports(model.PolicyKey(r)), got.Reports(model.PolicyKey(r)))
	}
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
			got := newMirror("a")
			rep, gotErrs, err := LoadState(path, "", store.Options{Logger: quiet}, got)
			require.NoError(t, err)
			defer func() { require.NoError(t, rep.Close()) }()

			want := model.NewMirror("a")
			var wantErrs []error
			rep.View(func(st *crdt.State) { wantErrs = want.Load(st) })
			require.NotEmpty(t, wantErrs)
			require.Equal(t, errStrings(wantErrs), errStrings(gotErrs))
			requireSameMirror(t, want, got)
			require.NotEmpty(t, names(enforce.Translate("a", got.Inventory())))
		})
	}
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

func errStrings(errs []error) []string {
	out := make([]string, 0, len(errs))
	for _, err := range errs {
		out = append(out, err.Error())
	}
	sort.Strings(out)
	return out
}

// loadFixture (a copy of model's) is a state of three origins (one the mirror refuses, "c_bad")
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
