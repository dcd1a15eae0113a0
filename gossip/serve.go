package gossip

import (
	"log/slog"

	"github.com/hashicorp/memberlist"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// serve answers a sync request with what the requester lacks of the
// requested origins: round-robin across origins (Replica.DeltaSince order),
// chunked into messages of at most SyncChunkBytes, at most SyncMaxBytes in
// total (then More is set and the requester resumes from its new digest).
// Every prefix of the answer is valid to apply.
func (n *Node) serve(m *message) {
	to := n.memberNode(m.Sender)
	if to == nil {
		n.m.syncs.WithLabelValues("server", "unknown_peer").Inc()
		return
	}
	var deltas []crdt.Delta
	if from := n.decide(m, false, m.Sender).serve; from != nil {
		deltas = n.rep.DeltaSince(from, syncEntryBudget)
	}
	n.trace("TR serve", "to", m.Sender, "id", m.ID, "req", len(m.Digest), "deltas", len(deltas))
	a := &syncAnswer{n: n, to: to, id: m.ID}
	if !a.write(deltas, m.Digest) || !a.flush(true) {
		n.m.syncs.WithLabelValues("server", "send_failed").Inc()
		return
	}
	n.m.syncs.WithLabelValues("server", "ok").Inc()
}

// syncAnswer chunks one sync answer into messages.
type syncAnswer struct {
	n        *Node
	to       *memberlist.Node
	id       uint64
	buf      [][]byte
	bufBytes int
	total    int
	sent     int
	more     bool
}

// write queues the deltas of the requested origins, flushing full chunks;
// false when a send failed.
func (a *syncAnswer) write(deltas []crdt.Delta, requested crdt.Digest) bool {
	cfg := &a.n.cfg
	broken := map[string]bool{}
	for _, d := range deltas {
		if _, ok := requested[d.Origin]; !ok || broken[d.Origin] {
			continue
		}
		chunks, err := encodeDeltaChunks(d, cfg.SyncChunkBytes-1024)
		if err != nil {
			// Skipping a delta would leave a gap: stop this origin here.
			broken[d.Origin] = true
			a.n.logRL(slog.LevelError, "cannot encode delta for sync", "origin", d.Origin, "err", err)
			continue
		}
		for _, c := range chunks {
			if a.total > 0 && a.total+len(c) > cfg.SyncMaxBytes {
				a.more = true
				return true
			}
			if len(a.buf) > 0 && (a.bufBytes+len(c)+16 > cfg.SyncChunkBytes || len(a.buf) >= maxDeltasPerMsg) {
				if !a.flush(false) {
					return false
				}
			}
			a.buf = append(a.buf, c)
			a.bufBytes += len(c) + 4
			a.total += len(c)
		}
		a.n.m.deltas.WithLabelValues("out", "sync").Inc()
	}
	return true
}

// flush sends the queued chunks; a single small final message goes by UDP.
func (a *syncAnswer) flush(final bool) bool {
	msg := encodeSyncData(a.n.cfg.NodeName, a.id, uint64(a.sent), final, final && a.more, a.buf)
	a.buf, a.bufBytes = nil, 0
	a.sent++
	if final && a.sent == 1 && len(msg) <= udpBudget {
		return a.n.sendBestEffort(a.to, msg, msgSyncData)
	}
	return a.n.sendReliable(a.to, msg, msgSyncData)
}
