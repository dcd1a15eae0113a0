package gossip

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/store"
)

// sampleCheckpoint is a real signed checkpoint of an origin with n pods.
func sampleCheckpoint(t testing.TB, n int) crdt.Checkpoint {
	s := crdt.NewState("c1")
	s.SetSigner(NewSigner(signingKey(1)))
	require.NoError(t, s.SetEpoch(1))
	for i := 0; i < n; i++ {
		_, _, err := s.Write(crdt.KindPod, fmt.Sprintf("ns/p%d", i), []byte{0x80}, false, 1)
		require.NoError(t, err)
	}
	cp, err := s.MakeCheckpoint()
	require.NoError(t, err)
	return cp
}

func TestCheckpointWireRoundTrip(t *testing.T) {
	cp := sampleCheckpoint(t, 1300)
	m, err := decodeMessage(encodeCheckpoint("node-a", &cp))
	require.NoError(t, err)
	require.Equal(t, msgCheckpoint, m.Type)
	require.Equal(t, "node-a", m.Sender)
	require.Equal(t, cp, *m.Checkpoint)

	req, err := decodeMessage(encodeCheckpointReq("node-b", "c1"))
	require.NoError(t, err)
	require.Equal(t, msgCheckpointReq, req.Type)
	require.Equal(t, "c1", req.Origin)

	// Truncations and lying counts are refused, never a panic.
	enc := encodeCheckpoint("node-a", &cp)
	for cut := 1; cut < len(enc); cut += 7 {
		_, err := decodeMessage(enc[:cut])
		require.Error(t, err, "cut at %d", cut)
	}
	bad := cp
	bad.Bounds = append([]crdt.Version(nil), cp.Bounds...)
	bad.Bounds[0] = bad.Bounds[1] // not increasing
	_, err = decodeMessage(encodeCheckpoint("node-a", &bad))
	require.ErrorIs(t, err, crdt.ErrInvalid)
}

// FuzzDecodeCheckpoint: whatever the bytes, a decoded checkpoint has a
// valid shape and re-encodes to a message that decodes to the same.
func FuzzDecodeCheckpoint(f *testing.F) {
	cp := sampleCheckpoint(f, 600)
	f.Add(encodeCheckpoint("node-a", &cp))
	f.Add(encodeCheckpointReq("node-b", "c1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil || m.Type != msgCheckpoint {
			return
		}
		c := m.Checkpoint
		require.NoError(t, crdt.ValidateCheckpoint(c))
		require.LessOrEqual(t, len(c.Bounds), crdt.MaxCheckpointSegments)
		again, err := decodeMessage(encodeCheckpoint(m.Sender, c))
		require.NoError(t, err)
		require.Equal(t, c, again.Checkpoint)
	})
}

// A cluster joining over real gossip asks the writer of the origin it is
// far behind on for its checkpoint, and takes in the origin's signed
// entries mostly without verifying them one by one; it ends with the
// writer's exact state.
func TestJoinUsesWriterCheckpoint(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1)))
	const n = 4000
	ops := make([]store.WriteOp, 0, n)
	for i := 0; i < n; i++ {
		ops = append(ops, store.WriteOp{Kind: crdt.KindPod, Name: fmt.Sprintf("ns/p%05d", i), Value: podValue(t, "10.0.0.1")})
	}
	_, err := a.rep.WriteMany(ops)
	require.NoError(t, err)
	// Small sync answers: the checkpoint is in before most of the data,
	// whatever the timing of the first answer.
	j := startNode(t, "j", "c2", keys, func(c *Config) {
		signed(t, signingKey(2))(c)
		c.SyncMaxBytes = 64 << 10
	})
	joinAll(t, a, j)
	requireConverged(t, waitConverge, a, j)
	require.Equal(t, a.rep.Digest()["c1"], j.rep.Digest()["c1"])
	st := j.rep.CheckpointStats()
	t.Logf("checkpoint stats: %+v", st)
	require.Equal(t, 1.0, testutil.ToFloat64(j.cps.events.WithLabelValues("accepted")))
	require.Equal(t, 1.0, testutil.ToFloat64(a.cps.events.WithLabelValues("served")))
	// The checkpoint may arrive after the first sync messages: those
	// segments are verified one by one; the rest are vouched for.
	require.NotZero(t, st.Hits, "stats %+v", st)
	require.Greater(t, st.SkippedVerifies, uint64(n/2))
	require.Equal(t, float64(st.Hits), testutil.ToFloat64(j.cps.segHits))
}

// A checkpoint nobody asked for is dropped without reaching the Replica.
func TestCheckpointUnsolicitedDropped(t *testing.T) {
	keys := [][]byte{bytes.Repeat([]byte{1}, 32)}
	a := startNode(t, "a", "c1", keys, signed(t, signingKey(1)))
	j := startNode(t, "j", "c2", keys, signed(t, signingKey(2)))
	joinAll(t, a, j)
	cp := sampleCheckpoint(t, 10)
	require.NoError(t, a.ml.SendReliable(a.memberNode("j"), encodeCheckpoint("a", &cp)))
	require.True(t, waitFor(waitConverge, func() bool {
		return testutil.ToFloat64(j.cps.events.WithLabelValues("unsolicited")) == 1
	}))
	require.Zero(t, j.rep.CheckpointMax("c1"))
}

// alignSyncNode is a node (no I/O) whose replica holds c1's checkpoint,
// and c1's writer state.
func alignSyncNode(t *testing.T) (*Node, *crdt.State) {
	w := crdt.NewState("c1")
	w.SetSigner(NewSigner(signingKey(1)))
	require.NoError(t, w.SetEpoch(1))
	for i := 0; i < 1300; i++ {
		_, _, err := w.Write(crdt.KindPod, fmt.Sprintf("ns/p%05d", i), []byte{0x80}, false, 1)
		require.NoError(t, err)
	}
	cp, err := w.MakeCheckpoint()
	require.NoError(t, err)
	cfg := Config{NodeName: "j", ClusterID: "c2", Logger: testLogger()}
	require.NoError(t, cfg.setDefaults())
	rep := newMemReplica(t, "c2")
	tr, err := NewTrust(map[string][]byte{"c1": cp.Key}, true, "c2", NewSigner(signingKey(2)).PublicKey(), nil, testLogger())
	require.NoError(t, err)
	rep.SetVerifier(tr, nil)
	require.NoError(t, rep.AcceptCheckpoint(cp))
	n, err := newNode(cfg, rep)
	require.NoError(t, err)
	return n, w
}

// cut cuts w's stream from 0 into chunks of size entries.
func cut(w *crdt.State, size int) []crdt.Delta {
	var out []crdt.Delta
	for _, d := range w.DeltaSince(crdt.Digest{}, 0) {
		for lo := 0; lo < len(d.Entries); lo += size {
			c := d
			c.Entries = d.Entries[lo:min(lo+size, len(d.Entries))]
			if lo > 0 {
				c.From = d.Entries[lo-1].Version
			}
			c.To = c.Entries[len(c.Entries)-1].Version
			out = append(out, c)
		}
	}
	return out
}

// A bulk sync answer is re-cut at segment bounds across its messages; the
// partial segment at its end is dropped and the answer marked capped, so
// the resumed pull starts at the bound.
func TestAlignSyncHoldsTailAcrossMessages(t *testing.T) {
	n, w := alignSyncNode(t)
	chunks := cut(w, 300) // 1300 entries: segments of 512, 512, 276
	cpBounds := w.DeltaSince(crdt.Digest{}, 0)
	first := &message{Type: msgSyncData, ID: 7}
	got := n.alignSync(first, chunks[:2]) // (0, 600]: segment 1 whole, 88 entries held
	require.Len(t, got, 1)
	require.Equal(t, cpBounds[0].To, got[0].To)
	require.Len(t, got[0].Entries, crdt.SegmentEntries)
	last := &message{Type: msgSyncData, ID: 7, Final: true}
	got = n.alignSync(last, chunks[2:3]) // up to 900: held again, nothing whole
	require.Empty(t, got)
	require.True(t, last.More, "the tail is re-pulled from the segment bound")
	require.Empty(t, n.cps.carry, "nothing left held after the answer")
}

// A tail with no progress before it (the sender holds less than the
// checkpoint) is applied, not dropped: no stall.
func TestAlignSyncAppliesTailWithoutProgress(t *testing.T) {
	n, w := alignSyncNode(t)
	chunks := cut(w, 100)
	m := &message{Type: msgSyncData, ID: 8, Final: true}
	got := n.alignSync(m, chunks[:2]) // (0, 200], inside the first segment
	require.Len(t, got, 2)
	require.False(t, m.More)
}
