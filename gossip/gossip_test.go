package gossip

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func testKey(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b + byte(i)
	}
	return k
}

// Three clusters, four daemons (c1 has a writer and a standby): random puts
// and deletes by every writer converge to identical state everywhere, and a
// standby cannot publish.
func TestConvergenceAfterRandomWrites(t *testing.T) {
	keys := [][]byte{testKey(1)}
	a := startNode(t, "a", "c1", keys, nil)
	a2 := startNode(t, "a2", "c1", keys, nil)
	a2.writer.Store(false)
	b := startNode(t, "b", "c2", keys, nil)
	c := startNode(t, "c", "c3", keys, nil)
	all := []*tnode{a, a2, b, c}
	joinAll(t, all...)

	writers := []*tnode{a, b, c}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 150; i++ {
		w := writers[rng.IntN(len(writers))]
		name := fmt.Sprintf("ns/pod-%d", rng.IntN(40))
		del := rng.IntN(4) == 0
		var v []byte
		if !del {
			v = podValue(t, fmt.Sprintf("10.0.%d.%d", rng.IntN(255), rng.IntN(255)))
		}
		w.write(t, crdt.KindPod, name, v, del)
	}
	requireConverged(t, waitConverge, all...)

	// The standby receives and serves but may not write.
	d, err := a2.rep.Write(crdt.KindPod, "ns/x", podValue(t, "10.9.9.9"), false)
	require.NoError(t, err)
	require.ErrorIs(t, a2.Publish(d), ErrNotWriter)
	// A writer cannot publish someone else's origin.
	require.ErrorIs(t, b.Publish(crdt.Delta{Origin: "c1"}), ErrForeignOrigin)

	// Node meta carries cluster and writer flag (the flag follows IsWriter
	// through a meta update).
	require.Eventually(t, func() bool {
		ms := c.Members()
		if len(ms) != 4 {
			return false
		}
		for _, m := range ms {
			want := map[string]string{"a": "c1", "a2": "c1", "b": "c2", "c": "c3"}[m.Name]
			if m.Cluster != want || !m.Alive || m.Writer != (m.Name != "a2") {
				return false
			}
		}
		return true
	}, waitMembership, pollEvery, "%+v", c.Members())
}
