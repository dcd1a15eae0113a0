package gossip

import (
	"hash/fnv"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
)

// Push tree: a deterministic spanning tree per origin.
//
// Random forwarding (each receiver relays a fresh delta to 2 random peers)
// put ~2 payload copies per node on the wire, plus duplicates. Here every
// node computes the same tree from its own membership view, so in a stable
// mesh each node receives exactly one copy and nobody sends a duplicate.
//
// The tree is a heap laid out in hash space rather than by index, so that
// views that differ by a member or two only disturb the tree locally:
//
//   - each member's rank is a hash of (origin, name) (treeRank), a point
//     in [0, 2^64), uniform whatever the names look like;
//   - the parent of a member of rank g is the member with the largest rank
//     ≤ g/k (k = EagerFanout), or the lowest-ranked member (the root) when
//     there is none. Ranks strictly decrease towards the root, so there
//     are no cycles, and each hop divides the rank by ~k: the depth is
//     about log_k N (5 at N = 300, k = 4);
//   - so a member of rank p whose successor in rank order has rank q
//     relays to every member with rank in [k·p, k·q) (the root: [0, k·q)):
//     k children on average.
//
// An index-based heap (position i relays to k·i+1 … k·i+k) was tried first:
// one member missing from a view shifts the position of every member
// ranked after it, and most of the tree breaks (N = 300 p50 126 ms instead
// of a few ms). Here a member missing from a sender's view only changes
// that sender's interval.
//
// The writer sends to the root and to its own children, so its subtree is
// one hop shorter; only the writer's own parent wastes one copy (on the
// writer, which drops it). The tree depends on the origin, not on the
// writer node, so any node that learns a fresh delta late (a pull triggered
// by a head, after its parent was down or a packet was lost) relays it to
// its own children and repairs its subtree at once. Where membership views
// disagree (a join or a failure still spreading) a node may be skipped or
// get two copies; heads and anti-entropy repair the rest. Hashing by origin
// spreads the interior members (the senders) differently for each origin.

// TreeFanout is the default number of children per member (EagerFanout).
// Interior members send ~4 copies and most members, leaves, send none: one
// copy per member on average.
const TreeFanout = 4

// treeRank is a member's rank in origin's tree: FNV-64a of (origin, name),
// then a 64-bit finalizer.
//
// FNV-64a alone is not enough. Its last step multiplies by a prime of the
// form 2^40 + 0x1b3, so a difference in one of the last bytes reaches the
// top bits only through carries, and member names that share a prefix and
// differ in their last characters (n000 … n299, node-17.eu-1 …) all get
// ranks in a narrow band of the rank space. With every rank near the same
// value r > MaxUint64/k, every member but the root is a leaf and the root's
// interval is the whole space: the tree was a star whose root sent 299
// copies one after the other (the N = 300 simulator tail, docs/PERFORMANCE
// eighth pass). The finalizer (the multiply-xorshift mix of murmur3's
// fmix64) is a bijection, so it adds no collisions, and it spreads every
// input bit over all 64 output bits.
func treeRank(origin, name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(origin))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(name))
	return mix64(h.Sum64())
}

// mix64 is a 64-bit avalanche finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

type ranked struct {
	rank uint64
	name string
}

// treeOrder returns names with their ranks, in rank order (ties, which
// need a 64-bit collision, by name).
func treeOrder(origin string, names []string) []ranked {
	rs := make([]ranked, len(names))
	for i, n := range names {
		rs[i] = ranked{treeRank(origin, n), n}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		switch {
		case a.rank < b.rank:
			return -1
		case a.rank > b.rank:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return rs
}

// scale returns k·r, saturated at the top of the rank space (ok=false).
func scale(r uint64, k int) (uint64, bool) {
	hi, lo := bits.Mul64(r, uint64(k))
	if hi != 0 {
		return math.MaxUint64, false
	}
	return lo, true
}

// treeTargets is the pure relay decision: the members self sends a fresh
// delta of origin to, given every alive member's name (self included or
// not). The writer (publishing its own delta) also sends to the root.
func treeTargets(origin, self string, alive []string, writer bool, k int) []string {
	k = max(k, 2) // k = 1 would give every member an empty interval
	names := make([]string, 0, len(alive)+1)
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
			// k·p is beyond every rank: nobody's parent, a leaf
			if writer {
				return []string{order[0].name}
			}
			return nil
		}
	}
	hi, closed := uint64(math.MaxUint64), true // [lo, hi] when closed, else [lo, hi)
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

// treePeers resolves treeTargets against the member table, leaving out
// exclude (the member the delta came from).
func (n *Node) treePeers(origin, exclude string, writer bool) []*memberlist.Node {
	peers := n.alivePeers("")
	byName := make(map[string]*memberlist.Node, len(peers))
	names := make([]string, 0, len(peers))
	for _, p := range peers {
		byName[p.Name] = p
		names = append(names, p.Name)
	}
	var out []*memberlist.Node
	for _, t := range treeTargets(origin, n.cfg.NodeName, names, writer, n.cfg.EagerFanout) {
		if p := byName[t]; p != nil && t != exclude {
			out = append(out, p)
		}
	}
	return out
}
