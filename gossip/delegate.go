package gossip

import (
	"log/slog"
	"strings"

	"github.com/hashicorp/memberlist"
)

// Node metadata (memberlist NodeMeta, ≤ 512 bytes), version 1 (version 2,
// signed by the cluster's key, appends an auth trailer: meta.go):
//
//	version u8 (1) | flags u8 (bit0 writer, bit1 leaving) | cluster: uvarint len + bytes
//	[| build version: uvarint len + bytes]
//
// The trailing build version (coastguardd's, for skew reporting) is optional:
// older daemons neither send nor read it.
// The leaving flag is set (and gossiped with UpdateNode) right before a
// graceful Leave: memberlist's NotifyLeave does not say whether a node left
// or died, and only dead members are rejoined.
const metaVersion = 1

const (
	metaWriter  = 1
	metaLeaving = 2
)

// encodeMeta encodes version 1 (unsigned) metadata: what a daemon without
// a signing key (--insecure-gossip) announces. Signed daemons announce
// version 2 (meta.go).
func encodeMeta(cluster, build string, writer, leaving bool) []byte {
	b := wbuf{metaVersion, metaFlags(writer, leaving)}
	b.str(cluster)
	if build != "" {
		b.str(build)
	}
	return b
}

// maxBuildLen bounds the build version read from a peer's metadata.
const maxBuildLen = 64

func decodeMeta(p []byte) (cluster, build string, flags byte, err error) {
	m, err := parseMeta(p)
	if err != nil {
		return "", "", 0, err
	}
	return m.cluster, m.build, m.flags, nil
}

// delegate implements memberlist.Delegate.
type delegate Node

func (d *delegate) NodeMeta(limit int) []byte {
	n := (*Node)(d)
	w, l := n.members.selfFlags()
	b := encodeSignedMeta(n.cfg.NodeName, n.cfg.ClusterID, n.cfg.BuildVersion, w, l, n.cfg.Signer, limit)
	if len(b) > limit {
		return nil
	}
	return b
}

func (d *delegate) NotifyMsg(p []byte) {
	n := (*Node)(d)
	n.receive(p, false)
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	n := (*Node)(d)
	msgs := n.queue.GetBroadcasts(overhead, limit)
	used := 0
	for _, m := range msgs {
		used += overhead + len(m)
	}
	if limit-used > overhead {
		msgs = append(msgs, n.lazy.GetBroadcasts(overhead, limit-used)...)
	}
	for _, m := range msgs {
		if len(m) > 0 {
			n.countOut(len(m), msgType(m[0]))
		}
	}
	return msgs
}

// LocalState carries only our digest (O(clusters)), never entries.
func (d *delegate) LocalState(join bool) []byte {
	n := (*Node)(d)
	b := encodeDigestMsg(n.cfg.NodeName, true, n.rep.Digest())
	if len(b) > MaxMessageBytes {
		n.logRL(slog.LevelError, "digest exceeds MaxMessageBytes; not sent in push/pull", "bytes", len(b))
		return nil
	}
	n.countOut(len(b), msgDigest)
	return b
}

func (d *delegate) MergeRemoteState(p []byte, join bool) {
	n := (*Node)(d)
	if len(p) == 0 {
		return
	}
	n.receive(p, true)
}

// receive decodes, validates, rate-limits and enqueues one message. It runs
// on memberlist goroutines and never blocks.
func (n *Node) receive(p []byte, state bool) {
	n.m.bytes.WithLabelValues("in").Add(float64(len(p)))
	n.statBytesIn.Add(int64(len(p)))
	if len(p) > MaxMessageBytes {
		n.drop(dropOversize, "dropping oversized message", "bytes", len(p))
		return
	}
	if len(p) > 0 && (p[0] < byte(msgHeads) || p[0] > byte(msgForward)) && !isCheckpointMsg(p[0]) {
		n.drop(dropUnknownType, "dropping message of unknown type", "type", p[0], "bytes", len(p))
		return
	}
	m, err := decodeMessage(p)
	if err != nil {
		n.drop(dropDecode, "dropping undecodable message", "err", err, "bytes", len(p))
		return
	}
	if state && m.Type != msgDigest {
		n.drop(dropDecode, "push/pull state is not a digest", "type", m.Type.String())
		return
	}
	n.m.messages.WithLabelValues("in", m.Type.String()).Inc()
	if !n.limits.allow(m.Sender) {
		n.drop(dropRateLimited, "sender over rate limit", "sender", m.Sender)
		return
	}
	if m.Type == msgCheckpoint {
		n.onCheckpoint(m) // ahead of the sync data queued in the inbox
		return
	}
	n.enqueue(inMsg{m: m, size: len(p), state: state})
}

// enqueue hands im to the worker, dropping it when the inbox is full.
func (n *Node) enqueue(im inMsg) {
	select {
	case n.inbox <- im:
	case <-n.stop:
	default:
		n.drop(dropQueueFull, "inbox full", "sender", im.m.Sender, "type", im.m.Type.String())
	}
}

// events implements memberlist.EventDelegate.
type events Node

func (e *events) NotifyJoin(mn *memberlist.Node) {
	n := (*Node)(e)
	n.observe(mn, true)
}

func (e *events) NotifyLeave(mn *memberlist.Node) {
	n := (*Node)(e)
	n.observe(mn, false)
}

func (e *events) NotifyUpdate(mn *memberlist.Node) {
	n := (*Node)(e)
	n.observe(mn, true)
}

func (n *Node) observe(mn *memberlist.Node, alive bool) {
	cluster, build, flags, err := decodeMeta(mn.Meta)
	if err != nil {
		n.logRL(slog.LevelWarn, "member with undecodable meta", "member", mn.Name, "err", err)
	}
	n.members.observe(mn, cluster, build, flags, alive, n.cfg.Now())
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
func trimNL(s string) string { return strings.TrimRight(s, "\r\n") }
