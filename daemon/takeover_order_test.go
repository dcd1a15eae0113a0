package daemon

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// A takeover in cluster b (every entry re-published at epoch 2, epoch 1
// sealed) may reach this daemon in any order: its MCNP never leaves the
// mirror while it happens, and nothing stays kept as lost afterwards
// (RELIABILITY.md finding 7 looks for such a gap).
func TestTakeoverAnyOrderKeepsThePolicy(t *testing.T) {
	enc := func(v crdt.Value) []byte {
		b, err := crdt.EncodeValue(v)
		require.NoError(t, err)
		return b
	}
	for _, perm := range permutations(5) {
		t.Run(fmt.Sprint(perm), func(t *testing.T) {
			d, b, spec := lostDaemonWithDeny(t)
			write := func(kind crdt.Kind, name string, v []byte) crdt.Delta {
				dl, _, err := b.Write(kind, name, v, false, 0)
				require.NoError(t, err)
				return dl
			}
			cl, ns, pod := enc(&crdt.ClusterValue{Labels: map[string]string{"x": "1"}}), enc(&crdt.NamespaceValue{}),
				enc(&crdt.PodValue{IPs: []string{"10.2.0.1"}, Labels: map[string]string{"app": "web"}})
			var first []crdt.Delta
			for _, e := range []struct {
				k crdt.Kind
				n string
				v []byte
			}{{crdt.KindCluster, "", cl}, {crdt.KindNamespace, "shop", ns}, {crdt.KindPod, "shop/web", pod}} {
				first = append(first, write(e.k, e.n, e.v))
			}
			_, err := d.rep.Apply(first...)
			require.NoError(t, err)
			require.NoError(t, b.SetEpoch(2))
			steps := []func() error{
				func() error { _, err := d.rep.Apply(write(crdt.KindPolicy, "shop/deny", spec)); return err },
				func() error { _, err := d.rep.Apply(write(crdt.KindCluster, "", cl)); return err },
				func() error { _, err := d.rep.Apply(write(crdt.KindNamespace, "shop", ns)); return err },
				func() error { _, err := d.rep.Apply(write(crdt.KindPod, "shop/web", pod)); return err },
				func() error {
					_, err := lostGuard{Replica: d.rep, d: d}.ApplyRetire(crdt.Retire{Origin: "b", UpTo: crdt.MakeVersion(2, 0) - 1, Sig: []byte("s")})
					return err
				},
			}
			settle := func() {
				done := make(chan struct{})
				d.rep.Barrier(func() { close(done) })
				<-done
			}
			for i, s := range perm {
				require.NoError(t, steps[s]())
				settle()
				require.True(t, d.hasPolicy("deny"), "after step %d (%d) of %v", i, s, perm)
			}
			require.Empty(t, d.kept(), "nothing kept once b re-published everything")
		})
	}
}
