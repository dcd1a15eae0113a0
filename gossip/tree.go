package gossip

import (
	"math"
	"math/bits"
	"slices"

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
	// FNV-64a, inline: hash/fnv through its interface allocates, and this
	// runs once per member per forward.
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(origin); i++ {
		h = (h ^ uint64(origin[i])) * prime
	}
	h *= prime // the 0 separator
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime
	}
	return mix64(h)
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

// before orders by rank, ties (a 64-bit collision) by name.
func (a ranked) before(b ranked) bool {
	return a.rank < b.rank || a.rank == b.rank && a.name < b.name
}

// scale returns k·r, saturated at the top of the rank space (ok=false).
func scale(r uint64, k int) (uint64, bool) {
	hi, lo := bits.Mul64(r, uint64(k))
	if hi != 0 {
		return math.MaxUint64, false
	}
	return lo, true
}

// treeSelect is the pure relay decision: the indexes (into n members named
// name(i), self included or not) that self sends a fresh delta of origin
// to. The writer (publishing its own delta) also sends to the root, first;
// the others follow in rank order.
//
// It needs only self's rank, its successor's rank and the root, so it is
// linear in the view and sorts only its few targets: every member runs it
// once per fresh delta, and at N = 300 sorting the whole view was 29 % of
// what the simulator allocated during its updates.
func treeSelect(origin, self string, n int, name func(int) string, writer bool, k int) []int {
	k = max(k, 2) // k = 1 would give every member an empty interval
	me := ranked{treeRank(origin, self), self}
	root, rootIdx := me, -1
	var succ ranked
	hasSucc := false
	ranks := make([]uint64, n)
	for i := range n {
		nm := name(i)
		if nm == self {
			continue
		}
		r := ranked{treeRank(origin, nm), nm}
		ranks[i] = r.rank
		if r.before(root) {
			root, rootIdx = r, i
		}
		if me.before(r) && (!hasSucc || r.before(succ)) {
			succ, hasSucc = r, true
		}
	}
	var lo uint64
	if rootIdx >= 0 { // self is not the root
		var ok bool
		if lo, ok = scale(me.rank, k); !ok {
			// k·p is beyond every rank: nobody's parent, a leaf
			if writer {
				return []int{rootIdx}
			}
			return nil
		}
	}
	hi, closed := uint64(math.MaxUint64), true // [lo, hi] when closed, else [lo, hi)
	if hasSucc {
		var ok bool
		hi, ok = scale(succ.rank, k)
		closed = !ok
	}
	var out []int
	for i := range n {
		r := ranks[i]
		if r < lo || r > hi || (r == hi && !closed) || (writer && i == rootIdx) {
			continue
		}
		if nm := name(i); nm != self {
			out = append(out, i)
		}
	}
	sortByRank(out, ranks, name)
	if writer && rootIdx >= 0 {
		out = append([]int{rootIdx}, out...)
	}
	return out
}

// sortByRank sorts member indexes by (rank, name).
func sortByRank(idx []int, ranks []uint64, name func(int) string) {
	slices.SortFunc(idx, func(a, b int) int {
		ra, rb := ranked{ranks[a], name(a)}, ranked{ranks[b], name(b)}
		switch {
		case ra.before(rb):
			return -1
		case rb.before(ra):
			return 1
		}
		return 0
	})
}

// treeTargets is treeSelect over a list of names.
func treeTargets(origin, self string, alive []string, writer bool, k int) []string {
	var out []string
	for _, i := range treeSelect(origin, self, len(alive), func(i int) string { return alive[i] }, writer, k) {
		out = append(out, alive[i])
	}
	return out
}

// treePeers resolves treeTargets against the member table, leaving out
// exclude (the member the delta came from).
func (n *Node) treePeers(origin, exclude string, writer bool) []*memberlist.Node {
	peers := n.alivePeers("")
	var out []*memberlist.Node
	for _, i := range treeSelect(origin, n.cfg.NodeName, len(peers), func(i int) string { return peers[i].Name }, writer, n.cfg.EagerFanout) {
		if peers[i].Name != exclude {
			out = append(out, peers[i])
		}
	}
	return out
}
