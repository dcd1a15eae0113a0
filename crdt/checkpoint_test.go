package crdt

import (
	"crypto/ed25519"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// countingVerifier counts the Verify calls of a pinVerifier.
type countingVerifier struct {
	pinVerifier
	calls int
}

func (c *countingVerifier) Verify(origin string, key, msg, sig []byte) error {
	c.calls++
	return c.pinVerifier.Verify(origin, key, msg, sig)
}

// cpWriter is c1's writer with n pods, some rewritten and some deleted,
// and its tombstones garbage-collected up to the middle, so a joiner
// receives a reset stream.
func cpWriter(t testing.TB, n int, gc bool) (*State, edSigner) {
	sg := newEdSigner(1)
	w := NewState("c1")
	w.SetSigner(sg)
	require.NoError(t, w.SetEpoch(1))
	write := func(i int, del bool) {
		var v []byte
		if !del {
			v = []byte{0x81, 0xa1, 'i', byte(i % 100)}
		}
		_, _, err := w.Write(KindPod, fmt.Sprintf("ns/p%05d", i), v, del, int64(i+1))
		require.NoError(t, err)
	}
	for i := 0; i < n; i++ {
		write(i, false)
	}
	for i := 0; i < n; i += 7 {
		write(i, i%3 == 0)
	}
	if gc {
		w.CollectGarbage(MakeVersion(1, uint64(n+n/14)))
	}
	return w, sg
}

func newJoiner(sg edSigner) (*State, *countingVerifier) {
	v := &countingVerifier{pinVerifier: pinVerifier{"c1": ed25519.PublicKey(sg.PublicKey())}}
	j := NewState("c2")
	j.SetVerifier(v, nil)
	return j, v
}

// rechop cuts a sender's stream into chunks of the given sizes (cycled), as
// a sender with other budgets would.
func rechop(ds []Delta, sizes []int) []Delta {
	var out []Delta
	k := 0
	for _, d := range ds {
		for lo := 0; lo < len(d.Entries) || (lo == 0 && len(d.Entries) == 0); {
			n := sizes[k%len(sizes)]
			k++
			hi := min(lo+n, len(d.Entries))
			c := d
			c.Entries = d.Entries[lo:hi]
			if lo > 0 {
				c.From = d.Entries[lo-1].Version
			}
			if hi < len(d.Entries) {
				c.To = d.Entries[hi-1].Version
				c.Final = false
			}
			out = append(out, c)
			lo = hi
			if len(d.Entries) == 0 {
				break
			}
		}
	}
	return out
}

// joinIn applies a stream in messages of msgSize deltas, carrying the held
// tail from one message to the next, as gossip's bulk sync does.
func joinIn(t testing.TB, j *State, ds []Delta, msgSize int) {
	var carry []Delta
	for lo := 0; lo < len(ds); lo += msgSize {
		hi := min(lo+msgSize, len(ds))
		in := append(append([]Delta(nil), carry...), ds[lo:hi]...)
		ready, held := j.SplitAtCheckpoints(in, hi == len(ds))
		for _, d := range ready {
			_, err := j.Apply(d)
			require.NoError(t, err)
		}
		carry = held
	}
	require.Empty(t, carry)
}

func TestCheckpointJoinSkipsEntryVerification(t *testing.T) {
	for _, gc := range []bool{false, true} {
		t.Run(fmt.Sprint("gc=", gc), func(t *testing.T) {
			w, sg := cpWriter(t, 1800, gc)
			cp, err := w.MakeCheckpoint()
			require.NoError(t, err)
			require.Len(t, cp.Bounds, (w.Len("c1")+SegmentEntries-1)/SegmentEntries)

			plain, pv := newJoiner(sg)
			for _, d := range w.DeltaSince(Digest{}, 0) {
				_, err := plain.Apply(d)
				require.NoError(t, err)
			}
			require.Greater(t, pv.calls, 1500)

			j, v := newJoiner(sg)
			require.NoError(t, j.AcceptCheckpoint(cp))
			require.Equal(t, 1, v.calls)
			joinIn(t, j, rechop(w.DeltaSince(Digest{}, 0), []int{100, 333, 97}), 3)
			require.Equal(t, w.Digest()["c1"], j.Digest()["c1"])
			require.Equal(t, plain.Digest(), j.Digest(), "same state as a per-entry join")
			st := j.CheckpointStats()
			require.EqualValues(t, len(cp.Bounds), st.Hits)
			require.Zero(t, st.Misses)
			wantCalls := 2 // the checkpoint, the state mark (once for the whole join)
			if gc {
				wantCalls++ // the GC watermark
			}
			require.Equal(t, wantCalls, v.calls, "no entry verified one by one")
			require.EqualValues(t, w.Len("c1"), st.SkippedVerifies)
			require.Zero(t, j.CheckpointMax("c1"), "a passed checkpoint is forgotten")
			// The stored signatures are the origin's: a third replica joining
			// from the checkpointed one verifies every entry.
			third, _ := newJoiner(sg)
			for _, d := range j.DeltaSince(Digest{}, 0) {
				_, err := third.Apply(d)
				require.NoError(t, err)
			}
			require.Equal(t, w.Digest()["c1"], third.Digest()["c1"])
		})
	}
}

// A relay holding newer state (records superseded after the checkpoint)
// misses the segments that changed, which are verified entry by entry, and
// the join still ends equal to the relay.
func TestCheckpointSupersededSegmentFallsBack(t *testing.T) {
	w, sg := cpWriter(t, 1600, false)
	cp, err := w.MakeCheckpoint()
	require.NoError(t, err)
	for i := 0; i < 5; i++ { // rewrite keys of the first segment only (not rewritten before)
		_, _, err := w.Write(KindPod, fmt.Sprintf("ns/p%05d", i*7+1), []byte{0x80}, false, 1)
		require.NoError(t, err)
	}
	j, v := newJoiner(sg)
	require.NoError(t, j.AcceptCheckpoint(cp))
	joinIn(t, j, w.DeltaSince(Digest{}, 0), 2)
	require.Equal(t, w.Digest()["c1"], j.Digest()["c1"])
	st := j.CheckpointStats()
	require.EqualValues(t, len(cp.Bounds)-1, st.Hits)
	require.EqualValues(t, 1, st.Misses)
	require.Greater(t, v.calls, 400, "the changed segment was verified entry by entry")
}

// Tampering with a value or swapping in another signature inside a
// segment breaks its hash: per-entry verification refuses the entry.
func TestCheckpointTamperedSegmentRefused(t *testing.T) {
	w, sg := cpWriter(t, 1200, false)
	cp, err := w.MakeCheckpoint()
	require.NoError(t, err)
	for name, tamper := range map[string]func(d *Delta){
		"value": func(d *Delta) { d.Entries[3].Value = []byte{0x81, 0xa1, 'i', 0x7f} },
		"sig":   func(d *Delta) { d.Entries[3].Sig = d.Entries[4].Sig },
		"stamp": func(d *Delta) { d.Entries[3].Stamp++ },
	} {
		t.Run(name, func(t *testing.T) {
			j, _ := newJoiner(sg)
			require.NoError(t, j.AcceptCheckpoint(cp))
			ds := cloneDeltas(w.DeltaSince(Digest{}, 0))
			ready, _ := j.SplitAtCheckpoints(ds, true)
			tamper(&ready[1])
			_, err := j.Apply(ready[0])
			require.NoError(t, err)
			_, err = j.Apply(ready[1])
			requireReason(t, err, ReasonBadSignature)
			require.EqualValues(t, 1, j.CheckpointStats().Misses)
			// the intact segment is merged; the watermark waits for the
			// whole state the origin signed (state mark)
			require.Equal(t, cp.Bounds[0], j.Digest()["c1"].Reset, "only the intact segment applied")
			require.Equal(t, SegmentEntries, j.Len("c1"))
		})
	}
}

func cloneDeltas(ds []Delta) []Delta {
	out := make([]Delta, len(ds))
	for i, d := range ds {
		out[i] = d
		out[i].Entries = append([]Entry(nil), d.Entries...)
	}
	return out
}

// A checkpoint signed by another key than the origin's is refused; a
// forged one cannot make a relay's unsigned or altered entries accepted.
func TestCheckpointForgedRefused(t *testing.T) {
	_, sg := cpWriter(t, 600, false)
	rogue := NewState("c1")
	rogue.SetSigner(newEdSigner(2))
	require.NoError(t, rogue.SetEpoch(1))
	for i := 0; i < 600; i++ {
		_, _, err := rogue.Write(KindPod, fmt.Sprintf("ns/evil%05d", i), []byte{0x80}, false, 1)
		require.NoError(t, err)
	}
	forged, err := rogue.MakeCheckpoint()
	require.NoError(t, err)

	j, _ := newJoiner(sg)
	requireReason(t, j.AcceptCheckpoint(forged), ReasonKeyMismatch)
	anon := forged
	anon.Key = nil // presenting no key: checked against the pin
	requireReason(t, j.AcceptCheckpoint(anon), ReasonBadSignature)
	resigned := forged // the genuine key's signature over other hashes
	resigned.Key, resigned.Sig = sg.PublicKey(), append([]byte(nil), forged.Sig...)
	requireReason(t, j.AcceptCheckpoint(resigned), ReasonBadSignature)
	require.Zero(t, j.CheckpointMax("c1"))

	// The rogue's entries, unsigned, stay refused.
	ds := rogue.DeltaSince(Digest{}, 0)
	for i := range ds[0].Entries {
		ds[0].Entries[i].Sig = nil
	}
	ds[0].Key = nil
	_, err = j.Apply(ds[0])
	requireReason(t, err, ReasonUnsigned)

	// A genuine checkpoint over records written before signing was on
	// does not stand in for their missing signatures.
	old := NewState("c1")
	require.NoError(t, old.SetEpoch(1))
	for i := 0; i < 10; i++ {
		_, _, err := old.Write(KindPod, fmt.Sprintf("ns/old%d", i), []byte{0x80}, false, 1)
		require.NoError(t, err)
	}
	old.SetSigner(sg)
	cp, err := old.MakeCheckpoint()
	require.NoError(t, err)
	j2, _ := newJoiner(sg)
	require.NoError(t, j2.AcceptCheckpoint(cp))
	_, err = j2.Apply(old.DeltaSince(Digest{}, 0)[0])
	requireReason(t, err, ReasonUnsigned)
}

// A checkpoint stops vouching once its key is no longer trusted.
func TestCheckpointUntrustedKeyNotUsed(t *testing.T) {
	w, sg := cpWriter(t, 600, false)
	cp, err := w.MakeCheckpoint()
	require.NoError(t, err)
	j, v := newJoiner(sg)
	require.NoError(t, j.AcceptCheckpoint(cp))
	other := newEdSigner(3)
	v.pinVerifier["c1"] = ed25519.PublicKey(other.PublicKey())
	ds := w.DeltaSince(Digest{}, 0)
	ds[0].Key = nil
	_, err = j.Apply(ds[0])
	requireReason(t, err, ReasonBadSignature)
	require.Zero(t, j.CheckpointStats().Hits)
}

func TestCheckpointValidation(t *testing.T) {
	w, sg := cpWriter(t, 600, false)
	cp, err := w.MakeCheckpoint()
	require.NoError(t, err)
	for name, mut := range map[string]func(c *Checkpoint){
		"no bounds":     func(c *Checkpoint) { c.Bounds, c.Hashes = nil, nil },
		"hash count":    func(c *Checkpoint) { c.Hashes = c.Hashes[:1] },
		"last not max":  func(c *Checkpoint) { c.Max++ },
		"not ascending": func(c *Checkpoint) { c.Bounds[0] = c.Bounds[1] },
		"gc above max":  func(c *Checkpoint) { c.GC = c.Max + 1 },
		"short key":     func(c *Checkpoint) { c.Key = c.Key[:5] },
	} {
		c := cp
		c.Bounds = append([]Version(nil), cp.Bounds...)
		c.Hashes = append([][32]byte(nil), cp.Hashes...)
		mut(&c)
		j, _ := newJoiner(sg)
		require.ErrorIs(t, j.AcceptCheckpoint(c), ErrInvalid, name)
	}
	unsigned := cp
	unsigned.Sig = nil
	j, _ := newJoiner(sg)
	requireReason(t, j.AcceptCheckpoint(unsigned), ReasonUnsigned)
	// An older checkpoint does not replace a newer one.
	require.NoError(t, j.AcceptCheckpoint(cp))
	_, _, err = w.Write(KindPod, "ns/new", []byte{0x80}, false, 1)
	require.NoError(t, err)
	newer, err := w.MakeCheckpoint()
	require.NoError(t, err)
	require.NoError(t, j.AcceptCheckpoint(newer))
	require.NoError(t, j.AcceptCheckpoint(cp))
	require.Equal(t, newer.Max, j.CheckpointMax("c1"))
	// No checkpoint without a signer, or with entries above Max.
	_, err = NewState("c3").MakeCheckpoint()
	require.ErrorIs(t, err, ErrNoCheckpoint)
}

// Property: whatever the sender's chunking and message sizes, and whether
// the relay is at the checkpoint or ahead of it, a checkpointed join ends in
// the same state as a per-entry join, and a relay at the checkpoint hits
// every segment.
func TestCheckpointSplitProperty(t *testing.T) {
	w, sg := cpWriter(t, 2100, true)
	cp, err := w.MakeCheckpoint()
	require.NoError(t, err)
	ahead, _ := cpWriter(t, 2100, true)
	for i := 0; i < 3; i++ {
		_, _, err := ahead.Write(KindPod, fmt.Sprintf("ns/p%05d", 700*i+5), nil, true, 1)
		require.NoError(t, err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for round := 0; round < 12; round++ {
		src := w
		if round%3 == 2 {
			src = ahead
		}
		sizes := []int{1 + rng.IntN(700), 1 + rng.IntN(60), 1 + rng.IntN(1500)}
		j, _ := newJoiner(sg)
		require.NoError(t, j.AcceptCheckpoint(cp))
		joinIn(t, j, rechop(src.DeltaSince(Digest{}, 0), sizes), 1+rng.IntN(5))
		require.Equal(t, src.Digest()["c1"], j.Digest()["c1"], "round %d sizes %v", round, sizes)
		if src == w {
			require.EqualValues(t, len(cp.Bounds), j.CheckpointStats().Hits, "round %d sizes %v", round, sizes)
		}
	}
}

func BenchmarkCheckpointJoin(b *testing.B) {
	w, sg := cpWriter(b, 20_000, false)
	cp, err := w.MakeCheckpoint()
	require.NoError(b, err)
	ds := w.DeltaSince(Digest{}, 0)
	for _, withCP := range []bool{false, true} {
		b.Run(fmt.Sprint("checkpoint=", withCP), func(b *testing.B) {
			for range b.N {
				j, _ := newJoiner(sg)
				if withCP {
					require.NoError(b, j.AcceptCheckpoint(cp))
				}
				ready, _ := j.SplitAtCheckpoints(ds, true)
				for _, d := range ready {
					if _, err := j.Apply(d); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(w.Len("c1")*b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// The pass-through of aligned runs cuts exactly as the general re-cut.
func TestCheckpointAlignedFastPathAgrees(t *testing.T) {
	w, _ := cpWriter(t, 2100, false)
	cp, err := w.MakeCheckpoint()
	require.NoError(t, err)
	shape := func(ds []Delta) (out [][3]uint64) {
		for _, d := range ds {
			out = append(out, [3]uint64{uint64(d.From), uint64(d.To), uint64(len(d.Entries))})
		}
		return out
	}
	stream := w.DeltaSince(Digest{}, 0) // 512-entry chunks: aligned
	tested := 0
	for lo := 0; lo < len(stream); lo++ {
		for hi := lo + 1; hi <= len(stream); hi++ {
			run := stream[lo:hi]
			if !aligned(run, &cp) {
				continue
			}
			tested++
			for _, final := range []bool{false, true} {
				p1, t1 := alignedTail(run, &cp, final)
				p2, t2 := recut(run, &cp, final)
				require.Equal(t, shape(p2), shape(p1), "run %d..%d final=%v", lo, hi, final)
				require.Equal(t, shape(t2), shape(t1), "run %d..%d final=%v", lo, hi, final)
			}
		}
	}
	require.Positive(t, tested)
	// and a run cut elsewhere is not aligned
	require.False(t, aligned(rechop(stream, []int{300}), &cp))
}
