package gossip

import (
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// syncState is an outstanding pull (fast: triggered by a head; bulk:
// anti-entropy catch-up).
type syncState struct {
	id       uint64
	peer     string
	fast     bool
	origins  []string
	target   crdt.Version // fast pulls: the announced head
	deadline time.Time
	// owned: the origins of a bulk sync that no other bulk sync pulls
	// meanwhile (bulkOrigins). progressAt: when its owned origins last
	// advanced by ownerStep versions (gained: toward the next step).
	owned      []string
	progressAt time.Time
	gained     uint64
	// done: the answer's final chunk arrived; the sync only lingers (until
	// deadline) to take chunks that arrive after it (see finalize).
	done bool
	// next: the Seq of the chunk to apply next; held: later chunks that
	// arrived before it (order), since heldSince.
	next      uint64
	held      map[uint64]*message
	heldSince time.Time
}

// chunkOrder is what order did with a chunk.
type chunkOrder int

const (
	chunkApplied chunkOrder = iota // applied (with the held ones it releases)
	chunkHeld                      // an earlier chunk is still in flight
	chunkGap                       // applied across a gap (maxHeldChunks)
)

const (
	// bulkOwnMin is how far behind (in versions) an origin must be for its
	// bulk pull to be owned by one sync: a catch-up that large (a join, a
	// restart) is pulled from one peer at a time, since a second peer's
	// answer would carry the same entries again (a joining node once pulled
	// its whole set from up to four peers at once). A smaller repair is
	// never held back by another sync.
	bulkOwnMin = checkpointFarBehind
	// ownerStall, ownerStep: an owning sync whose owned origins did not
	// advance by ownerStep versions within ownerStall (its server is busy or
	// gone, or trickles chunks, or replays entries we hold) no longer keeps
	// other peers from serving them; it may still finish. A healthy join
	// advances by tens of thousands of versions a second.
	ownerStall = 2 * time.Second
	ownerStep  = 512
	// maxHeldChunks bounds the chunks of one answer held while an earlier
	// one is in flight (each up to SyncChunkBytes); past it they are
	// applied out of order, as from a sender without Seq. So are chunks
	// held for chunkHoldMax (releaseStale): the one they wait for was lost
	// (our inbound queue was full, a stream was refused).
	maxHeldChunks = 8
	chunkHoldMax  = time.Second
	// syncLinger is how long a sync whose final chunk arrived still accepts
	// its other chunks. Every chunk of an answer travels on its own stream,
	// so the final one can overtake others; a chunk refused as unsolicited
	// would leave a gap for the next anti-entropy round to close (a 1 M
	// entry join spent its last 1-2 s doing that).
	syncLinger = time.Second
)

type backoff struct {
	failures int
	until    time.Time
}

// syncer is the sync concern of a Node: the pulls in flight (fast ones per
// origin, bulk ones per peer), the per-peer failure backoff, and the
// anti-entropy pacing and full-digest budget the sync decision reads. It
// has its own lock and does no I/O.
type syncer struct {
	maxBulk int

	mu         sync.Mutex
	syncs      map[uint64]*syncState
	pulls      map[string]uint64 // origin -> fast pull id in flight
	bulkByPeer map[string]uint64
	// bulkOrigins: origin -> the bulk sync that owns its catch-up.
	bulkOrigins map[string]uint64
	backoffs    map[string]*backoff
	nextID      uint64
	closed      bool
	pace        pacing
	digestLim   *rate.Limiter // full-digest byte budget (antientropy.go)
	repairLim   *rate.Limiter // its share for repair-mode ticks
	// wakeAE wakes the anti-entropy loop when repair mode begins
	// (and on WakeAntiEntropy).
	wakeAE chan struct{}
}

func newSyncer(maxBulk int) *syncer {
	return &syncer{maxBulk: maxBulk, syncs: map[uint64]*syncState{}, pulls: map[string]uint64{},
		bulkByPeer: map[string]uint64{}, bulkOrigins: map[string]uint64{}, backoffs: map[string]*backoff{},
		nextID: rand.Uint64() >> 1, digestLim: newDigestLimiter(),
		repairLim: newRepairDigestLimiter(), wakeAE: make(chan struct{}, 1)}
}

// decide runs the pure sync decision against the pacing state and budget.
func (s *syncer) decide(in syncInput) syncOutput {
	s.mu.Lock()
	defer s.mu.Unlock()
	in.pace, in.repairBudget = s.pace, s.repairLim
	out := decideSync(in, s.digestLim)
	s.pace = out.pace
	return out
}

// applied records that a delta changed the local replica at now.
func (s *syncer) applied(now time.Time) {
	s.mu.Lock()
	s.pace.lastApply = now
	s.mu.Unlock()
}

// repaired records that a bulk anti-entropy sync changed the local replica
// at now: repair mode (decide.go) until now+repairWindow.
func (s *syncer) repaired(now time.Time) {
	s.mu.Lock()
	started := !s.pace.repairing(now)
	s.pace.repairUntil = now.Add(repairWindow)
	s.mu.Unlock()
	if started {
		s.wake()
	}
}

// wake runs an anti-entropy round at once (the loop takes at most one
// pending wake).
func (s *syncer) wake() {
	select {
	case s.wakeAE <- struct{}{}:
	default:
	}
}

// tickEvery is the anti-entropy tick interval at now (antiEntropyEvery).
func (s *syncer) tickEvery(base time.Duration, now time.Time, asking bool) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return antiEntropyEvery(base, s.pace, now, asking)
}

// close refuses new pulls (the node is shutting down).
func (s *syncer) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// beginPull starts a fast pull of origin up to target from peer, unless
// one reaching target is already in flight, too many are, or the syncer is
// closed (nil).
func (s *syncer) beginPull(peer, origin string, target crdt.Version, now time.Time) *syncState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.pulls[origin]; ok {
		if cur := s.syncs[id]; cur != nil && cur.target >= target && now.Before(cur.deadline) {
			return nil
		}
	}
	if len(s.pulls) >= maxFastPulls || s.closed {
		return nil
	}
	s.nextID++
	st := &syncState{id: s.nextID, peer: peer, fast: true, origins: []string{origin},
		target: target, deadline: now.Add(fastPullTimeout)}
	s.syncs[st.id] = st
	s.pulls[origin] = st.id
	return st
}

// bulkStart is the outcome of beginBulk.
type bulkStart int

const (
	bulkStarted   bulkStart = iota
	bulkSkipped             // closed, one in flight with the peer, or backing off
	bulkThrottled           // MaxConcurrentSyncs reached
)

// beginBulk starts a bulk pull of origins from peer. big reports the
// origins far enough behind to be owned (bulkOwnMin): those another sync
// owns are left out, and when many are (at least 2·maxBulk: a join, not a
// heal) one sync takes a maxBulk-th of them (rounded up), so that the next
// peer whose digest shows the rest serves them at the same time. (A share
// counted over the owned origins too, which spreads a 10-origin join over
// 4 peers instead of 2, was slower on the 2-core bench, 18.4 s against
// 15.6-17.6 s: the join is CPU-bound there.) The other origins are always
// asked for. bulkSkipped when nothing is left to ask. A resumed sync (the
// peer said More) ignores the peer's backoff.
func (s *syncer) beginBulk(peer string, origins []string, big func(string) bool, now time.Time, resume bool) (*syncState, bulkStart) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, bulkSkipped
	}
	if _, busy := s.bulkByPeer[peer]; busy {
		return nil, bulkSkipped
	}
	if len(s.bulkByPeer) >= s.maxBulk {
		return nil, bulkThrottled
	}
	if b := s.backoffs[peer]; b != nil && now.Before(b.until) && !resume {
		return nil, bulkSkipped
	}
	var ask, own []string
	for _, o := range origins {
		switch {
		case big == nil || !big(o):
			ask = append(ask, o)
		case !s.ownedLocked(o, now):
			own = append(own, o)
		}
	}
	if s.maxBulk > 1 && len(own) >= 2*s.maxBulk {
		own = own[:(len(own)+s.maxBulk-1)/s.maxBulk]
	}
	if len(ask)+len(own) == 0 {
		return nil, bulkSkipped
	}
	s.nextID++
	st := &syncState{id: s.nextID, peer: peer, origins: append(ask, own...), owned: own,
		deadline: now.Add(bulkSyncTimeout), progressAt: now}
	s.syncs[st.id] = st
	s.bulkByPeer[peer] = st.id
	for _, o := range own {
		s.bulkOrigins[o] = st.id
	}
	return st, bulkStarted
}

// ownedLocked reports whether a live bulk sync owns origin o at now; an
// owner that made too little progress (ownerStall) loses it.
func (s *syncer) ownedLocked(o string, now time.Time) bool {
	id, ok := s.bulkOrigins[o]
	if !ok {
		return false
	}
	if st := s.syncs[id]; st != nil && !st.done && now.Sub(st.progressAt) < ownerStall {
		return true
	}
	delete(s.bulkOrigins, o)
	return false
}

// finish ends sync id (nil if it is not in flight).
func (s *syncer) finish(id uint64) *syncState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[id]
	if st != nil {
		s.removeLocked(st)
	}
	return st
}

// finalize ends sync id on its final chunk: it no longer blocks a new sync
// of its origins or with its peer, yet accepts late chunks for
// syncLinger. It returns the sync (nil if it is not in flight or already
// finalized).
func (s *syncer) finalize(id uint64, now time.Time) *syncState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[id]
	if st == nil || st.done {
		return nil
	}
	s.unindexLocked(st)
	st.done, st.deadline = true, now.Add(syncLinger)
	return st
}

func (s *syncer) removeLocked(st *syncState) {
	delete(s.syncs, st.id)
	s.unindexLocked(st)
}

// unindexLocked forgets st as the pull of its origins, the bulk sync with
// its peer, and the owner of its origins.
func (s *syncer) unindexLocked(st *syncState) {
	if st.fast {
		for _, o := range st.origins {
			if s.pulls[o] == st.id {
				delete(s.pulls, o)
			}
		}
		return
	}
	if s.bulkByPeer[st.peer] == st.id {
		delete(s.bulkByPeer, st.peer)
	}
	for _, o := range st.owned {
		if s.bulkOrigins[o] == st.id {
			delete(s.bulkOrigins, o)
		}
	}
}

// accept checks that sync data for id from sender was asked for and
// extends its deadline; it returns a copy of the sync (ok=false: unsolicited).
func (s *syncer) accept(id uint64, sender string, now time.Time) (syncState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[id]
	if st == nil || st.peer != sender || (st.done && !now.Before(st.deadline)) {
		return syncState{}, false
	}
	if !st.done {
		st.deadline = now.Add(bulkSyncTimeout)
	}
	return *st, true
}

// progress records that sync id's chunk advanced its owned origins by
// gained versions (versionsGained); data that advances nothing (a replay,
// a trickle) does not keep the sync the owner.
func (s *syncer) progress(id uint64, gained uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[id]
	if st == nil {
		return
	}
	st.gained += gained
	if st.gained >= ownerStep {
		st.gained, st.progressAt = 0, now
	}
}

// order returns the chunks of sync id to apply now, in answer order, given
// that m (accepted) arrived: m and the held chunks that follow it when m is
// the next one, nothing when an earlier one is still in flight (m is
// held). Every chunk travels on its own stream, so a later one can
// overtake an earlier one; applied out of order, it splits checkpoint
// segments (verified entry by entry) and leaves a gap in the watermark
// that a later round re-pulls. A chunk without Seq, a duplicate, or a
// chunk past maxHeldChunks is applied at once (with the held ones).
func (s *syncer) order(id uint64, m *message, now time.Time) ([]*message, chunkOrder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[id]
	if st == nil || m.Seq == 0 || m.Seq < st.next {
		return []*message{m}, chunkApplied
	}
	if st.next == 0 {
		st.next = 1
	}
	if m.Seq > st.next && len(st.held) < maxHeldChunks {
		if len(st.held) == 0 {
			st.held, st.heldSince = map[uint64]*message{}, now
		}
		st.held[m.Seq] = m
		return nil, chunkHeld
	}
	if m.Seq > st.next { // too many ahead: the earlier chunk is lost or stalled
		st.held[m.Seq] = m
		return st.releaseHeld(), chunkGap
	}
	out := []*message{m}
	for st.next++; st.held[st.next] != nil; st.next++ {
		out = append(out, st.held[st.next])
		delete(st.held, st.next)
	}
	if len(out) > 1 && len(st.held) > 0 {
		st.heldSince = now // the rest wait for another chunk, from now
	}
	return out, chunkApplied
}

// releaseHeld returns the held chunks in order and moves next past them.
func (st *syncState) releaseHeld() []*message {
	seqs := slices.Sorted(maps.Keys(st.held))
	out := make([]*message, 0, len(seqs))
	for _, q := range seqs {
		out = append(out, st.held[q])
	}
	st.held, st.next = nil, seqs[len(seqs)-1]+1
	return out
}

// releaseStale returns the chunks held for chunkHoldMax or longer (the
// chunk they wait for was lost), in order; handed to the worker again,
// order applies them at once.
func (s *syncer) releaseStale(now time.Time) []*message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*message
	for _, st := range s.syncs {
		if len(st.held) > 0 && now.Sub(st.heldSince) >= chunkHoldMax {
			out = append(out, st.releaseHeld()...)
		}
	}
	return out
}

// succeeded clears peer's backoff.
func (s *syncer) succeeded(peer string) {
	s.mu.Lock()
	delete(s.backoffs, peer)
	s.mu.Unlock()
}

// fail backs off from peer: 1s doubling per failure up to maxBackoff, with
// jitter in [d/2, d).
func (s *syncer) fail(peer string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.backoffs[peer]
	if b == nil {
		b = &backoff{}
		s.backoffs[peer] = b
	}
	b.failures++
	d := time.Second << min(b.failures-1, 4)
	if d > maxBackoff {
		d = maxBackoff
	}
	d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
	b.until = now.Add(d)
}

// expire ends every sync past its deadline at now; it returns how many fast
// pulls timed out and the peers of the bulk syncs that did.
func (s *syncer) expire(now time.Time) (pullTimeouts int, failed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.syncs {
		if now.Before(st.deadline) {
			continue
		}
		s.removeLocked(st)
		if st.done {
			continue // lingered after its final chunk: not a failure
		}
		if st.fast {
			pullTimeouts++
		} else {
			failed = append(failed, st.peer)
		}
	}
	return pullTimeouts, failed
}
