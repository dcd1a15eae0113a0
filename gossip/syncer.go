package gossip

import (
	"math/rand/v2"
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
}

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
	backoffs   map[string]*backoff
	nextID     uint64
	closed     bool
	pace       pacing
	digestLim  *rate.Limiter // full-digest byte budget (antientropy.go)
	repairLim  *rate.Limiter // its share for repair-mode ticks
	// repairStarted wakes the anti-entropy loop when repair mode begins
	// (and on WakeAntiEntropy).
	repairStarted chan struct{}
}

func newSyncer(maxBulk int) *syncer {
	return &syncer{maxBulk: maxBulk, syncs: map[uint64]*syncState{}, pulls: map[string]uint64{},
		bulkByPeer: map[string]uint64{}, backoffs: map[string]*backoff{},
		nextID: rand.Uint64() >> 1, digestLim: newDigestLimiter(),
		repairLim: newRepairDigestLimiter(), repairStarted: make(chan struct{}, 1)}
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
	case s.repairStarted <- struct{}{}:
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

// beginBulk starts a bulk pull of origins from peer. A resumed sync (the
// peer said More) ignores the peer's backoff.
func (s *syncer) beginBulk(peer string, origins []string, now time.Time, resume bool) (*syncState, bulkStart) {
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
	s.nextID++
	st := &syncState{id: s.nextID, peer: peer, origins: origins, deadline: now.Add(bulkSyncTimeout)}
	s.syncs[st.id] = st
	s.bulkByPeer[peer] = st.id
	return st, bulkStarted
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

func (s *syncer) removeLocked(st *syncState) {
	delete(s.syncs, st.id)
	if st.fast {
		for _, o := range st.origins {
			if s.pulls[o] == st.id {
				delete(s.pulls, o)
			}
		}
	} else if s.bulkByPeer[st.peer] == st.id {
		delete(s.bulkByPeer, st.peer)
	}
}

// accept checks that sync data for id from sender was asked for and
// extends its deadline; it returns a copy of the sync (ok=false: unsolicited).
func (s *syncer) accept(id uint64, sender string, now time.Time) (syncState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.syncs[id]
	if st == nil || st.peer != sender {
		return syncState{}, false
	}
	st.deadline = now.Add(bulkSyncTimeout)
	return *st, true
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
		if st.fast {
			pullTimeouts++
		} else {
			failed = append(failed, st.peer)
		}
	}
	return pullTimeouts, failed
}
