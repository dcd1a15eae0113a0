package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// The sync decision is a pure function of (message, local digest, now,
// pacing, budget): table tests cover every answer it can give.
func TestDecideSync(t *testing.T) {
	t0 := time.Unix(5000, 0)
	od := func(max, retired crdt.Version, hash uint64) crdt.OriginDigest {
		return crdt.OriginDigest{Max: max, Retired: retired, Hash: hash}
	}
	local := crdt.Digest{"c1": od(10, 0, 1), "c2": od(5, 0, 2)}
	ahead := crdt.Digest{"c1": od(12, 0, 3), "c2": od(5, 0, 2)}  // peer holds more of c1
	behind := crdt.Digest{"c1": od(10, 0, 1), "c2": od(3, 0, 9)} // peer lacks some of c2
	equal := crdt.Digest{"c1": od(10, 0, 1), "c2": od(5, 0, 2)}
	sum := func(d crdt.Digest) *message { return &message{Type: msgDigestSum, Sender: "p", Sum: digestSum(d)} }
	askSum := func(d crdt.Digest) *message {
		return &message{Type: msgDigestSum, Sender: "p", Sum: digestSum(d), Ask: true}
	}
	dig := func(d crdt.Digest, reply bool) *message {
		return &message{Type: msgDigest, Sender: "p", Digest: d, Reply: reply}
	}
	busy := pacing{lastApply: t0.Add(-100 * time.Millisecond), lastFullDigest: t0.Add(-time.Second)}
	quietTooLong := pacing{lastApply: t0.Add(-100 * time.Millisecond), lastFullDigest: t0.Add(-maxQuietSkip)}
	// busy, but a bulk repair brought news 1 s ago: repair mode
	repairing := pacing{lastApply: busy.lastApply, lastFullDigest: busy.lastFullDigest,
		repairUntil: t0.Add(repairWindow - time.Second)}
	repairOver := pacing{repairUntil: t0}
	full := newDigestLimiter
	empty := func() *rate.Limiter { l := newDigestLimiter(); l.AllowN(t0, FullDigestBurst); return l }

	tests := []struct {
		name      string
		msg       *message
		state     bool
		unknown   bool
		pace      pacing
		budget    func() *rate.Limiter
		send      msgType // 0: nothing
		reply     bool
		ask       bool // on the tick: the node asks; on a sent sum: it asks
		pull      crdt.Digest
		serve     bool
		observe   crdt.Digest
		suppress  bool
		lastFullD time.Time
	}{
		{name: "tick sends the digest sum", msg: nil, budget: full, send: msgDigestSum},
		{name: "tick in repair mode sends the full digest", msg: nil, pace: repairing, budget: full, send: msgDigest,
			lastFullD: repairing.lastFullDigest},
		{name: "tick in repair mode, budget spent: the digest sum", msg: nil, pace: repairing, budget: empty,
			send: msgDigestSum, suppress: true, lastFullD: repairing.lastFullDigest},
		{name: "tick in repair mode to an unknown peer: the digest sum", msg: nil, pace: repairing, unknown: true,
			budget: full, send: msgDigestSum, lastFullD: repairing.lastFullDigest},
		{name: "tick once repair mode is over: the digest sum", msg: nil, pace: repairOver, budget: full,
			send: msgDigestSum},
		{name: "asking tick: a digest sum that asks", msg: nil, ask: true, budget: full, send: msgDigestSum},
		{name: "asking tick in repair mode: still the asking sum", msg: nil, ask: true, pace: repairing,
			budget: full, send: msgDigestSum, lastFullD: repairing.lastFullDigest},
		{name: "equal sums: nothing, the round is complete", msg: sum(equal), budget: full, observe: local},
		{name: "equal sums that ask: our sum back", msg: askSum(equal), budget: full, observe: local,
			send: msgDigestSum},
		{name: "asking sum mismatch while deltas spread: our sum back", msg: askSum(ahead), pace: busy,
			budget: full, send: msgDigestSum, lastFullD: busy.lastFullDigest},
		{name: "asking sum mismatch: the full digest answers", msg: askSum(ahead), budget: full, send: msgDigest,
			lastFullD: t0},
		{name: "asking sum mismatch, budget spent: our sum back", msg: askSum(ahead), budget: empty,
			suppress: true, send: msgDigestSum, lastFullD: t0},
		{name: "asking sum from an unknown peer: nothing", msg: askSum(equal), unknown: true, budget: full,
			observe: local},
		{name: "sum mismatch: full digest", msg: sum(ahead), budget: full, send: msgDigest, lastFullD: t0},
		{name: "sum mismatch while deltas spread: skipped", msg: sum(ahead), pace: busy, budget: full,
			lastFullD: busy.lastFullDigest},
		{name: "sum mismatch while deltas spread, in repair mode: full digest, no skip", msg: sum(ahead),
			pace: repairing, budget: full, send: msgDigest, lastFullD: t0},
		{name: "sum mismatch, skipped for maxQuietSkip already: full digest", msg: sum(ahead), pace: quietTooLong,
			budget: full, send: msgDigest, lastFullD: t0},
		{name: "sum mismatch, budget spent: suppressed", msg: sum(ahead), budget: empty, suppress: true, lastFullD: t0},
		{name: "sum mismatch from an unknown peer: nothing sent, budget untouched", msg: sum(ahead), unknown: true,
			budget: empty, lastFullD: t0},
		{name: "digest ahead: pull c1 from our watermark", msg: dig(ahead, false), budget: full,
			pull: crdt.Digest{"c1": local["c1"]}, observe: ahead},
		{name: "digest of a new origin: pull it from zero", msg: dig(crdt.Digest{"c9": od(4, 0, 7)}, true), budget: full,
			pull: crdt.Digest{"c9": {}}, observe: crdt.Digest{"c9": od(4, 0, 7)}},
		{name: "digest behind: answer with ours", msg: dig(behind, false), budget: full, send: msgDigest, reply: true,
			observe: behind},
		{name: "digest behind, budget spent: suppressed", msg: dig(behind, false), budget: empty, suppress: true,
			observe: behind},
		{name: "digest behind but a reply: no answer", msg: dig(behind, true), budget: full, observe: behind},
		{name: "digest behind in push/pull state: no answer", msg: dig(behind, false), state: true, budget: full,
			observe: behind},
		{name: "equal digest: nothing", msg: dig(equal, false), budget: full, observe: equal},
		{name: "sync request for our origin: serve it", msg: &message{Type: msgSyncReq, Sender: "p",
			Digest: crdt.Digest{"c1": od(3, 0, 0)}}, budget: full, serve: true},
		{name: "sync request for an origin we lack: nothing to serve", msg: &message{Type: msgSyncReq, Sender: "p",
			Digest: crdt.Digest{"zz": od(3, 0, 0)}}, budget: full},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := decideSync(syncInput{msg: tc.msg, state: tc.state, self: "me", local: local, now: t0,
				peerKnown: !tc.unknown, pace: tc.pace, ask: tc.ask && tc.msg == nil}, tc.budget())
			if tc.send == 0 {
				require.Nil(t, out.send)
			} else {
				require.Equal(t, tc.send, out.sendType)
				m, err := decodeMessage(out.send)
				require.NoError(t, err)
				require.Equal(t, "me", m.Sender)
				if tc.send == msgDigest {
					require.Equal(t, local, m.Digest)
					require.Equal(t, tc.reply, m.Reply)
				} else {
					require.Equal(t, digestSum(local), m.Sum)
					require.Equal(t, tc.ask, m.Ask, "a tick asks when the node asks; an answer never asks")
				}
			}
			require.Equal(t, tc.pull, out.pull)
			require.Equal(t, tc.observe, out.observe)
			require.Equal(t, tc.suppress, out.suppressed)
			require.Equal(t, tc.serve, out.serve != nil)
			require.Equal(t, tc.lastFullD, out.pace.lastFullDigest)
		})
	}
}

// A sync request is served from the requester's watermark of each
// requested origin we hold, and from ours (nothing to send) elsewhere.
func TestServeFrom(t *testing.T) {
	local := crdt.Digest{"c1": {Max: 10}, "c2": {Max: 5}}
	from := serveFrom(local, crdt.Digest{"c1": {Max: 3}, "zz": {Max: 1}})
	require.Equal(t, crdt.Digest{"c1": {Max: 3}, "c2": {Max: 5}}, from)
	require.Nil(t, serveFrom(local, crdt.Digest{"zz": {Max: 1}}))
	require.Equal(t, crdt.Version(10), local["c1"].Max, "local digest not modified")
}

// Under a storm of digest-sum mismatches the decision never sends more
// full-digest bytes than the budget allows.
func TestDecideSyncBoundedUnderStorm(t *testing.T) {
	t0 := time.Unix(5000, 0)
	local := crdt.Digest{}
	for i := 0; i < 200; i++ {
		local[string(rune('a'+i%26))+string(rune('a'+i/26))] = crdt.OriginDigest{Max: crdt.Version(i + 1), Hash: uint64(i)}
	}
	budget := newDigestLimiter()
	bytes := 0
	for ms := 0; ms < 10_000; ms += 5 { // a mismatch every 5 ms for 10 s
		out := decideSync(syncInput{msg: &message{Type: msgDigestSum, Sum: 1}, self: "me", local: local,
			now: t0.Add(time.Duration(ms) * time.Millisecond), peerKnown: true}, budget)
		bytes += len(out.send)
	}
	require.LessOrEqual(t, bytes, FullDigestBurst+FullDigestBytesPerSec*10)
	require.Greater(t, bytes, 0)
}

// Repair mode quickens the anti-entropy tick for repairWindow, no longer.
func TestAntiEntropyEvery(t *testing.T) {
	t0 := time.Unix(5000, 0)
	base := time.Second
	require.Equal(t, base, antiEntropyEvery(base, pacing{}, t0, false))
	p := pacing{repairUntil: t0.Add(repairWindow)}
	require.Equal(t, base/repairTickDivisor, antiEntropyEvery(base, p, t0, false))
	require.Equal(t, base/repairTickDivisor, antiEntropyEvery(base, p, t0.Add(repairWindow-time.Millisecond), false))
	require.Equal(t, base, antiEntropyEvery(base, p, t0.Add(repairWindow), false))
	require.Equal(t, base/repairTickDivisor, antiEntropyEvery(base, pacing{}, t0, true), "asking for digests")
}

// In repair mode every tick offers a full digest, yet the full-digest
// bytes stay within the budget, and within the repair share of it when the
// node has one: what they refuse goes out as a digest sum.
func TestRepairTicksBoundedByBudget(t *testing.T) {
	t0 := time.Unix(5000, 0)
	local := crdt.Digest{}
	for i := 0; i < 100; i++ { // a ~6.7 KB digest, within both bursts
		local[string(rune('a'+i%26))+string(rune('a'+i/26))] = crdt.OriginDigest{Max: crdt.Version(i + 1), Hash: uint64(i)}
	}
	run := func(repair *rate.Limiter) (full, sums int) {
		budget := newDigestLimiter()
		pace := pacing{}
		for ms := 0; ms < 10_000; ms += 5 { // a tick every 5 ms for 10 s, repair mode re-armed all along
			now := t0.Add(time.Duration(ms) * time.Millisecond)
			pace.repairUntil = now.Add(repairWindow)
			out := decideSync(syncInput{self: "me", local: local, now: now, peerKnown: true, pace: pace,
				repairBudget: repair}, budget)
			if out.sendType == msgDigest {
				full += len(out.send)
			} else {
				require.Equal(t, msgDigestSum, out.sendType)
				require.True(t, out.suppressed)
				sums++
			}
		}
		return full, sums
	}
	full, sums := run(nil)
	require.LessOrEqual(t, full, FullDigestBurst+FullDigestBytesPerSec*10)
	require.Greater(t, full, FullDigestBytesPerSec*5, "the budget is used")
	require.Greater(t, sums, 0, "refused full digests fall back to the sum")

	full, sums = run(newRepairDigestLimiter())
	require.LessOrEqual(t, full, RepairDigestBurst+RepairDigestBytesPerSec*10)
	require.Greater(t, full, 0)
	require.Greater(t, sums, 0)
}
