package gossip

import (
	"sync"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Push tree (eager forwarding, in the style of Plumtree's eager links).
//
// The writer pushes a fresh delta to EagerFanout peers and announces a head;
// every other node used to get it by pull: one gossip tick for a holder's
// head plus a request/answer round trip per hop (88 % of deliveries in the
// traffic breakdown). Now a node that receives a fresh, small delta (by
// push, forward or a head-triggered pull) and whose watermark it advanced
// forwards it once, eagerly, to ForwardFanout random peers other than the
// one it came from. Most nodes therefore receive data on the first hop that
// reaches them; heads and pulls only repair what the tree missed.
//
// Dedupe: each node forwards a given (origin, version) at most once. The
// message ID is (origin, To version) and "seen" is a per-origin watermark of
// what this node already forwarded (forwarded[origin]), so no payload cache
// is needed; a delta is forwarded only if it advanced our replica in this
// apply (fresh) and its To is beyond that watermark. Bulk anti-entropy
// (path "sync") never forwards: it repairs old state, it does not spread
// news.
//
// Trust: a forwarded delta comes from a relay, not from its origin, exactly
// like pulled data, so the writer-push origin check (sender's cluster ==
// origin) does not apply; it is accepted from any alive member. Any key
// holder is fully trusted today (docs/GOSSIP.md); once entries carry origin
// signatures, the same verification covers this path as every other.

// ForwardFanout is the number of peers a node forwards a fresh delta to.
// With fanout f a push-only epidemic reaches the fraction x of nodes with
// 1-x = e^(-f·x): 80 % for f = 2, 94 % for f = 3. Each node sends f copies
// of the payload per update (naive flooding: ~12 at N = 100-300).
const ForwardFanout = 2

// forwardFresh relays, once, the deltas of ds that advanced the replica
// beyond before (the digest taken just before applying them) and fit one
// UDP packet, to ForwardFanout random peers other than from.
func (n *Node) forwardFresh(from string, ds []crdt.Delta, before crdt.Digest) {
	if len(ds) == 0 {
		return
	}
	encoded := n.forwarded.take(ds, before, n.rep.Digest(), udpBudget-len(n.cfg.NodeName)-8)
	count := len(encoded)
	if count == 0 {
		return
	}
	msg := encodeDeltaMsg(msgForward, n.cfg.NodeName, 0, false, encoded)
	for _, peer := range n.randomPeers(ForwardFanout, from) {
		if n.sendBestEffort(peer, msg, msgForward) {
			n.m.deltas.WithLabelValues("out", "forward").Add(float64(count))
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

// take returns the encoded deltas of ds to forward (fresh, not forwarded
// yet, all together within budget bytes) and records them as forwarded.
func (f *forwardLog) take(ds []crdt.Delta, before, after crdt.Digest, budget int) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	var encoded [][]byte
	size := 0
	for _, d := range ds {
		if !freshForForward(d, after[d.Origin], before[d.Origin], f.forwarded[d.Origin]) {
			continue
		}
		enc, err := crdt.EncodeDelta(d)
		if err != nil || size+len(enc)+3 > budget {
			continue // large deltas travel by head + pull only
		}
		encoded = append(encoded, enc)
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
