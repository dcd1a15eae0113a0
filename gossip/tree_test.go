package gossip

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every member computes its own targets from the same view; together they
// must form a spanning tree: every member but the writer is targeted exactly
// once, the writer at most once (by its parent, a copy it drops), and the
// depth from the root is ⌈log_k⌉-bounded.
func TestTreeTargetsSpanOnce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 21, 100, 300} {
		for _, k := range []int{1, 2, 4} {
			for _, origin := range []string{"c000", "eu-1", "us-west-2"} {
				names := make([]string, n)
				for i := range names {
					names[i] = fmt.Sprintf("n%03d", i)
				}
				for _, writer := range []string{names[0], names[n/2], names[n-1]} {
					got := map[string]int{}
					edges := map[string]string{} // child -> parent
					for _, self := range names {
						for _, c := range treeTargets(origin, self, names, self == writer, k) {
							require.NotEqual(t, self, c, "self-target")
							got[c]++
							edges[c] = self
						}
					}
					for _, m := range names {
						if m == writer {
							require.LessOrEqual(t, got[m], 1, "n=%d k=%d writer %s", n, k, m)
							continue
						}
						require.Equal(t, 1, got[m], "n=%d k=%d origin=%s writer=%s: %s targeted %d times", n, k, origin, writer, m, got[m])
					}
					// every member reaches the writer by parent links (connected)
					for _, m := range names {
						hops := 0
						for cur := m; cur != writer; cur = edges[cur] {
							_, ok := edges[cur]
							require.True(t, ok, "n=%d k=%d: %s not connected to writer %s", n, k, m, writer)
							hops++
							require.LessOrEqual(t, hops, n, "cycle")
						}
					}
				}
			}
		}
	}
}

// The tree depends only on the origin and the member names: the view's
// order does not matter, and different origins use different roots.
func TestTreeOrderDeterministic(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	rev := []string{"g", "f", "e", "d", "c", "b", "a"}
	require.Equal(t, treeOrder("o1", names), treeOrder("o1", rev))
	roots := map[string]bool{}
	for i := 0; i < 20; i++ {
		roots[treeOrder(fmt.Sprintf("o%d", i), names)[0]] = true
	}
	require.Greater(t, len(roots), 2, "roots should spread over members")
	require.Len(t, treeTargets("o1", "a", names, false, 4), len(treeTargets("o1", "a", rev, false, 4)))
}
