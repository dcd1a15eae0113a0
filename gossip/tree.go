package gossip

import (
	"hash/fnv"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Push tree: a deterministic spanning tree per origin.
//
// Random forwarding (each receiver relays a fresh delta to 2 random peers)
// put ~2 payload copies per node on the wire, plus duplicates. Here every
// node computes the same tree from its own membership view, so in a stable
// mesh each node receives exactly one copy and nobody sends a duplicate:
//
//   - order the alive members, self included, by FNV-64a(origin, name);
//   - position i relays to positions k·i+1 … k·i+k (an implicit k-ary heap,
//     k = TreeFanout), so depth is ⌈log_k N⌉;
//   - the writer sends to the root (position 0) and to its own children,
//     so its subtree is one hop shorter and only the writer's own parent
//     wastes one copy (on the writer, which drops it).
//
// The tree depends on the origin, not on the writer node, so any node that
// learns a fresh delta late (a pull triggered by a head, after its parent
// was down or a packet was lost) relays it to its own children and repairs
// its subtree at once. Where membership views disagree (a join or a failure
// still spreading) a node may be skipped or get two copies; heads and
// anti-entropy repair the rest, as before. Hashing by origin spreads the
// interior positions (the senders) over different nodes for each origin.

// TreeFanout is the number of children a node relays a fresh delta to.
// N = 300 is 4 levels below the root; interior nodes send 4 copies and the
// ~3/4 of nodes that are leaves send none: one copy per node on average.
const TreeFanout = 4

// treeRank is a member's sort key in origin's tree.
func treeRank(origin, name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(origin))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// treeOrder returns names ordered by their rank in origin's tree (ties,
// which need a 64-bit collision, by name).
func treeOrder(origin string, names []string) []string {
	type ranked struct {
		rank uint64
		name string
	}
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
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.name
	}
	return out
}

// treeTargets is the pure relay decision: the members self sends a fresh
// delta of origin to, given every alive member's name (self included or
// not). The writer (publishing its own delta) also sends to the root.
func treeTargets(origin, self string, alive []string, writer bool, k int) []string {
	names := make([]string, 0, len(alive)+1)
	for _, n := range alive {
		if n != self {
			names = append(names, n)
		}
	}
	names = append(names, self)
	order := treeOrder(origin, names)
	pos := slices.Index(order, self)
	var out []string
	if writer && pos != 0 {
		out = append(out, order[0])
	}
	for c := k*pos + 1; c <= k*pos+k && c < len(order); c++ {
		out = append(out, order[c])
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
