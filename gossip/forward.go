package gossip

import (
	"sync"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Relaying (the push tree of tree.go, in the style of Plumtree's eager
// links).
//
// A node that receives a fresh, small delta (by push, forward or a
// head-triggered pull) whose watermark it advanced relays it once, eagerly,
// to its children in the origin's push tree, other than the member it came
// from. Most nodes therefore receive data on the first hop that reaches
// them; heads and pulls only repair what the tree missed, and a node that
// repairs by pull relays to its own subtree at once.
//
// Dedupe: each node relays a given (origin, version) at most once. The
// message ID is (origin, To version) and "seen" is a per-origin watermark of
// what this node already relayed (forwarded[origin]), so no payload cache
// is needed; a delta is relayed only if it advanced our replica in this
// apply (fresh) and its To is beyond that watermark. Bulk anti-entropy
// (path "sync") never relays: it repairs old state, it does not spread
// news.
//
// Trust: a relayed delta comes from a relay, not from its origin, exactly
// like pulled data, so the writer-push origin check (sender's cluster ==
// origin) does not apply; it is accepted from any alive member, and the
// origin signatures every path verifies cover it.

// forwardFresh relays, once, the deltas of ds that advanced the replica
// beyond before (the digest taken just before applying them) and fit one
// UDP packet, down each origin's push tree (other than to from).
func (n *Node) forwardFresh(from string, ds []crdt.Delta, before crdt.Digest) {
	if len(ds) == 0 {
		return
	}
	byOrigin := n.forwarded.take(ds, before, n.rep.Digest(), udpBudget-len(n.cfg.NodeName)-8)
	for origin, encoded := range byOrigin {
		msg := encodeDeltaMsg(msgForward, n.cfg.NodeName, 0, false, encoded)
		for _, peer := range n.treePeers(origin, from, false) {
			if n.sendBestEffort(peer, msg, msgForward) {
				n.m.deltas.WithLabelValues("out", "forward").Add(float64(len(encoded)))
			}
		}
	}
}

// forwardLog is the push tree's dedupe: the highest version forwarded per
// origin, under its own lock.
type forwardLog struct {
	mu        sync.Mutex
	forwarded map[string]crdt.Version
}

func newForwardLog() *forwardLog { return &forwardLog{forwarded: map[string]crdt.Version{}} }

// take returns the encoded deltas of ds to relay by origin (fresh, not
// relayed yet, all together within budget bytes) and records them as
// relayed.
func (f *forwardLog) take(ds []crdt.Delta, before, after crdt.Digest, budget int) map[string][][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	encoded := map[string][][]byte{}
	size := 0
	for _, d := range ds {
		if !freshForForward(d, after[d.Origin], before[d.Origin], f.forwarded[d.Origin]) {
			continue
		}
		enc, err := crdt.EncodeDelta(d)
		if err != nil || size+len(enc)+3 > budget {
			continue // large deltas travel by head + pull only
		}
		encoded[d.Origin] = append(encoded[d.Origin], enc)
		size += len(enc) + 3
		f.forwarded[d.Origin] = d.To
	}
	return encoded
}

// freshForForward is the pure forwarding decision for one delta d, given the
// origin's digest after and before applying it and the highest version this
// node already forwarded for the origin: forward only news (the apply
// advanced our watermark up to d.To) that we have not forwarded yet, and
// never resets or retirement-era state.
func freshForForward(d crdt.Delta, after, before crdt.OriginDigest, forwarded crdt.Version) bool {
	if d.Reset || len(d.Entries) == 0 {
		return false
	}
	if after.Max <= before.Max || after.Max < d.To {
		return false // not news here: we had it already (or it did not apply)
	}
	if d.To <= forwarded || d.To <= after.Retired {
		return false
	}
	return true
}

// onForward accepts deltas relayed by an alive member (push tree).
func (n *Node) onForward(m *message) {
	if _, alive, _ := n.members.lookup(m.Sender); !alive {
		n.drop(dropUnknownSender, "forward from unknown or dead member", "sender", m.Sender)
		return
	}
	ok := make([]crdt.Delta, 0, len(m.Deltas))
	for _, d := range m.Deltas {
		if d.Origin == n.cfg.ClusterID && n.cfg.IsWriter() {
			// Our own origin: only we write it; a relayed copy is never news.
			continue
		}
		ok = append(ok, d)
	}
	before := n.rep.Digest()
	n.applyDeltas(ok, "forward")
	n.forwardFresh(m.Sender, ok, before)
}
