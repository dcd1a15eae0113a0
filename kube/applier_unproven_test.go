package kube

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// An MCNP whose entry is not proven by its origin's signed state mark
// (issue 29): its generated objects are neither changed nor deleted, and
// one that does not exist yet is created isolation-only (fail closed),
// through the decision-time check and the polled set alike; all are
// reconciled as usual once it is proven.
func TestApplierLeavesUnprovenPoliciesAlone(t *testing.T) {
	stale := liveNP("a", "stale", "h1")   // its MCNP's deletion is not proven
	change := liveNP("a", "change", "h1") // its new content is not proven
	r := newApplierRig(t, nil, &stale, &change)
	var checkOn atomic.Bool
	checkOn.Store(true)
	r.applier.SetUnprovenCheck(func(ref string) bool { return checkOn.Load() && ref == "eu-1/b/new" })
	r.applier.SetUnproven(map[string]struct{}{"eu-1/a/stale": {}, "eu-1/a/change": {}})
	require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{genNP("b", "new", "h1"), genNP("a", "change", "h2"),
		genNP("a", "other", "h1")}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.run(ctx)
	waitSettled(t, r.applier)

	_, ok := r.get(t, "a", "other")
	require.True(t, ok, "a proven MCNP is applied")
	np, ok := r.get(t, "b", "new")
	require.True(t, ok, "an unproven MCNP (decision-time check) is enforced")
	require.Equal(t, "isolation-only", np.Annotations[unprovenAnnotation])
	require.Empty(t, np.Spec.Ingress, "isolation-only: the pods it selects are allowed nothing")
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
	_, ok = r.get(t, "a", "stale")
	require.True(t, ok, "an unproven deletion is not applied")
	np, _ = r.get(t, "a", "change")
	require.Equal(t, "h1", np.Annotations[ContentHashAnnotation], "an unproven change is not applied")
	require.Empty(t, np.Annotations[unprovenAnnotation], "a proven object is not replaced by a stand-in")
	assert.Equal(t, 1, countActions(r.client, "patch", "new"), "the stand-in is applied once (its informer event re-decides it)")
	assert.Equal(t, 2.0, testutil.ToFloat64(r.applier.metrics.Unproven))

	// proven: the check says no, and the next poll (whose set never held
	// "new") re-decides what was left alone
	checkOn.Store(false)
	r.applier.SetUnproven(map[string]struct{}{})
	require.Eventually(t, func() bool {
		created, _ := r.get(t, "b", "new")
		_, kept := r.get(t, "a", "stale")
		np, _ := r.get(t, "a", "change")
		return created.Annotations[ContentHashAnnotation] == "h1" && !kept && np.Annotations[ContentHashAnnotation] == "h2"
	}, 10*time.Second, 5*time.Millisecond)
	assert.Zero(t, testutil.ToFloat64(r.applier.metrics.Unproven))
	np, _ = r.get(t, "b", "new")
	assert.Empty(t, np.Annotations[unprovenAnnotation], "the proven object replaced the stand-in")
	assert.Len(t, np.Spec.Ingress, 1)
	assert.Zero(t, testutil.ToFloat64(r.applier.metrics.Repairs), "replacing a stand-in is no repair")
}

// An unproven update of a proven generated object is enforced only as far
// as it allows less: a narrower update at once, a wider one not at all, one
// that is neither (same pods) as the rules both allow (the isolation-only
// stand-in when they share none), and one that selects other pods not at
// all. Under the empty-view gate nothing proven
// is replaced.
func TestApplierUnprovenUpdateFailsClosed(t *testing.T) {
	blocks := func(np networkingv1.NetworkPolicy, hash string, cidrs ...string) networkingv1.NetworkPolicy {
		var peers []networkingv1.NetworkPolicyPeer
		for _, c := range cidrs {
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
		}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peers}}
		np.Annotations[ContentHashAnnotation] = hash
		return np
	}
	want := func(name, hash string, cidrs ...string) networkingv1.NetworkPolicy {
		return blocks(genNP("a", name, hash), hash, cidrs...)
	}
	moved := want("moved", "h2", "10.1.0.8/32")
	moved.Spec.PodSelector.MatchLabels = map[string]string{"role": "cache"}
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			r := newApplierRig(t, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r.run(ctx)
			// the proven objects, applied as coastguard applies them
			require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{want("narrow", "h1", "10.1.0.7/32", "10.1.0.8/32"),
				want("wide", "h1", "10.1.0.7/32"), want("swap", "h1", "10.1.0.7/32"), want("moved", "h1", "10.1.0.7/32"),
				want("both", "h1", "10.1.0.7/32", "10.1.0.8/32")}))
			waitSettled(t, r.applier)
			r.applier.SetUnproven(map[string]struct{}{"eu-1/a/narrow": {}, "eu-1/a/wide": {}, "eu-1/a/swap": {}, "eu-1/a/moved": {}, "eu-1/a/both": {}})
			r.applier.SetHold(hold)
			require.NoError(t, r.applier.SetDesired([]networkingv1.NetworkPolicy{want("narrow", "h2", "10.1.0.8/32"),
				want("wide", "h2", "10.1.0.7/32", "10.1.0.9/32"), want("swap", "h2", "10.1.0.8/32"), moved,
				want("both", "h2", "10.1.0.8/32", "10.1.0.9/32")}))
			waitSettled(t, r.applier)

			hashes := map[string]string{}
			for _, n := range []string{"narrow", "wide", "swap", "moved", "both"} {
				np, ok := r.get(t, "a", n)
				require.True(t, ok, n)
				hashes[n] = np.Annotations[ContentHashAnnotation]
				if u := np.Annotations[unprovenAnnotation]; u != "" {
					hashes[n] = u + " " + strings.Join(blocksOf(*np), ",")
				}
			}
			if hold {
				assert.Equal(t, map[string]string{"narrow": "h1", "wide": "h1", "swap": "h1", "moved": "h1", "both": "h1"}, hashes)
				return
			}
			assert.Equal(t, map[string]string{"narrow": "h2", "wide": "h1", "swap": "isolation-only ", "moved": "h1",
				"both": "intersection 10.1.0.8/32"}, hashes)
		})
	}
}

// blocksOf lists np's ipBlock CIDRs, ingress then egress.
func blocksOf(np networkingv1.NetworkPolicy) []string {
	var peers []networkingv1.NetworkPolicyPeer
	for _, r := range np.Spec.Ingress {
		peers = append(peers, r.From...)
	}
	for _, r := range np.Spec.Egress {
		peers = append(peers, r.To...)
	}
	var out []string
	for _, p := range peers {
		if p.IPBlock != nil {
			out = append(out, p.IPBlock.CIDR)
		}
	}
	return out
}

// intersection keeps, per pair of rules with the same ports, the peers both
// name; a rule without peers names every peer; nothing shared is no rule
// (never an empty peer list, which would allow everyone).
func TestIntersection(t *testing.T) {
	port := func(p int32) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Port: &intstr.IntOrString{IntVal: p}}}
	}
	peer := func(cidr string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}
	}
	np := func(in []networkingv1.NetworkPolicyIngressRule, eg []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
		p := genNP("a", "p", "h")
		p.Spec.Ingress, p.Spec.Egress = in, eg
		p.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		return &p
	}
	live := np([]networkingv1.NetworkPolicyIngressRule{
		{Ports: port(80), From: []networkingv1.NetworkPolicyPeer{peer("10.0.0.1/32"), peer("10.0.0.2/32")}},
		{Ports: port(443)}, // every peer
	}, []networkingv1.NetworkPolicyEgressRule{{Ports: port(53), To: []networkingv1.NetworkPolicyPeer{peer("10.0.0.9/32")}}})
	desired := np([]networkingv1.NetworkPolicyIngressRule{
		{Ports: port(80), From: []networkingv1.NetworkPolicyPeer{peer("10.0.0.2/32"), peer("10.0.0.3/32")}},
		{Ports: port(443), From: []networkingv1.NetworkPolicyPeer{peer("10.0.0.4/32")}},
		{Ports: port(8080)}, // live has no such port
	}, []networkingv1.NetworkPolicyEgressRule{{Ports: port(53), To: []networkingv1.NetworkPolicyPeer{peer("10.0.0.8/32")}}})

	got := intersection(desired, live)
	assert.Equal(t, []string{"10.0.0.2/32", "10.0.0.4/32"}, blocksOf(*got))
	require.Len(t, got.Spec.Ingress, 2)
	assert.Empty(t, got.Spec.Egress, "no shared egress peer: no egress rule, never an empty peer list")
	assert.Equal(t, desired.Spec.PolicyTypes, got.Spec.PolicyTypes, "egress stays isolated")
	assert.Equal(t, "intersection", got.Annotations[unprovenAnnotation])
	assert.Equal(t, enforce.ContentHash(got), got.Annotations[ContentHashAnnotation])
	assert.Equal(t, "isolation-only", intersection(np(nil, nil), live).Annotations[unprovenAnnotation])
}
