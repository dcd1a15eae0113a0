package gossip

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every member computes its own targets from the same view; together they
// must form a spanning tree: every member but the writer is targeted exactly
// once, the writer at most once (by its parent, a copy it drops), and the
// depth stays logarithmic.
func TestTreeTargetsSpanOnce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 21, 100, 300} {
		for _, k := range []int{2, 3, 4, 8} {
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
					// every member reaches the writer by parent links
					// (connected), within a logarithmic number of hops
					limit := 3
					for c := 1; c < n; c *= k {
						limit += 2
					}
					for _, m := range names {
						hops := 0
						for cur := m; cur != writer; cur = edges[cur] {
							_, ok := edges[cur]
							require.True(t, ok, "n=%d k=%d: %s not connected to writer %s", n, k, m, writer)
							hops++
							require.LessOrEqual(t, hops, limit, "n=%d k=%d: %s is %d hops from the writer", n, k, m, hops)
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
		roots[treeOrder(fmt.Sprintf("o%d", i), names)[0].name] = true
	}
	require.Greater(t, len(roots), 2, "roots should spread over members")
	require.Equal(t, treeTargets("o1", "a", names, false, 4), treeTargets("o1", "a", rev, false, 4))
}

// treeOrder is the reference layout: every member, self included, sorted
// by (rank, name).
func treeOrder(origin string, names []string) []ranked {
	rs := make([]ranked, len(names))
	for i, n := range names {
		rs[i] = ranked{treeRank(origin, n), n}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if a.rank != b.rank {
			if a.rank < b.rank {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return rs
}

// refTreeTargets is the tree's definition computed the slow way, over the
// sorted view (what treeSelect did before it went linear).
func refTreeTargets(origin, self string, alive []string, writer bool, k int) []string {
	k = max(k, 2)
	var names []string
	for _, n := range alive {
		if n != self {
			names = append(names, n)
		}
	}
	order := treeOrder(origin, append(names, self))
	pos := slices.IndexFunc(order, func(r ranked) bool { return r.name == self })
	var lo uint64
	if pos > 0 {
		var ok bool
		if lo, ok = scale(order[pos].rank, k); !ok {
			if writer {
				return []string{order[0].name}
			}
			return nil
		}
	}
	hi, closed := uint64(math.MaxUint64), true
	if pos+1 < len(order) {
		var ok bool
		hi, ok = scale(order[pos+1].rank, k)
		closed = !ok
	}
	var out []string
	if writer && pos != 0 {
		out = append(out, order[0].name)
	}
	for _, r := range order {
		if r.name == self || r.rank < lo || (r.rank == hi && !closed) || r.rank > hi {
			continue
		}
		if writer && r.name == order[0].name {
			continue
		}
		out = append(out, r.name)
	}
	return out
}

// The linear selection computes exactly the sorted definition, for random
// views (self in the view or not), fan-outs and writers.
func TestTreeSelectMatchesSortedDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 18))
	for trial := 0; trial < 3000; trial++ {
		n := 1 + rng.IntN(120)
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("node-%d.c%d", rng.IntN(400), rng.IntN(5))
		}
		names = slices.Compact(slices.Sorted(slices.Values(names)))
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		self := names[rng.IntN(len(names))]
		view := names
		if rng.IntN(3) == 0 { // self not in its own view
			view = slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == self })
		}
		origin := fmt.Sprintf("c%d", rng.IntN(5))
		k, writer := 2+rng.IntN(7), rng.IntN(4) == 0
		require.Equal(t, refTreeTargets(origin, self, view, writer, k), treeTargets(origin, self, view, writer, k),
			"trial %d origin=%s self=%s k=%d writer=%v view=%v", trial, origin, self, k, writer, view)
	}
}

// The inline hash is FNV-64a of origin, a zero byte and the name.
func TestTreeRankIsFNV64a(t *testing.T) {
	for _, c := range [][2]string{{"", ""}, {"c000", "n001"}, {"eu-1", "ip-10-0-3-17.ec2.internal"}} {
		h := fnv.New64a()
		_, _ = h.Write([]byte(c[0] + "\x00" + c[1]))
		require.Equal(t, mix64(h.Sum64()), treeRank(c[0], c[1]), "%q", c)
	}
}

// A member missing from some senders' views disturbs the tree only
// locally: only members missing from their own parent's view are skipped
// (an index-based heap shifted everybody ranked after the gap and lost
// most of the tree).
func TestTreeToleratesViewDifferences(t *testing.T) {
	const n, origin = 300, "c007"
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("n%03d", i)
	}
	writer := names[17]
	// every 7th member's view lacks one other member
	views := map[string][]string{}
	missing := map[string]string{}
	for i, self := range names {
		views[self] = names
		if i%7 == 0 {
			gone := names[(i*31+5)%n]
			if gone == self || gone == writer {
				continue
			}
			missing[self] = gone
			var v []string
			for _, m := range names {
				if m != gone {
					v = append(v, m)
				}
			}
			views[self] = v
		}
	}
	// the consensus parent of each member
	parent := map[string]string{}
	for _, self := range names {
		for _, c := range treeTargets(origin, self, names, self == writer, TreeFanout) {
			parent[c] = self
		}
	}
	got := map[string]int{}
	for _, self := range names {
		for _, c := range treeTargets(origin, self, views[self], self == writer, TreeFanout) {
			got[c]++
		}
	}
	skipped := 0
	for _, m := range names {
		if m != writer && got[m] == 0 {
			skipped++
			require.Equal(t, m, missing[parent[m]], "%s skipped though its parent %s sees it", m, parent[m])
		}
	}
	require.LessOrEqual(t, skipped, len(missing))
}

func BenchmarkTreeTargets300(b *testing.B) {
	names := make([]string, 300)
	for i := range names {
		names[i] = fmt.Sprintf("node-%03d.eu-1", i)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = treeTargets("eu-1", names[i%300], names, false, TreeFanout)
	}
}

// Ranks must spread over the whole rank space for names that share a
// prefix and differ only in their last characters, as node names do.
// FNV-64a alone put them all in a narrow band: every member but the root
// was a leaf and the root relayed to all 299 others one after the other
// (TestTreeTargetsSpanOnce still passed: a star spans once, in 2 hops).
func TestTreeRanksSpread(t *testing.T) {
	for _, pattern := range []string{"n%03d", "node-%d.eu-1", "ip-10-0-%d-17.ec2.internal", "gw-%d"} {
		const n = 1024
		var buckets [16]int
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf(pattern, i)
			buckets[treeRank("c000", names[i])>>60]++
		}
		for b, c := range buckets {
			require.Greater(t, c, n/16/2, "%s: top-nibble bucket %x holds %d of %d ranks", pattern, b, c, n)
			require.Less(t, c, n/16*2, "%s: top-nibble bucket %x holds %d of %d ranks", pattern, b, c, n)
		}
		for _, size := range []int{100, 300, 1000} {
			interior, most := 0, 0
			for _, self := range names[:size] {
				c := len(treeTargets("c000", self, names[:size], false, TreeFanout))
				if c > 0 {
					interior++
				}
				most = max(most, c)
			}
			// about a quarter of the members relay (ranks below 2^64/k);
			// no member relays to more than a small multiple of k
			require.Greater(t, interior, size/8, "%s N=%d: only %d members relay", pattern, size, interior)
			require.LessOrEqual(t, most, 12*TreeFanout, "%s N=%d: a member relays to %d", pattern, size, most)
		}
	}
}
