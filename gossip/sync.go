package gossip

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

const (
	fastPullTimeout = 400 * time.Millisecond
	bulkSyncTimeout = 10 * time.Second
	maxBackoff      = 15 * time.Second
	// syncEntryBudget bounds the entries of one sync answer (the maxEntries
	// passed to Replica.DeltaSince, which chunks and round-robins itself).
	syncEntryBudget = 16384
	maxFastPulls    = 256
	quietPeriod     = 1500 * time.Millisecond
	maxQuietSkip    = 1500 * time.Millisecond
)

func (n *Node) worker() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case im := <-n.inbox:
			n.handle(im)
		}
	}
}

func (n *Node) handle(im inMsg) {
	m := im.m
	if m.Sender == n.cfg.NodeName {
		return
	}
	n.traceMsg(m)
	switch m.Type {
	case msgHeads:
		n.onHeads(m)
	case msgPush:
		n.onPush(m)
	case msgForward:
		n.onForward(m)
	case msgSyncReq:
		n.onSyncReq(m)
	case msgSyncData:
		n.onSyncData(m)
	case msgDigest:
		n.onDigest(m, im.state)
	case msgRetire:
		n.onRetire(m)
	case msgDigestSum:
		n.onDigestSum(m)
	case msgCheckpointReq:
		n.onCheckpointReq(m)
	}
}

// decide runs the sync decision (decide.go) for m (nil: the anti-entropy
// tick) against the current digest and clock.
func (n *Node) decide(m *message, state bool, peer string) syncOutput {
	return n.decideAsk(m, state, peer, false)
}

// decideAsk is decide with the tick's ask flag (syncInput.ask).
func (n *Node) decideAsk(m *message, state bool, peer string, ask bool) syncOutput {
	_, alive, _ := n.members.lookup(peer)
	return n.syncs.decide(syncInput{msg: m, state: state, self: n.cfg.NodeName,
		local: n.rep.Digest(), now: n.cfg.Now(), peerKnown: alive, ask: ask})
}

// reply sends what the decision asks for to peer and counts it.
func (n *Node) reply(peer string, out syncOutput) {
	if out.suppressed {
		n.m.syncs.WithLabelValues("digest", "suppressed").Inc()
	}
	if out.send == nil {
		return
	}
	to := n.memberNode(peer)
	if to == nil || !n.send(to, out.send, out.sendType) {
		return
	}
	if out.sendType == msgDigest {
		n.m.syncs.WithLabelValues("digest", "sent").Inc()
	}
}

// onDigestSum: equal sums complete an anti-entropy round; otherwise our
// full digest goes back (decideDigestSum).
func (n *Node) onDigestSum(m *message) {
	out := n.decide(m, false, m.Sender)
	n.trace("TR sum", "from", m.Sender, "match", out.observe != nil, "send", out.send != nil, "suppressed", out.suppressed)
	if out.observe != nil {
		n.observeDigest(m.Sender, out.observe)
	}
	n.reply(m.Sender, out)
}

// isLocalStoreFailure reports whether err is the replica's own storage
// failing (store.CommitError), which is never a peer's fault.
func isLocalStoreFailure(err error) bool {
	var lf interface{ LocalStoreFailure() bool }
	return errors.As(err, &lf) && lf.LocalStoreFailure()
}

// applyDeltas applies deltas (one store transaction when all are valid;
// one by one otherwise so a poison delta cannot block good ones), records
// metrics, and announces every origin whose watermark advanced.
func (n *Node) applyDeltas(ds []crdt.Delta, path string) {
	if len(ds) == 0 {
		return
	}
	before := n.rep.Digest()
	changes, err := n.rep.Apply(ds...)
	applied := len(ds)
	if isLocalStoreFailure(err) {
		// our own disk failed, not the peer: nothing is dropped as invalid;
		// the daemon hands over and anti-entropy re-sends after restart.
		n.logRL(slog.LevelError, "local store refuses writes; deltas not applied", "from", "sync", "path", path, "err", err)
		return
	}
	if err != nil {
		var ok bool
		if changes, applied, ok = n.applyOneByOne(ds, path); !ok {
			return
		}
	}
	n.m.deltas.WithLabelValues("in", path).Add(float64(applied))
	if len(changes) > 0 && path != "sync" {
		// Only fresh deltas (push, forward, pull) are "still spreading by
		// the fast path"; a bulk anti-entropy repair is not, and a peer
		// that lacks what it brought should get our full digest at once
		// (decideSync's quiet-period skip), not after the heads reach it.
		n.syncs.applied(n.cfg.Now())
	} else if len(changes) > 0 {
		n.syncs.repaired(n.cfg.Now()) // the fast path missed it: repair mode
	}
	n.observeLag(changes)
	n.traceAdvanced(path, before)
	n.announceAdvanced(ds, before, path == "push" || path == "forward")
}

// applyOneByOne applies ds one delta at a time, dropping the invalid ones;
// ok=false when the local store refuses writes.
func (n *Node) applyOneByOne(ds []crdt.Delta, path string) (changes []crdt.Change, applied int, ok bool) {
	for _, d := range ds {
		ch, err := n.rep.Apply(d)
		if isLocalStoreFailure(err) {
			n.logRL(slog.LevelError, "local store refuses writes; deltas not applied", "path", path, "err", err)
			return nil, 0, false
		}
		if err != nil {
			n.dropErr(err, "rejected delta", "origin", d.Origin, "from", d.From.String(), "to", d.To.String())
			continue
		}
		applied++
		changes = append(changes, ch...)
	}
	return changes, applied, true
}

// observeLag records the propagation lag of remote changes.
func (n *Node) observeLag(changes []crdt.Change) {
	now := n.cfg.Now().UnixNano()
	for _, ch := range changes {
		if ch.New != nil && ch.New.Stamp > 0 && ch.Key.Origin != n.cfg.ClusterID {
			if lag := now - ch.New.Stamp; lag >= 0 {
				n.m.lag.Observe(float64(lag) / 1e9)
			}
		}
	}
}

// announceAdvanced announces every origin of ds whose digest changed
// since before (lazy: the deltas came by the push tree).
func (n *Node) announceAdvanced(ds []crdt.Delta, before crdt.Digest, lazy bool) {
	after := n.rep.Digest()
	seen := map[string]bool{}
	for _, d := range ds {
		if seen[d.Origin] {
			continue
		}
		seen[d.Origin] = true
		if a, b := after[d.Origin], before[d.Origin]; a.Max != b.Max || a.Retired != b.Retired || a.Hash != b.Hash {
			n.announce(d.Origin, lazy)
		}
	}
}

// onHeads starts a fast pull from the sender for every announced head
// beyond our watermark.
func (n *Node) onHeads(m *message) {
	if m.Beat != nil {
		n.onBeat(m.Beat)
	}
	local := n.rep.Digest()
	now := n.cfg.Now()
	for _, h := range m.Heads {
		od := local[h.Origin]
		if h.Max <= od.Max || h.Max <= od.Retired {
			continue
		}
		s := n.syncs.beginPull(m.Sender, h.Origin, h.Max, now)
		n.trace("TR head", "from", m.Sender, "origin", h.Origin, "max", uint64(h.Max), "pull", s != nil)
		if s == nil {
			continue
		}
		to := n.memberNode(m.Sender)
		if to == nil || !n.sendBestEffort(to, encodeSyncReq(n.cfg.NodeName, s.id, crdt.Digest{h.Origin: od}), msgSyncReq) {
			n.syncs.finish(s.id)
		}
	}
}

func (n *Node) onPush(m *message) {
	cluster, alive, known := n.members.lookup(m.Sender)
	if !known || !alive {
		n.drop(dropUnknownSender, "push from unknown or dead member", "sender", m.Sender)
		return
	}
	ok := make([]crdt.Delta, 0, len(m.Deltas))
	for _, d := range m.Deltas {
		if d.Origin != cluster {
			n.drop(dropOriginMismatch, "pushed delta origin is not the sender's cluster",
				"sender", m.Sender, "sender_cluster", cluster, "origin", d.Origin)
			continue
		}
		ok = append(ok, d)
	}
	before := n.rep.Digest()
	n.applyDeltas(ok, "push")
	n.forwardFresh(m.Sender, ok, before)
}

func (n *Node) onSyncData(m *message) {
	s, ok := n.syncs.accept(m.ID, m.Sender, n.cfg.Now())
	if !ok {
		n.drop(dropUnsolicited, "sync data we did not ask for", "sender", m.Sender, "id", m.ID)
		return
	}
	chunks, how := n.syncs.order(m.ID, m, n.cfg.Now())
	switch how {
	case chunkHeld:
		n.m.syncs.WithLabelValues("requester", "chunk_held").Inc()
	case chunkGap:
		n.m.syncs.WithLabelValues("requester", "chunk_gap").Inc()
	}
	for _, c := range chunks {
		n.applySyncChunk(c, s)
		s.done = s.done || c.Final
	}
}

// applySyncChunk applies one chunk of sync s's answer, in answer order
// (syncer.order).
func (n *Node) applySyncChunk(m *message, s syncState) {
	final := m.Final && !s.done
	if final {
		n.syncs.finalize(m.ID, n.cfg.Now())
	}
	allowed := map[string]bool{}
	for _, o := range s.origins {
		allowed[o] = true
	}
	good := make([]crdt.Delta, 0, len(m.Deltas))
	for _, d := range m.Deltas {
		if !allowed[d.Origin] {
			n.drop(dropUnsolicited, "sync data for an origin we did not ask for", "sender", m.Sender, "origin", d.Origin)
			continue
		}
		good = append(good, d)
	}
	path := "sync"
	if s.fast {
		path = "pull"
	} else {
		good = n.alignSync(lateAsFinal(m, s.done), good)
	}
	before := n.rep.Digest()
	n.applyDeltas(good, path)
	if s.fast {
		n.forwardFresh(m.Sender, good, before)
	} else if len(s.owned) > 0 {
		n.syncs.progress(m.ID, versionsGained(before, n.rep.Digest(), s.owned), n.cfg.Now())
	}
	if final {
		n.syncDone(m, s)
	}
}

// lateAsFinal is m as alignSync must see it: a chunk that arrived after its
// answer's final one (late) ends nothing, but nothing of the answer follows
// it either, so none of it may be held back for a next chunk.
func lateAsFinal(m *message, late bool) *message {
	if !late {
		return m
	}
	c := *m
	c.Final = true
	return &c
}

// syncDone records a completed sync and resumes a bulk one the peer cut
// short (More).
func (n *Node) syncDone(m *message, s syncState) {
	role := "requester"
	if s.fast {
		role = "pull"
	}
	n.m.syncs.WithLabelValues(role, "ok").Inc()
	n.syncs.succeeded(m.Sender)
	if m.More && !s.fast {
		owned := make(map[string]bool, len(s.owned))
		for _, o := range s.owned {
			owned[o] = true
		}
		n.startSync(m.Sender, s.origins, n.rep.Digest(), func(o string) bool { return owned[o] }, true)
	}
}

// needs reports whether a peer whose digest of an origin is rd holds
// something we (ld; present=false when we know nothing of the origin) lack.
func needs(ld crdt.OriginDigest, present bool, rd crdt.OriginDigest) bool {
	return crdt.OriginBehind(ld, present, rd)
}

// observeDigest hands a digest that a member holds to Config.OnDigest,
// naming the member's cluster.
func (n *Node) observeDigest(sender string, d crdt.Digest) {
	if n.cfg.OnDigest == nil {
		return
	}
	if cluster, _, known := n.members.lookup(sender); known {
		n.cfg.OnDigest(cluster, d)
	}
}

func (n *Node) onDigest(m *message, state bool) {
	n.retireFromDigest(m.Digest)
	out := n.decide(m, state, m.Sender)
	n.trace("TR dig", "from", m.Sender, "state", state, "reply", m.Reply, "pull", len(out.pull), "send", out.send != nil, "suppressed", out.suppressed)
	if len(out.pull) > 0 {
		origins := make([]string, 0, len(out.pull))
		for o := range out.pull {
			origins = append(origins, o)
		}
		n.askCheckpoints(m.Digest, out.pull)
		n.startSync(m.Sender, origins, out.pull, manyBehind(out.pull, m.Digest), false)
	}
	n.observeDigest(m.Sender, out.observe)
	n.reply(m.Sender, out)
}

// retireFromDigest applies the retirement watermarks a digest carries
// (anti-entropy for Retire). With signatures on, a signed retirement
// arrives by pull (Behind sees the higher Retired); an unsigned one is
// applied only where our own membership view agrees.
func (n *Node) retireFromDigest(rd crdt.Digest) {
	local := n.rep.Digest()
	for o, r := range rd {
		if r.Retired > local[o].Retired && (n.cfg.Trust == nil || n.mayRetire(o)) {
			n.applyRetire(crdt.Retire{Origin: o, UpTo: r.Retired}, false)
		}
	}
}

// manyBehind reports the origins whose catch-up is large: remote (a
// peer's digest) holds at least bulkOwnMin more versions of them than local
// (our digest; absent: nothing). Versions the remote has retired carry no
// entries and are not counted: every origin's digest retires its previous
// epoch whole (Retired = the top of that epoch), so an origin we know
// nothing of is small while it is. (Counting from zero made every origin
// look huge at first contact, so at N = 300 a handful of peers owned the
// catch-up of every origin and the mesh collapsed.)
func manyBehind(local, remote crdt.Digest) func(string) bool {
	return func(o string) bool {
		r := remote[o]
		return versionsAfter(max(local[o].Max, r.Retired), r.Max) >= bulkOwnMin
	}
}

// versionsAfter counts the versions in (from, to]: none when to is not
// newer, and a newer epoch's from its start.
func versionsAfter(from, to crdt.Version) uint64 {
	switch {
	case to <= from:
		return 0
	case to.Epoch() != from.Epoch():
		return to.Seq()
	}
	return to.Seq() - from.Seq()
}

// versionsGained sums what after holds of origins beyond before: the
// progress a bulk sync made (syncer.progress). Progress is Max, or the
// digest's Reset when further: a stream received but not proven yet (a
// reset session, or a verifying replica waiting for the origin's state
// mark at the stream's end) is progress too.
func versionsGained(before, after crdt.Digest, origins []string) uint64 {
	var n uint64
	for _, o := range origins {
		n += versionsAfter(streamProgress(before[o]), streamProgress(after[o]))
	}
	return n
}

func streamProgress(d crdt.OriginDigest) crdt.Version { return max(d.Max, d.Reset) }

// startSync asks peer for what we lack of origins (bulk anti-entropy pull);
// local holds our digest of (at least) those origins, and big the origins
// far enough behind to be owned (syncer.beginBulk).
func (n *Node) startSync(peer string, origins []string, local crdt.Digest, big func(string) bool, resume bool) {
	s, res := n.syncs.beginBulk(peer, origins, big, n.cfg.Now(), resume)
	n.trace("TR bulk", "peer", peer, "origins", len(origins), "res", int(res), "resume", resume)
	switch res {
	case bulkThrottled:
		n.m.syncs.WithLabelValues("requester", "throttled").Inc()
		return
	case bulkSkipped:
		return
	}
	want := make(crdt.Digest, len(s.origins))
	for _, o := range s.origins {
		want[o] = local[o]
	}
	to := n.memberNode(peer)
	if to == nil || !n.send(to, encodeSyncReq(n.cfg.NodeName, s.id, want), msgSyncReq) {
		n.syncs.finish(s.id)
		n.syncs.fail(peer, n.cfg.Now())
		return
	}
	n.m.syncs.WithLabelValues("requester", "started").Inc()
}

func (n *Node) onSyncReq(m *message) {
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
		n.serve(m)
	}()
}

func (n *Node) onRetire(m *message) {
	for _, r := range m.Retires {
		n.applyRetire(r, true)
	}
}

// retireLog is how an applied retirement is logged. A takeover's seal
// (told by its shape: it ends exactly at an epoch's end) is routine, ours
// included: every standby of this cluster applies its own leader's. Only
// an unsigned retirement of our own cluster is an error: the mesh gave up
// on it (partitioned past the reconnect timeout) and the writer must go
// on at a higher epoch.
func retireLog(self string, r crdt.Retire) (slog.Level, string) {
	switch {
	case r.UpTo.EpochEnd():
		return slog.LevelInfo, "earlier writer epochs sealed (a takeover)"
	case r.Origin == self && r.Sig == nil:
		return slog.LevelError, "own cluster was retired by the mesh; the writer must continue at a higher epoch"
	case r.Origin == self:
		return slog.LevelInfo, "own cluster retired by its own signed record (decommission)"
	default:
		return slog.LevelInfo, "cluster retired"
	}
}

// applyRetire applies a retirement if it is news and re-gossips it.
func (n *Node) applyRetire(r crdt.Retire, rebroadcast bool) bool {
	if r.UpTo == 0 {
		return false
	}
	if n.rep.Digest()[r.Origin].Retired >= r.UpTo {
		return false
	}
	if _, err := n.rep.ApplyRetire(r); err != nil {
		n.dropErr(err, "rejected retire", "origin", r.Origin, "upto", r.UpTo.String())
		return false
	}
	level, msg := retireLog(n.cfg.ClusterID, r)
	n.log.Log(context.Background(), level, msg, "origin", r.Origin, "upto", r.UpTo.String(), "signed", r.Sig != nil)
	if rebroadcast {
		n.broadcastRetire(r)
	}
	return true
}
