package kube

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// policyNP is a generated object of policy ref (its origin annotation).
func policyNP(ref enforce.PolicyRef, ns, name, hash string) networkingv1.NetworkPolicy {
	np := genNP(ns, name, hash)
	np.Annotations[OriginAnnotation] = ref.String()
	return np
}

// idleApplier is an applier with a queue but no workers: what is queued
// stays in a.queued.
func idleApplier(t *testing.T) *Applier {
	t.Helper()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	a, err := NewApplier(client, factory.Networking().V1().NetworkPolicies(), ApplierOptions{Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	a.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(a.queue.ShutDown)
	return a
}

// A change set touching one policy queues only that policy's names and
// leaves every other policy's held objects as they were (not copied).
func TestApplyChangesTouchesOnlyTheChangedPolicy(t *testing.T) {
	a := idleApplier(t)
	p := func(n string) enforce.PolicyRef { return enforce.PolicyRef{Origin: "eu-1", Namespace: "shop", Name: n} }
	require.NoError(t, a.ApplyChanges(map[enforce.PolicyRef][]networkingv1.NetworkPolicy{
		p("a"): {policyNP(p("a"), "shop", "a1", "h1"), policyNP(p("a"), "shop", "a2", "h1")},
		p("b"): {policyNP(p("b"), "shop", "b1", "h1"), policyNP(p("b"), "shop", "b2", "h1")},
		p("c"): {policyNP(p("c"), "shop", "c1", "h1")},
	}))
	require.Len(t, a.queued, 5)
	before := maps.Clone(a.set.want)
	clear(a.queued)

	require.NoError(t, a.ApplyChanges(map[enforce.PolicyRef][]networkingv1.NetworkPolicy{
		p("b"): {policyNP(p("b"), "shop", "b1", "h2"), policyNP(p("b"), "shop", "b3", "h1")},
	}))
	assert.Equal(t, []string{"shop/b1", "shop/b2", "shop/b3"}, slices.Sorted(maps.Keys(a.queued)),
		"b1 changed, b2 gone, b3 new; same-hash objects of b and the other policies are not queued")
	for _, k := range []string{"shop/a1", "shop/a2", "shop/c1"} {
		assert.Same(t, before[k], a.set.want[k], "%s: another policy's object is neither copied nor replaced", k)
	}
	assert.NotContains(t, a.set.want, "shop/b2")

	clear(a.queued)
	require.NoError(t, a.ApplyChanges(map[enforce.PolicyRef][]networkingv1.NetworkPolicy{
		p("b"): {policyNP(p("b"), "shop", "b1", "h2"), policyNP(p("b"), "shop", "b3", "h1")},
	}))
	assert.Empty(t, a.queued, "handing over the same objects again queues nothing")
}

// Two policies claiming one name: both are refused with a message naming
// the other, whatever the order; the name is broken until one lets go.
func TestApplyChangesCollisionIsOrderFree(t *testing.T) {
	a := idleApplier(t)
	x := enforce.PolicyRef{Origin: "eu-1", Namespace: "shop", Name: "x"}
	y := enforce.PolicyRef{Origin: "eu-2", Namespace: "shop", Name: "y"}
	require.NoError(t, a.ApplyChanges(map[enforce.PolicyRef][]networkingv1.NetworkPolicy{x: {policyNP(x, "shop", "n", "h1")}}))
	err := a.ApplyChanges(map[enforce.PolicyRef][]networkingv1.NetworkPolicy{y: {policyNP(y, "shop", "n", "h2")}})
	require.Error(t, err)
	f := a.Failures()
	assert.Equal(t, "NetworkPolicy name shop/n collides with one generated from eu-2/shop/y", f["eu-1/shop/x"])
	assert.Equal(t, "NetworkPolicy name shop/n collides with one generated from eu-1/shop/x", f["eu-2/shop/y"])
	assert.Contains(t, a.set.broken, "shop/n")
	clear(a.queued)
	require.NoError(t, a.ApplyChanges(map[enforce.PolicyRef][]networkingv1.NetworkPolicy{y: nil}))
	assert.Empty(t, a.Failures())
	assert.Equal(t, "h1", a.set.want["shop/n"].Annotations[ContentHashAnnotation])
	assert.Contains(t, a.queued, "shop/n", "the name is installed again")
}

// randomGroup is a random object list of policy ref: names from a small
// pool (so policies collide), some invalid.
func randomGroup(rng *rand.Rand, ref enforce.PolicyRef) []networkingv1.NetworkPolicy {
	var out []networkingv1.NetworkPolicy
	for range rng.IntN(4) {
		np := policyNP(ref, "ns"+fmt.Sprint(rng.IntN(2)), "n"+fmt.Sprint(rng.IntN(6)), "h"+fmt.Sprint(rng.IntN(3)))
		switch rng.IntN(12) {
		case 0:
			np.Annotations[ContentHashAnnotation] = ""
		case 1:
			np.Name = ""
		case 2:
			np.Labels = nil
		}
		out = append(out, np)
	}
	return out
}

// The key regression guard: any sequence of change sets applied
// incrementally leaves exactly the state SetDesired of the resulting full
// list builds from scratch (installed objects, broken names, refusals).
func TestApplyChangesEqualsSetDesiredOfTheWhole(t *testing.T) {
	refs := make([]enforce.PolicyRef, 8)
	for i := range refs {
		refs[i] = enforce.PolicyRef{Origin: fmt.Sprint("c", i%3), Namespace: "ns", Name: fmt.Sprint("p", i)}
	}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		inc := idleApplier(t)
		current := map[enforce.PolicyRef][]networkingv1.NetworkPolicy{}
		for step := range 12 {
			changes := map[enforce.PolicyRef][]networkingv1.NetworkPolicy{}
			for range 1 + rng.IntN(3) {
				ref := refs[rng.IntN(len(refs))]
				changes[ref] = randomGroup(rng, ref)
				current[ref] = changes[ref]
			}
			var all []networkingv1.NetworkPolicy
			for _, ref := range refs {
				all = append(all, current[ref]...)
			}
			rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			if rng.IntN(4) == 0 {
				_ = inc.SetDesired(slices.Clone(all)) // the full hand-off diffs against what is held
			} else {
				_ = inc.ApplyChanges(changes)
			}
			whole := newDesiredSet() // what SetDesired builds on a fresh applier
			whole.apply(groupDesired(all))
			requireSameDesired(t, whole, inc.set, fmt.Sprintf("seed %d step %d", seed, step))
		}
	}
}

func requireSameDesired(t *testing.T, want, got *desiredSet, msg string) {
	t.Helper()
	hashes := func(s *desiredSet) map[string]string {
		out := map[string]string{}
		for k, np := range s.want {
			out[k] = np.Annotations[OriginAnnotation] + " " + np.Annotations[ContentHashAnnotation]
		}
		return out
	}
	require.Equal(t, hashes(want), hashes(got), msg)
	require.Equal(t, want.broken, got.broken, msg)
	require.Equal(t, want.rejected, got.rejected, msg)
}

// benchGroups is n policies of two generated objects each.
func benchGroups(n int) map[enforce.PolicyRef][]networkingv1.NetworkPolicy {
	out := make(map[enforce.PolicyRef][]networkingv1.NetworkPolicy, n)
	for i := range n {
		ref := enforce.PolicyRef{Origin: "eu-1", Namespace: fmt.Sprint("ns", i%50), Name: fmt.Sprint("p", i)}
		out[ref] = []networkingv1.NetworkPolicy{
			policyNP(ref, ref.Namespace, ref.Name+"-a", "h0"), policyNP(ref, ref.Namespace, ref.Name+"-b", "h0")}
	}
	return out
}

// desiredOf is what model.Outputs.Desired does: every object, sorted.
func desiredOf(groups map[enforce.PolicyRef][]networkingv1.NetworkPolicy) []networkingv1.NetworkPolicy {
	var out []networkingv1.NetworkPolicy
	for _, nps := range groups {
		out = append(out, nps...)
	}
	slices.SortFunc(out, func(a, b networkingv1.NetworkPolicy) int {
		if a.Namespace != b.Namespace {
			return strings.Compare(a.Namespace, b.Namespace)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// BenchmarkApplyRound is one enforcement round in which 1 of 1000
// policies (2 generated objects each) changed: the full hand-off
// (Desired + SetDesired) against the change set (ApplyChanges).
func BenchmarkApplyRound(b *testing.B) {
	groups := benchGroups(1000)
	changed := enforce.PolicyRef{Origin: "eu-1", Namespace: "ns7", Name: "p7"}
	round := func(i int) []networkingv1.NetworkPolicy {
		h := fmt.Sprint("h", i%2+1)
		return []networkingv1.NetworkPolicy{policyNP(changed, "ns7", "p7-a", h), policyNP(changed, "ns7", "p7-b", h)}
	}
	b.Run("full", func(b *testing.B) {
		a := idleApplierB(b)
		require.NoError(b, a.SetDesired(desiredOf(groups)))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			groups[changed] = round(i)
			_ = a.SetDesired(desiredOf(groups))
		}
	})
	b.Run("changes", func(b *testing.B) {
		a := idleApplierB(b)
		require.NoError(b, a.SetDesired(desiredOf(groups)))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = a.ApplyChanges(map[enforce.PolicyRef][]networkingv1.NetworkPolicy{changed: round(i)})
		}
	})
}

func idleApplierB(b *testing.B) *Applier {
	b.Helper()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	a, err := NewApplier(client, factory.Networking().V1().NetworkPolicies(), ApplierOptions{Registerer: prometheus.NewRegistry()})
	require.NoError(b, err)
	return a // no queue: nothing is queued, only the desired set is kept
}
