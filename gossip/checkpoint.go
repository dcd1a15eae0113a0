package gossip

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
)

// Checkpoints for a fast join (crdt/checkpoint.go, docs/GOSSIP.md). A node
// that starts a bulk sync for an origin it is far behind on asks that
// origin's writer (any alive member of its cluster flagged writer) for a
// signed checkpoint; the writer answers from a cached one. The Replica
// verifies it once and then skips per-entry signature verification for
// sync deltas that are exactly one of its segments. Bulk sync data is
// re-cut at the segment bounds here, the stream's tail held from one
// message of an answer to the next. Without an answer (the origin
// unreachable, an old writer) the join verifies every entry, as before.

const (
	// checkpointFarBehind is how many versions an origin must be ahead of
	// us before we ask for its checkpoint.
	checkpointFarBehind = 4 * crdt.SegmentEntries
	// checkpointAskEvery spaces out requests for one origin; an answer is
	// accepted for this long after the request.
	checkpointAskEvery = 30 * time.Second
	// checkpointRebuild is the least time between two checkpoints the
	// writer builds (each hashes its whole state).
	checkpointRebuild = 5 * time.Second
	// maxCarried bounds the sync answers whose tail is held at once.
	maxCarried = 64
	maxAsked   = 4096
)

// carried is what one bulk sync answer leaves for its next message: the
// tail held back, and the origins the answer advanced so far.
type carried struct {
	deltas     []crdt.Delta
	progressed map[string]bool
	at         time.Time
}

// checkpoints is the checkpoint concern of a Node, under its own lock.
type checkpoints struct {
	mu      sync.Mutex
	asked   map[string]time.Time // origin -> when we last asked its writer
	carry   map[uint64]carried   // bulk sync id -> tail held for the next message
	built   *crdt.Checkpoint     // the writer's cached checkpoint
	builtAt time.Time

	buildMu sync.Mutex // one build at a time
	events  *prometheus.CounterVec
	segHits prometheus.CounterFunc
}

func newCheckpoints(reg prometheus.Registerer, rep Replica) (*checkpoints, error) {
	c := &checkpoints{asked: map[string]time.Time{}, carry: map[uint64]carried{},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_gossip_checkpoints_total",
			Help: "Origin checkpoints for fast joins by event (requested, served, accepted, refused, unsolicited, unavailable).",
		}, []string{"event"})}
	errs := []error{metricsreg.Into(reg, &c.events)}
	stat := func(name, help string, get func(crdt.CheckpointStats) uint64) prometheus.CounterFunc {
		f := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(get(rep.CheckpointStats())) })
		errs = append(errs, metricsreg.Into(reg, &f))
		return f
	}
	c.segHits = stat("coastguard_gossip_checkpoint_segment_hits_total",
		"Deltas that matched a segment of their origin's checkpoint (entries not verified one by one).",
		func(s crdt.CheckpointStats) uint64 { return s.Hits })
	stat("coastguard_gossip_checkpoint_segment_misses_total",
		"Deltas of an origin with a checkpoint that matched none of its segments (verified entry by entry).",
		func(s crdt.CheckpointStats) uint64 { return s.Misses })
	stat("coastguard_gossip_checkpoint_skipped_verifications_total",
		"Entry signature verifications a checkpoint made unnecessary.",
		func(s crdt.CheckpointStats) uint64 { return s.SkippedVerifies })
	return c, errors.Join(errs...)
}

// farBehind reports whether remote holds many more versions of an origin
// than local (a join, or a long absence); an origin we hold nothing of is
// far behind whatever its size (manyBehind counts its current epoch).
func farBehind(local, remote crdt.OriginDigest) bool {
	if local.Max == 0 && remote.Max.Epoch() != 0 {
		return true
	}
	return versionsAfter(local.Max, remote.Max) >= checkpointFarBehind
}

// askCheckpoints asks the writers of the origins we are about to pull and
// are far behind on for their checkpoints. remote is the digest we pull
// against, pull our digests of the origins we pull.
func (n *Node) askCheckpoints(remote, pull crdt.Digest) {
	if n.cfg.Trust == nil {
		return
	}
	now := n.cfg.Now()
	for o, local := range pull {
		r := remote[o]
		if o == n.cfg.ClusterID || !farBehind(local, r) || n.rep.CheckpointMax(o) > local.Max {
			continue
		}
		to := n.members.writerOf(o)
		if to == nil || !n.cps.mayAsk(o, now) {
			continue
		}
		if n.sendReliable(to, encodeCheckpointReq(n.cfg.NodeName, o), msgCheckpointReq) {
			n.cps.events.WithLabelValues("requested").Inc()
		}
	}
}

func (c *checkpoints) mayAsk(origin string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.asked[origin]; ok && now.Sub(at) < checkpointAskEvery {
		return false
	}
	if len(c.asked) >= maxAsked {
		c.asked = map[string]time.Time{}
	}
	c.asked[origin] = now
	return true
}

// wasAsked reports whether we asked for origin's checkpoint recently.
func (c *checkpoints) wasAsked(origin string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.asked[origin]
	return ok && now.Sub(at) < checkpointAskEvery
}

// writerOf returns an alive member of cluster flagged writer, or nil.
func (ms *members) writerOf(cluster string) *memberlist.Node {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for name, m := range ms.table {
		if name != ms.self && m.Alive && m.Writer && m.Cluster == cluster && m.node != nil {
			return m.node
		}
	}
	return nil
}

// onCheckpointReq answers a request for our own origin's checkpoint, if we
// are its writer, off the worker goroutine (building one hashes the state).
func (n *Node) onCheckpointReq(m *message) {
	if m.Origin != n.cfg.ClusterID || !n.cfg.IsWriter() {
		n.cps.events.WithLabelValues("unavailable").Inc()
		return
	}
	select {
	case n.serveSem <- struct{}{}:
	default:
		n.m.syncs.WithLabelValues("server", "busy").Inc()
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-n.serveSem }()
		cp, err := n.cps.current(n.rep, n.rep.Digest()[n.cfg.ClusterID].Max, n.cfg.Now())
		to := n.awaitMember(m.Sender)
		if err != nil || to == nil {
			n.cps.events.WithLabelValues("unavailable").Inc()
			return
		}
		if n.sendReliable(to, encodeCheckpoint(n.cfg.NodeName, cp), msgCheckpoint) {
			n.cps.events.WithLabelValues("served").Inc()
		}
	}()
}

// current returns the cached checkpoint, rebuilt when our Max moved and
// the cached one is older than checkpointRebuild.
func (c *checkpoints) current(cr Replica, max crdt.Version, now time.Time) (*crdt.Checkpoint, error) {
	c.buildMu.Lock()
	defer c.buildMu.Unlock()
	c.mu.Lock()
	cp, at := c.built, c.builtAt
	c.mu.Unlock()
	if cp != nil && (cp.Max == max || now.Sub(at) < checkpointRebuild) {
		return cp, nil
	}
	fresh, err := cr.MakeCheckpoint()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.built, c.builtAt = &fresh, now
	c.mu.Unlock()
	return &fresh, nil
}

// onCheckpoint hands a checkpoint we asked for to the Replica, which
// verifies its signature. It runs on the receiving goroutine, not the
// worker: the sync data queued in the inbox behind it benefits at once.
func (n *Node) onCheckpoint(m *message) {
	cp := m.Checkpoint
	if cp == nil || !n.cps.wasAsked(cp.Origin, n.cfg.Now()) {
		n.cps.events.WithLabelValues("unsolicited").Inc()
		n.drop(dropUnsolicited, "checkpoint we did not ask for", "sender", m.Sender)
		return
	}
	if err := n.rep.AcceptCheckpoint(*cp); err != nil {
		n.cps.events.WithLabelValues("refused").Inc()
		n.dropErr(err, "refused checkpoint", "sender", m.Sender, "origin", cp.Origin)
		return
	}
	n.cps.events.WithLabelValues("accepted").Inc()
	n.logRL(slog.LevelDebug, "checkpoint accepted", "origin", cp.Origin, "max", cp.Max.String(), "segments", len(cp.Bounds))
}

// alignSync re-cuts the deltas of one bulk sync message at the checkpoint
// segment bounds, with the tail held from the answer's previous message;
// it returns what to apply now. At the end of the answer, an origin's tail
// inside a segment is dropped when the answer advanced that origin to a
// segment bound: the answer is then treated as capped (More), and the
// resumed pull starts at our new watermark, a segment bound, so the
// segment arrives whole. (Senders cut answers by budget, not at segment
// bounds.) A tail with no progress before it is applied as it is, so a
// sender that holds less than the checkpoint cannot stall us.
func (n *Node) alignSync(m *message, ds []crdt.Delta) []crdt.Delta {
	now := n.cfg.Now()
	c := n.cps.take(m.ID, now)
	ready, held := n.rep.SplitAtCheckpoints(append(c.deltas, ds...), false)
	if c.progressed == nil {
		c.progressed = map[string]bool{}
	}
	for _, d := range ready {
		c.progressed[d.Origin] = true
	}
	if !m.Final {
		c.deltas, c.at = held, now
		if !n.cps.hold(m.ID, c) {
			ready = append(ready, held...)
		}
		return ready
	}
	for _, d := range held {
		if c.progressed[d.Origin] {
			m.More = true
			continue
		}
		ready = append(ready, d)
	}
	return ready
}

func (c *checkpoints) take(id uint64, now time.Time) carried {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, h := range c.carry {
		if now.Sub(h.at) > 2*bulkSyncTimeout {
			delete(c.carry, k) // an answer that never finished
		}
	}
	h := c.carry[id]
	delete(c.carry, id)
	return h
}

// hold keeps a sync answer's tail and progress for its next message; false
// when too many answers are held already (the caller applies the tail now).
func (c *checkpoints) hold(id uint64, h carried) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.carry) >= maxCarried {
		return false
	}
	c.carry[id] = h
	return true
}

// awaitMember returns the alive member name, waiting a little for a joiner
// that asked before our membership heard of it.
func (n *Node) awaitMember(name string) *memberlist.Node {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for range 60 {
		if to := n.memberNode(name); to != nil {
			return to
		}
		select {
		case <-n.stop:
			return nil
		case <-t.C:
		}
	}
	return nil
}
