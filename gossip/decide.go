package gossip

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// The anti-entropy decision, as a pure function of the incoming message,
// the local digest, the clock and the pacing state: what to send back. The
// Node feeds it (syncer.decide) and carries the answer out; the function
// itself does no I/O and reads no clock, so it is table-tested
// (decide_test.go).

// pacing is the anti-entropy state the decision reads and updates.
type pacing struct {
	// lastApply is when a fresh delta (push, forward or pull; not a bulk
	// anti-entropy sync) last changed the local replica.
	lastApply time.Time
	// lastFullDigest is when a digest-sum mismatch last led to a full digest.
	lastFullDigest time.Time
	// repairUntil ends the repair mode (see repairWindow): set when a bulk
	// anti-entropy sync brought news.
	repairUntil time.Time
}

// Repair mode. A bulk anti-entropy sync that changes the replica is a sign
// that the fast path (push, forward, heads and pulls) missed something: a
// healed partition, a restart, lost packets. Then the news that other nodes
// still lack is not spreading by itself (its heads were sent while the
// partition stood, or never reached the holder), and a 1 s round with one
// random peer, whose answer the peer's quiet-period skip may hold back, is
// slow to find it. For repairWindow after such a sync the node therefore
// (a) runs its anti-entropy tick repairTickDivisor times as often, (b) sends
// its full digest on the tick instead of the digest sum (the peer pulls
// what it lacks and answers with its own digest if we lack something, so
// no quiet-period skip can hold the round back), and (c) never skips the
// full digest on a sum mismatch itself. Every full digest still goes
// through the full-digest budget (antientropy.go), and a refused one falls
// back to the digest sum: repair mode adds at most repairTickDivisor
// digest sums per AntiEntropyInterval, whatever the load.
const (
	repairWindow      = 3 * time.Second
	repairTickDivisor = 4
)

// repairing reports whether the node is in repair mode at now.
func (p pacing) repairing(now time.Time) bool { return now.Before(p.repairUntil) }

// antiEntropyEvery is the anti-entropy tick interval at now: base, or
// base/repairTickDivisor in repair mode or while the node asks for digests
// (Config.WantDigests).
func antiEntropyEvery(base time.Duration, p pacing, now time.Time, asking bool) time.Duration {
	if asking || p.repairing(now) {
		return base / repairTickDivisor
	}
	return base
}

// syncInput is what the decision sees.
type syncInput struct {
	// msg is the incoming message (msgDigestSum, msgDigest or msgSyncReq);
	// nil is the periodic anti-entropy tick.
	msg *message
	// state marks a digest received as memberlist push/pull state.
	state bool
	// self is this node's name (the sender of what we send).
	self  string
	local crdt.Digest
	now   time.Time
	// peerKnown: the sender is an alive member we can answer.
	peerKnown bool
	pace      pacing
	// repairBudget, when set, also bounds the full digests of repair-mode
	// ticks (antientropy.go).
	repairBudget *rate.Limiter
	// ask, on the tick: the node waits for this peer's cluster's digest
	// (Config.WantDigests); the tick is a digest sum asking for the peer's.
	ask bool
}

// syncOutput is what to do. Zero value: nothing.
type syncOutput struct {
	// send is a message for the peer (a digest sum on the tick, or our full
	// digest), of type sendType; nil when there is nothing to send.
	send     []byte
	sendType msgType
	// suppressed: a full digest was due but the full-digest budget
	// (antientropy.go) refused it.
	suppressed bool
	// pull names the origins to pull from the peer, with our own watermark
	// of each: the start of every delta range we ask for.
	pull crdt.Digest
	// serve, for a sync request, is the requester's digest to compute the
	// answer from (Replica.DeltaSince); nil: nothing of ours is wanted.
	serve crdt.Digest
	// observe is a digest the peer holds (Config.OnDigest).
	observe crdt.Digest
	// pace is the updated pacing state.
	pace pacing
}

// decideSync is the anti-entropy decision. budget is the full-digest token
// bucket; it is consulted (and charged) only when a full digest is due.
func decideSync(in syncInput, budget *rate.Limiter) syncOutput {
	out := syncOutput{pace: in.pace}
	switch {
	case in.msg == nil:
		decideTick(in, budget, &out)
	case in.msg.Type == msgDigestSum:
		decideDigestSum(in, budget, &out)
	case in.msg.Type == msgDigest:
		decideDigest(in, budget, &out)
	case in.msg.Type == msgSyncReq:
		out.serve = serveFrom(in.local, in.msg.Digest)
	}
	return out
}

// decideTick is the periodic round: our digest sum, or in repair mode our
// full digest when both the repair share and the full-digest budget allow
// it (a refusal is counted as suppressed; the sum goes instead).
func decideTick(in syncInput, budget *rate.Limiter, out *syncOutput) {
	if in.ask {
		// the answer (a sum) is what the asker needs; the repair-mode
		// digest, if any, waits for a tick that does not ask
		out.send, out.sendType = encodeDigestSum(in.self, digestSum(in.local), true), msgDigestSum
		return
	}
	if in.pace.repairing(in.now) && in.peerKnown {
		msg := encodeDigestMsg(in.self, false, in.local)
		if (in.repairBudget == nil || allowDigest(in.repairBudget, in.now, len(msg))) &&
			allowDigest(budget, in.now, len(msg)) {
			out.send, out.sendType = msg, msgDigest
			return
		}
		out.suppressed = true
	}
	out.send, out.sendType = encodeDigestSum(in.self, digestSum(in.local), false), msgDigestSum
}

// decideDigestSum: equal sums mean the sender holds exactly what we hold,
// an anti-entropy round as complete as a full digest would be. Otherwise we
// send our full digest (the sender pulls what it lacks and answers with its
// own digest if we lack something). While fresh deltas are still spreading
// (one applied in the last quietPeriod) a mismatch is expected and the fast
// path closes it: the O(clusters) digest is skipped then, but never for
// longer than maxQuietSkip, and never in repair mode. A sum that asks for
// ours (the sender waits for our cluster's digest, Config.WantDigests) gets
// our sum back when nothing else is sent: the same size as the ask, so an
// ask cannot amplify.
func decideDigestSum(in syncInput, budget *rate.Limiter, out *syncOutput) {
	sum := digestSum(in.local)
	defer func() {
		if in.msg.Ask && in.peerKnown && out.send == nil {
			out.send, out.sendType = encodeDigestSum(in.self, sum, false), msgDigestSum
		}
	}()
	if sum == in.msg.Sum {
		out.observe = in.local
		return
	}
	if in.now.Sub(in.pace.lastApply) < quietPeriod && in.now.Sub(in.pace.lastFullDigest) < maxQuietSkip &&
		!in.pace.repairing(in.now) {
		return
	}
	out.pace.lastFullDigest = in.now
	if in.peerKnown {
		fullDigest(in, false, budget, out)
	}
}

// decideDigest: pull every origin of which the peer holds something we
// lack; if the peer lacks something we hold (and the digest is not itself
// an answer) answer with our full digest so that it pulls from us.
func decideDigest(in syncInput, budget *rate.Limiter, out *syncOutput) {
	rd := in.msg.Digest
	out.observe = rd
	for o, r := range rd {
		ld, ok := in.local[o]
		if needs(ld, ok, r) {
			if out.pull == nil {
				out.pull = crdt.Digest{}
			}
			out.pull[o] = ld
		}
	}
	if in.msg.Reply || in.state || !in.peerKnown {
		return
	}
	for o, ld := range in.local {
		r, ok := rd[o]
		if needs(r, ok, ld) {
			fullDigest(in, true, budget, out)
			return
		}
	}
}

// fullDigest sends our full digest if the budget allows it.
func fullDigest(in syncInput, reply bool, budget *rate.Limiter, out *syncOutput) {
	msg := encodeDigestMsg(in.self, reply, in.local)
	if !allowDigest(budget, in.now, len(msg)) {
		out.suppressed = true
		return
	}
	out.send, out.sendType = msg, msgDigest
}

// serveFrom is the requester's view to answer a sync request from: our own
// digest (nothing to send) except for the requested origins we hold, where
// it is the requester's. nil when no requested origin is ours to give.
func serveFrom(local, req crdt.Digest) crdt.Digest {
	remote := make(crdt.Digest, len(local))
	for o, od := range local {
		remote[o] = od
	}
	wanted := 0
	for o, od := range req {
		if _, ok := local[o]; ok {
			remote[o] = od
			wanted++
		}
	}
	if wanted == 0 {
		return nil
	}
	return remote
}
