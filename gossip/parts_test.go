package gossip

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func mlNode(name string) *memberlist.Node {
	return &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 7946}
}

// The member table follows memberlist's events: liveness, cluster
// liveness, the alive count, peers to send to, and reaping of the dead.
func TestMembersTable(t *testing.T) {
	t0 := time.Unix(30_000, 0)
	ms := newMembers("me", false)
	ms.observe(mlNode("me"), "c0", "v1", metaWriter, true, t0)
	ms.observe(mlNode("a"), "c1", "v1", metaWriter, true, t0)
	ms.observe(mlNode("b"), "c2", "v2", 0, true, t0)
	require.Equal(t, 3, ms.numAlive())
	require.Len(t, ms.alivePeers(""), 2)
	require.Len(t, ms.alivePeers("a"), 1)
	require.NotNil(t, ms.node("b"))

	// b dies (no leaving flag), a leaves gracefully; b's cluster keeps its
	// last alive time.
	t1 := t0.Add(time.Minute)
	ms.observe(mlNode("b"), "c2", "v2", 0, false, t1)
	ms.observe(mlNode("a"), "", "", metaLeaving, false, t1)
	require.Nil(t, ms.node("b"))
	cluster, alive, known := ms.lookup("a")
	require.Equal(t, "c1", cluster, "a cluster-less event keeps the known cluster")
	require.False(t, alive)
	require.True(t, known)
	st := ms.clusters(t1.Add(time.Hour))
	require.False(t, st["c2"].Alive)
	require.Equal(t, t1, st["c2"].LastAlive)
	require.True(t, st["c0"].Alive)
	require.Equal(t, []string{"127.0.0.1:7946"}, ms.rejoinAddrs(nil), "only the dead member is rejoined")

	c := ms.reap(t1.Add(time.Hour), 2*time.Hour)
	require.Equal(t, memberCounts{alive: 1, dead: 1, left: 1, versions: map[string]float64{"v1": 1}}, c)
	c = ms.reap(t1.Add(3*time.Hour), 2*time.Hour)
	require.Equal(t, 0.0, c.dead, "dead for longer than the timeout: reaped")
	require.Len(t, ms.list(), 2)

	require.True(t, ms.setWriter(true))
	require.False(t, ms.setWriter(true))
	ms.setLeaving()
	w, l := ms.selfFlags()
	require.True(t, w)
	require.True(t, l)
}

// Fast pulls are deduplicated per origin; bulk syncs are one per peer,
// bounded in number, and back off after a failure; both expire.
func TestSyncerSessions(t *testing.T) {
	t0 := time.Unix(40_000, 0)
	s := newSyncer(1)
	p := s.beginPull("a", "c1", 10, t0)
	require.NotNil(t, p)
	require.Nil(t, s.beginPull("b", "c1", 9, t0), "a pull reaching the head is in flight")
	p2 := s.beginPull("b", "c1", 11, t0)
	require.NotNil(t, p2, "a higher head starts a new pull")

	b, res := s.beginBulk("a", []string{"c1"}, nil, t0, false)
	require.Equal(t, bulkStarted, res)
	_, res = s.beginBulk("a", []string{"c2"}, nil, t0, false)
	require.Equal(t, bulkSkipped, res, "one bulk sync per peer")
	_, res = s.beginBulk("b", []string{"c2"}, nil, t0, false)
	require.Equal(t, bulkThrottled, res, "MaxConcurrentSyncs")

	got, ok := s.accept(b.id, "a", t0)
	require.True(t, ok)
	require.Equal(t, []string{"c1"}, got.origins)
	_, ok = s.accept(b.id, "b", t0)
	require.False(t, ok, "sync data from another peer is unsolicited")

	pulls, failed := s.expire(t0.Add(fastPullTimeout))
	require.Equal(t, 2, pulls)
	require.Empty(t, failed)
	pulls, failed = s.expire(t0.Add(bulkSyncTimeout))
	require.Zero(t, pulls)
	require.Equal(t, []string{"a"}, failed)
	require.Nil(t, s.finish(b.id), "expired")

	s.fail("a", t0)
	_, res = s.beginBulk("a", []string{"c1"}, nil, t0.Add(100*time.Millisecond), false)
	require.Equal(t, bulkSkipped, res, "backing off")
	_, res = s.beginBulk("a", []string{"c1"}, nil, t0.Add(100*time.Millisecond), true)
	require.Equal(t, bulkStarted, res, "a resumed sync ignores the backoff")

	s.close()
	require.Nil(t, s.beginPull("a", "c9", 1, t0))
	_, res = s.beginBulk("z", nil, nil, t0, false)
	require.Equal(t, bulkSkipped, res)
}

// An origin far behind is pulled by one bulk sync at a time, and a catch-up
// of many such origins is split across peers; an origin a little behind is
// always asked for. An owner that stalls, or advances its origins by less
// than ownerStep versions per ownerStall, gives its origins up. A sync whose
// final chunk arrived still takes late chunks for syncLinger without
// blocking the next sync.
func TestSyncerBulkOwnersAndLinger(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newSyncer(4)
	many := []string{"o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9"}
	all := func(string) bool { return true }
	a, res := s.beginBulk("a", many, all, t0, false)
	require.Equal(t, bulkStarted, res)
	require.Len(t, a.origins, 3, "10 origins far behind: a quarter (rounded up) per peer")
	b, res := s.beginBulk("b", many, all, t0, false)
	require.Equal(t, bulkStarted, res)
	require.Len(t, b.origins, 7, "fewer than 2·4 left: all of them")
	require.Empty(t, intersect(a.origins, b.origins), "never the same far origin from two peers")
	_, res = s.beginBulk("c", many, all, t0, false)
	require.Equal(t, bulkSkipped, res, "every far origin is being pulled")
	small, res := s.beginBulk("c", many, func(o string) bool { return o != "o9" }, t0, false)
	require.Equal(t, bulkStarted, res)
	require.Equal(t, []string{"o9"}, small.origins, "an origin a little behind is asked for whoever pulls it")
	require.NotNil(t, s.finish(small.id))
	require.NotNil(t, s.finish(b.id))
	few, res := s.beginBulk("e", []string{a.origins[0], "x1", "x2"}, all, t0, false)
	require.Equal(t, bulkStarted, res)
	require.Equal(t, []string{"x1", "x2"}, few.origins, "a few origins behind are not split, only deduplicated")
	require.NotNil(t, s.finish(few.id))

	_, ok := s.accept(a.id, "a", t0.Add(time.Second))
	require.True(t, ok)
	s.progress(a.id, ownerStep-1, t0.Add(time.Second))
	f, res := s.beginBulk("f", a.origins, all, t0.Add(ownerStall), false)
	require.Equal(t, bulkStarted, res, "data that advanced too little (a trickle, a replay) does not keep the owner")
	require.Equal(t, a.origins, f.origins)
	require.NotNil(t, s.finish(f.id))
	require.NotNil(t, s.finish(a.id))
	a, res = s.beginBulk("a", a.origins, all, t0, false)
	require.Equal(t, bulkStarted, res)
	s.progress(a.id, ownerStep-1, t0)
	s.progress(a.id, 1, t0.Add(time.Second))
	_, res = s.beginBulk("f", a.origins, all, t0.Add(time.Second+ownerStall/2), false)
	require.Equal(t, bulkSkipped, res, "the owner advanced recently")
	stolen, res := s.beginBulk("f", a.origins, all, t0.Add(time.Second+ownerStall), false)
	require.Equal(t, bulkStarted, res, "the owner stalled: another peer may serve its origins")
	require.Equal(t, a.origins, stolen.origins)
	require.NotNil(t, s.finish(stolen.id))

	t1 := t0.Add(5 * time.Second)
	require.NotNil(t, s.finalize(a.id, t1))
	require.Nil(t, s.finalize(a.id, t1), "finalized once")
	got, ok := s.accept(a.id, "a", t1.Add(syncLinger/2))
	require.True(t, ok, "a chunk overtaken by the final one is still taken")
	require.True(t, got.done)
	a2, res := s.beginBulk("a", a.origins, all, t1, true)
	require.Equal(t, bulkStarted, res, "the lingering sync does not block the resumed one")
	require.Equal(t, a.origins, a2.origins)
	_, ok = s.accept(a.id, "a", t1.Add(syncLinger))
	require.False(t, ok, "after the linger, unsolicited")
	_, failed := s.expire(t1.Add(syncLinger))
	require.Empty(t, failed, "a lingering sync that ends is no failure")
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}

// manyBehind counts the versions a catch-up would carry: not the retired
// ones, and a new epoch from its start.
func TestManyBehind(t *testing.T) {
	v := crdt.MakeVersion
	epoch0Top := v(1, 0) - 1 // what an epoch bump retires
	local := crdt.Digest{"near": {Max: v(1, 10)}, "far": {Max: v(1, 10)}, "old": {Max: v(1, 10)}}
	remote := crdt.Digest{
		"near":     {Max: v(1, 10+bulkOwnMin-1), Retired: epoch0Top},
		"far":      {Max: v(1, 10+bulkOwnMin), Retired: epoch0Top},
		"new":      {Max: v(1, bulkOwnMin), Retired: epoch0Top},
		"tiny":     {Max: v(1, 3), Retired: epoch0Top},
		"fresh":    {Max: epoch0Top, Retired: epoch0Top},
		"unbumped": {Max: v(0, bulkOwnMin)},
		"old":      {Max: v(2, 5), Retired: v(2, 0) - 1},
	}
	big := manyBehind(local, remote)
	require.False(t, big("near"))
	require.True(t, big("far"))
	require.True(t, big("new"), "an origin we know nothing of counts its current epoch")
	require.False(t, big("tiny"), "a retired epoch carries no entries")
	require.False(t, big("fresh"), "an origin that wrote nothing yet")
	require.True(t, big("unbumped"))
	require.False(t, big("old"), "a new epoch counts its own versions: 5")
	require.False(t, big("unknown"))
}

// Per-sender limits: each sender has its own bucket.
func TestSenderLimits(t *testing.T) {
	l := newSenderLimits(0.001, 2)
	require.True(t, l.allow("a"))
	require.True(t, l.allow("a"))
	require.False(t, l.allow("a"))
	require.True(t, l.allow("b"), "another sender's bucket is untouched")
	require.Equal(t, 2.0, l.tokens("never-seen"))
}

// The push-tree log forwards a fresh delta once.
func TestForwardLogOnce(t *testing.T) {
	f := newForwardLog()
	d := crdt.Delta{Origin: "c1", From: 4, To: 5, Entries: []crdt.Entry{{Key: crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: "ns/p"}, Version: 5}}}
	before := crdt.Digest{"c1": {Max: 4}}
	after := crdt.Digest{"c1": {Max: 5}}
	require.Len(t, f.take([]crdt.Delta{d}, before, after, udpBudget), 1)
	require.Empty(t, f.take([]crdt.Delta{d}, before, after, udpBudget), "forwarded already")
	d2 := d
	d2.From, d2.To = 5, 6
	d2.Entries = []crdt.Entry{{Key: d.Entries[0].Key, Version: 6}}
	require.Empty(t, f.take([]crdt.Delta{d2}, after, crdt.Digest{"c1": {Max: 6}}, 1), "over the byte budget")
}

// A chunk of a bulk sync answer that arrives after the answer's final one
// (every chunk travels on its own stream) is applied, not dropped as
// unsolicited, for syncLinger; after that it is unsolicited.
func TestSyncDataAfterFinalChunk(t *testing.T) {
	now := time.Unix(5000, 0)
	n, chunks := syncTestNode(t, &now, 30, 10)
	require.Len(t, chunks, 3)
	st, res := n.syncs.beginBulk("a", []string{"c1"}, nil, now, false)
	require.Equal(t, bulkStarted, res)
	unsolicited := func() float64 { return testutil.ToFloat64(n.m.dropped.WithLabelValues(dropUnsolicited)) }

	n.onSyncData(&message{Type: msgSyncData, Sender: "a", ID: st.id, Deltas: chunks[:1]})
	n.onSyncData(&message{Type: msgSyncData, Sender: "a", ID: st.id, Final: true, Deltas: chunks[2:]})
	n.onSyncData(&message{Type: msgSyncData, Sender: "a", ID: st.id, Deltas: chunks[1:2]})
	require.Zero(t, unsolicited())
	// The overtaken chunk filled the gap up to its end; the final chunk's
	// entries are held, but the watermark does not jump past a gap it was
	// applied across (the next round re-pulls that range).
	require.Equal(t, chunks[1].To, n.rep.Digest()["c1"].Max, "the overtaken chunk was applied")

	now = now.Add(syncLinger)
	n.onSyncData(&message{Type: msgSyncData, Sender: "a", ID: st.id, Deltas: chunks[1:2]})
	require.Equal(t, 1.0, unsolicited(), "after the linger")
}

// A peer that owns a large catch-up but only replays entries we already
// hold (or trickles too few) keeps sending data, yet loses the ownership
// after ownerStall, so another peer may serve the origin; a peer whose
// chunks advance it keeps the ownership.
func TestOwnerWithoutProgressLosesOrigin(t *testing.T) {
	now := time.Unix(5000, 0)
	n, chunks := syncTestNode(t, &now, 3*ownerStep, ownerStep)
	require.Len(t, chunks, 3)
	all := func(string) bool { return true }
	owner, res := n.syncs.beginBulk("a", []string{"c1"}, all, now, false)
	require.Equal(t, bulkStarted, res)

	step := ownerStall / 2
	for _, c := range chunks[:2] { // honest: each chunk advances c1 by ownerStep
		now = now.Add(step)
		n.onSyncData(&message{Type: msgSyncData, Sender: "a", ID: owner.id, Deltas: []crdt.Delta{c}})
		_, res = n.syncs.beginBulk("b", []string{"c1"}, all, now.Add(step), false)
		require.Equal(t, bulkSkipped, res, "an advancing owner keeps c1")
	}
	require.Equal(t, chunks[1].To, n.rep.Digest()["c1"].Max)
	for i := 0; i < 4; i++ { // hostile: replays a chunk we hold, every half stall
		now = now.Add(step)
		n.onSyncData(&message{Type: msgSyncData, Sender: "a", ID: owner.id, Deltas: chunks[:1]})
	}
	other, res := n.syncs.beginBulk("b", []string{"c1"}, all, now, false)
	require.Equal(t, bulkStarted, res, "replayed data made no progress: another peer serves c1")
	require.Equal(t, []string{"c1"}, other.owned)
}

// Chunks of one answer are applied in answer order: a chunk that overtakes
// an earlier one is held until it arrives; a duplicate or a chunk without
// Seq is applied at once; past maxHeldChunks the held ones are applied in
// order across the gap.
func TestSyncerOrdersChunks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newSyncer(4)
	st, res := s.beginBulk("a", []string{"c1"}, nil, t0, false)
	require.Equal(t, bulkStarted, res)
	chunk := func(seq uint64) *message { return &message{Type: msgSyncData, ID: st.id, Seq: seq} }
	seqs := func(ms []*message) (out []uint64) {
		for _, m := range ms {
			out = append(out, m.Seq)
		}
		return out
	}
	got, how := s.order(st.id, chunk(1), t0)
	require.Equal(t, []uint64{1}, seqs(got))
	require.Equal(t, chunkApplied, how)
	got, how = s.order(st.id, chunk(3), t0)
	require.Empty(t, got)
	require.Equal(t, chunkHeld, how, "3 overtook 2")
	got, _ = s.order(st.id, chunk(4), t0)
	require.Empty(t, got)
	got, _ = s.order(st.id, chunk(2), t0)
	require.Equal(t, []uint64{2, 3, 4}, seqs(got), "2 releases what it was overtaken by")
	got, _ = s.order(st.id, chunk(2), t0)
	require.Equal(t, []uint64{2}, seqs(got), "a duplicate is applied (idempotent), not held")
	got, _ = s.order(st.id, chunk(0), t0)
	require.Equal(t, []uint64{0}, seqs(got), "a sender without Seq")

	// Chunk 5 is lost: 6..5+maxHeldChunks are held, the next one flushes.
	for q := uint64(6); q < 6+maxHeldChunks; q++ {
		got, how = s.order(st.id, chunk(q), t0)
		require.Empty(t, got)
		require.Equal(t, chunkHeld, how)
	}
	got, how = s.order(st.id, chunk(6+maxHeldChunks), t0)
	require.Equal(t, chunkGap, how)
	want := []uint64{}
	for q := uint64(6); q <= 6+maxHeldChunks; q++ {
		want = append(want, q)
	}
	require.Equal(t, want, seqs(got), "past the bound: applied in order across the gap")
	got, _ = s.order(st.id, chunk(5), t0)
	require.Equal(t, []uint64{5}, seqs(got), "the lost chunk, late, is still applied")
	next := uint64(7 + maxHeldChunks)
	got, _ = s.order(st.id, chunk(next), t0)
	require.Equal(t, []uint64{next}, seqs(got))

	// Chunk next+1 is lost and only two follow: they are released after
	// chunkHoldMax, and then a late chunk is applied at once.
	t1 := t0.Add(time.Minute)
	for _, q := range []uint64{next + 3, next + 2} {
		got, how = s.order(st.id, chunk(q), t1)
		require.Empty(t, got)
		require.Equal(t, chunkHeld, how)
	}
	require.Empty(t, s.releaseStale(t1.Add(chunkHoldMax-time.Millisecond)))
	require.Equal(t, []uint64{next + 2, next + 3}, seqs(s.releaseStale(t1.Add(chunkHoldMax))))
	require.Empty(t, s.releaseStale(t1.Add(time.Hour)), "released once")

	// Two gaps: the chunks behind the second one wait from when the first
	// gap closed, not from when the first of them was held.
	base := next + 4
	t2 := t1.Add(time.Hour)
	got, _ = s.order(st.id, chunk(base), t2)
	require.Len(t, got, 1)
	for _, q := range []uint64{base + 2, base + 4} {
		_, how = s.order(st.id, chunk(q), t2)
		require.Equal(t, chunkHeld, how)
	}
	got, _ = s.order(st.id, chunk(base+1), t2.Add(chunkHoldMax/2))
	require.Equal(t, []uint64{base + 1, base + 2}, seqs(got))
	require.Empty(t, s.releaseStale(t2.Add(chunkHoldMax)), "base+4 has waited only half a hold")
	require.Equal(t, []uint64{base + 4}, seqs(s.releaseStale(t2.Add(chunkHoldMax*3/2))))
	for _, q := range []uint64{next + 2, next + 1} {
		got, how = s.order(st.id, chunk(q), t1)
		require.Equal(t, []uint64{q}, seqs(got), "released chunks, re-queued, apply at once")
		require.Equal(t, chunkApplied, how)
	}
}

// A node applies an answer whose final chunk overtook the others as if it
// had arrived in order: the watermark reaches the answer's end, with no
// gap for the next round to re-pull (compare TestSyncDataAfterFinalChunk,
// whose sender predates Seq).
func TestSyncDataInAnswerOrder(t *testing.T) {
	now := time.Unix(5000, 0)
	n, chunks := syncTestNode(t, &now, 30, 10)
	st, res := n.syncs.beginBulk("a", []string{"c1"}, nil, now, false)
	require.Equal(t, bulkStarted, res)
	send := func(i int, final bool) {
		n.onSyncData(&message{Type: msgSyncData, Sender: "a", ID: st.id, Seq: uint64(i + 1), Final: final, Deltas: chunks[i : i+1]})
	}
	send(0, false)
	send(2, true)
	require.Equal(t, chunks[0].To, n.rep.Digest()["c1"].Max, "the final chunk waits for chunk 1")
	send(1, false)
	require.Equal(t, chunks[2].To, n.rep.Digest()["c1"].Max, "all three, in order")
	require.Equal(t, 1.0, testutil.ToFloat64(n.m.syncs.WithLabelValues("requester", "chunk_held")))
	_, ok := n.syncs.accept(st.id, "a", now.Add(syncLinger))
	require.False(t, ok, "the sync ended with its final chunk")

	// An answer whose chunk 1 is lost: the final chunk is held, then
	// handed back to the worker after chunkHoldMax and ends the sync.
	st, res = n.syncs.beginBulk("b", []string{"c1"}, nil, now, false)
	require.Equal(t, bulkStarted, res)
	n.onSyncData(&message{Type: msgSyncData, Sender: "b", ID: st.id, Seq: 1})
	n.onSyncData(&message{Type: msgSyncData, Sender: "b", ID: st.id, Seq: 3, Final: true})
	now = now.Add(chunkHoldMax)
	n.expireSyncs()
	require.Len(t, n.inbox, 1, "the held final chunk, re-queued")
	n.handle(<-n.inbox)
	require.Equal(t, 1.0, testutil.ToFloat64(n.m.syncs.WithLabelValues("requester", "chunk_gap")))
	_, ok = n.syncs.accept(st.id, "b", now.Add(syncLinger))
	require.False(t, ok, "the released final chunk ended the sync")
}

// syncTestNode is node "j" of cluster c2 on the clock *now, and the
// entries entries of writer c1 (epoch 1) cut into chunks of size.
func syncTestNode(t *testing.T, now *time.Time, entries, size int) (*Node, []crdt.Delta) {
	t.Helper()
	w := crdt.NewState("c1")
	require.NoError(t, w.SetEpoch(1))
	for i := 0; i < entries; i++ {
		_, _, err := w.Write(crdt.KindPod, fmt.Sprintf("ns/p%04d", i), []byte{0x80}, false, 1)
		require.NoError(t, err)
	}
	cfg := Config{NodeName: "j", ClusterID: "c2", Logger: testLogger(), Now: func() time.Time { return *now }}
	require.NoError(t, cfg.setDefaults())
	n, err := newNode(cfg, newMemReplica(t, "c2"))
	require.NoError(t, err)
	return n, cut(w, size)
}

// Dead members are dialled by about rejoinDialers nodes per round, whatever
// the mesh size; small meshes dial every round.
func TestDialDeadMembersBounded(t *testing.T) {
	for _, alive := range []int{1, 4, rejoinDialers} {
		require.True(t, dialDeadMembers(alive, 0.999), "alive=%d", alive)
	}
	for _, alive := range []int{17, 100, 300, 10000} {
		dialers := 0.0
		const draws = 100000
		for i := range draws {
			if dialDeadMembers(alive, (float64(i)+0.5)/draws) {
				dialers += float64(alive) / draws
			}
		}
		require.InDelta(t, rejoinDialers, dialers, float64(rejoinDialers)*0.1, "alive=%d: %.1f dialers per round", alive, dialers)
	}
}

// The retirement round runs every second for short timeouts (tests, small
// sets) and every 5 s at the default 24 h: a retirement comes at most 5 s
// after its timeout.
func TestRetireEvery(t *testing.T) {
	for rt, want := range map[time.Duration]time.Duration{
		2 * time.Second:  500 * time.Millisecond,
		10 * time.Second: time.Second,
		2 * time.Minute:  time.Second,
		5 * time.Minute:  2500 * time.Millisecond,
		24 * time.Hour:   5 * time.Second,
	} {
		require.Equal(t, want, retireEvery(rt), "reconnect timeout %s", rt)
	}
}
