// Package modeltest holds the fixtures that model's tests and the daemon's
// tests share: a replicated state to load, policy values and stable renderings
// of outputs. It is imported by tests only.
package modeltest

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
)

// PolicyValue is the replicated value of an MCNP with this spec and
// generation.
func PolicyValue(t testing.TB, spec apiv1.MultiClusterNetworkPolicySpec, gen int64) *crdt.PolicyValue {
	t.Helper()
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	return &crdt.PolicyValue{UID: "u", Generation: gen, Spec: b}
}

// NPNames renders NetworkPolicies as sorted JSON strings, for comparisons
// whose failure shows the difference.
func NPNames(nps []networkingv1.NetworkPolicy) []string {
	out := make([]string, 0, len(nps))
	for _, np := range nps {
		b, _ := json.Marshal(np)
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out
}

// ErrStrings returns the errors' messages, sorted.
func ErrStrings(errs []error) []string {
	out := make([]string, 0, len(errs))
	for _, err := range errs {
		out = append(out, err.Error())
	}
	sort.Strings(out)
	return out
}

// LoadFixture is a state of three origins (one a mirror of cluster "a"
// refuses, "c_bad") with clusters, namespaces, policies and 1300 pods each,
// some of them tombstones, undecodable or not running: the state as an
// observer that applied every delta, and the deltas.
func LoadFixture(t testing.TB) (*crdt.State, []crdt.Delta) {
	t.Helper()
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
			write(st, crdt.KindPolicy, ns+"/pol", enc(PolicyValue(t, spec, 1)), false)
		}
		for i := range 1300 {
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
