package gossip

import (
	"context"
	"log/slog"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Debug trace of the sync protocol: every message handled, every decision
// taken, every origin a delta advanced, as Debug records whose message
// starts with "TR ". Off unless the node's logger has Debug enabled (one
// Enabled check per call). The heal bench records them
// (COASTGUARD_HEAL_TRACE) to show what a slow heal waited on.

func (n *Node) tracing() bool { return n.log.Enabled(context.Background(), slog.LevelDebug) }

func (n *Node) trace(msg string, args ...any) {
	if n.tracing() {
		n.log.Debug(msg, args...)
	}
}

// traceMsg records a message about to be handled.
func (n *Node) traceMsg(m *message) {
	if n.tracing() {
		n.log.Debug("TR in", "type", m.Type.String(), "from", m.Sender, "reply", m.Reply, "final", m.Final,
			"id", m.ID, "heads", len(m.Heads), "deltas", len(m.Deltas))
	}
}

// traceAdvanced records every origin whose digest an apply on path changed
// (before: the digest before it).
func (n *Node) traceAdvanced(path string, before crdt.Digest) {
	if !n.tracing() {
		return
	}
	for o, a := range n.rep.Digest() {
		if a != before[o] {
			n.log.Debug("TR adv", "path", path, "origin", o, "max", uint64(a.Max), "retired", uint64(a.Retired))
		}
	}
}
