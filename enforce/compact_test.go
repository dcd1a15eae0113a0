package enforce

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Pods with equal labels share one interned set; sets, keys and port lists
// nothing uses any more are forgotten (churn does not grow the tables).
func TestLabelSetsInternedAndReleased(t *testing.T) {
	inv := base(t)
	for i := 0; i < 100; i++ {
		p := pod("shop", fmt.Sprintf("web-%d", i), l("app", "web", "pod-template-hash", "abc"), fmt.Sprintf("10.2.0.%d", i+1))
		p.Ports = []Port{{Name: "http", Port: 8080}}
		inv.SetPod("eu-2", p)
	}
	require.Equal(t, 1, inv.internedLabelSets())
	require.Len(t, inv.intern.shapes, 1)
	require.Len(t, inv.intern.aux, 1)
	ns := inv.clusters["eu-2"].namespaces["shop"]
	require.Same(t, ns.pods.get("web-0").labels, ns.pods.get("web-99").labels)

	// a rollout: every pod gets a new pod-template-hash, one by one
	for i := 0; i < 100; i++ {
		p := pod("shop", fmt.Sprintf("web-%d", i), l("app", "web", "pod-template-hash", "def"), fmt.Sprintf("10.2.1.%d", i+1))
		p.Ports = []Port{{Name: "http", Port: 8081}}
		inv.SetPod("eu-2", p)
		if i < 99 {
			require.Equal(t, 2, inv.internedLabelSets())
		}
	}
	require.Equal(t, 1, inv.internedLabelSets())
	require.Equal(t, "web", ns.pods.get("web-7").labels.Get("app"))
	require.Equal(t, "def", ns.pods.get("web-7").labels.Get("pod-template-hash"))
	require.Len(t, inv.intern.aux, 1)
	require.Len(t, inv.intern.shapes, 1)

	for i := 0; i < 50; i++ {
		inv.RemovePod("eu-2", "shop", fmt.Sprintf("web-%d", i))
	}
	require.Equal(t, 1, inv.internedLabelSets())
	inv.RemoveCluster("eu-2")
	require.Equal(t, 0, inv.internedLabelSets())
	require.Empty(t, inv.intern.shapes)
	require.Empty(t, inv.intern.aux)
	require.Zero(t, inv.intern.sets.Len())
}

// A labelSet answers apimachinery selectors exactly like labels.Set.
func TestLabelSetMatchesLikeLabelsSet(t *testing.T) {
	in := newInterner()
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"app", "tier", "version", "a", "b", "c", "d", "e", "f", "g", "h", "i"}
	vals := []string{"", "web", "db", "1", "2", "10"}
	ops := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn,
		metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
	for i := 0; i < 2000; i++ {
		m := map[string]string{}
		for n := rng.IntN(len(keys) + 1); n > 0; n-- { // up to 12 labels: binary search path too
			m[keys[rng.IntN(len(keys))]] = vals[rng.IntN(len(vals))]
		}
		set := in.labels(m)
		ls := &metav1.LabelSelector{MatchLabels: map[string]string{}}
		for n := rng.IntN(3); n > 0; n-- {
			ls.MatchLabels[keys[rng.IntN(len(keys))]] = vals[1+rng.IntN(len(vals)-1)]
		}
		for n := rng.IntN(3); n > 0; n-- {
			op := ops[rng.IntN(len(ops))]
			r := metav1.LabelSelectorRequirement{Key: keys[rng.IntN(len(keys))], Operator: op}
			if op == metav1.LabelSelectorOpIn || op == metav1.LabelSelectorOpNotIn {
				r.Values = []string{vals[1+rng.IntN(len(vals)-1)], vals[1+rng.IntN(len(vals)-1)]}
			}
			ls.MatchExpressions = append(ls.MatchExpressions, r)
		}
		sel, err := metav1.LabelSelectorAsSelector(ls)
		require.NoError(t, err)
		require.Equal(t, sel.Matches(labels.Set(m)), sel.Matches(set), "selector %s on %v", sel, m)
		for k := range m {
			require.True(t, set.Has(k))
			require.Equal(t, m[k], set.Get(k))
		}
		require.False(t, set.Has("missing"))
		in.releaseLabels(set)
	}
	require.Empty(t, in.sets)
	require.Empty(t, in.shapes)
}

// Posting lists exist only for label keys some policy's pod selector can
// use; adding a policy after the pods builds them, removing the last such
// policy drops them, and the translation does not depend on the order.
func TestIndexFollowsPolicies(t *testing.T) {
	const spec = "podSelector: {}\ningress:\n- from: [{clusterSelector: {}, podSelector: {matchLabels: {app: web}}}]\n"
	fill := func(inv *Inventory) {
		for i := 0; i < 20; i++ {
			app := []string{"web", "db"}[i%2]
			inv.SetPod("eu-2", pod("shop", fmt.Sprintf("p-%d", i), l("app", app, "hash", fmt.Sprint(i)), fmt.Sprintf("10.2.0.%d", i+1)))
		}
	}
	podsFirst := base(t)
	fill(podsFirst)
	ns := podsFirst.clusters["eu-2"].namespaces["shop"]
	require.Empty(t, ns.index, "nothing reads an index yet")
	mustSet(t, podsFirst, pol(t, "eu-1", "shop", "p", spec))
	require.Len(t, ns.index, 1)
	require.Len(t, ns.index["app"]["web"], 10)

	policyFirst := base(t)
	mustSet(t, policyFirst, pol(t, "eu-1", "shop", "p", spec))
	fill(policyFirst)
	want := toYAML(t, Translate("eu-1", policyFirst))
	require.Contains(t, want, "10.2.0.1/32")
	require.NotContains(t, want, "10.2.0.2/32")
	require.Equal(t, want, toYAML(t, Translate("eu-1", podsFirst)))

	podsFirst.RemovePolicy(PolicyRef{Origin: "eu-1", Namespace: "shop", Name: "p"})
	require.Empty(t, ns.index)
	require.Empty(t, podsFirst.indexKeys)
	mustSet(t, podsFirst, pol(t, "eu-1", "shop", "p", spec))
	require.Equal(t, want, toYAML(t, Translate("eu-1", podsFirst)))
}

// TestPodEntrySize keeps a pod's inline part at four words and the 16-byte
// address (48 bytes on 64-bit platforms): the heap-per-entry budget
// (docs/PERFORMANCE.md) counts on it, and a new field belongs in the
// interned podAux.
func TestPodEntrySize(t *testing.T) {
	word := unsafe.Sizeof(uintptr(0))
	require.Equal(t, 4*word+16, unsafe.Sizeof(podEntry{}))
}
