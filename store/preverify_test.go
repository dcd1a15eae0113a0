package store

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

var joinSigner = testSigner{ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))}

// joinSource is an origin's writer state holding n pod entries, signed
// when signed is set.
func joinSource(t testing.TB, origin string, n int, signed bool) *crdt.State {
	src := crdt.NewState(origin)
	require.NoError(t, src.SetEpoch(1))
	if signed {
		src.SetSigner(joinSigner)
	}
	for i := 0; i < n; i++ {
		_, _, err := src.Write(crdt.KindPod, fmt.Sprintf("team-%02d/web-%07d", i%50, i),
			podValue(t, map[string]string{"app": fmt.Sprintf("web-%d", i%97), "pod-template-hash": fmt.Sprintf("%010x", i), "tier": "frontend"},
				fmt.Sprintf("10.%d.%d.%d", 244+(i>>16)&3, (i>>8)&255, i&255)), false, int64(i+1))
		require.NoError(t, err)
	}
	return src
}

// syncBatches cuts what an empty replica lacks into sync answers the size
// gossip sends (16384 entries in 512-entry chunks).
func syncBatches(src ...*crdt.State) [][]crdt.Delta {
	var out [][]crdt.Delta
	var cur []crdt.Delta
	n := 0
	for _, s := range src {
		for _, d := range s.DeltaSince(crdt.Digest{}, 0) {
			cur = append(cur, d)
			n += len(d.Entries)
			if n >= 16384 {
				out, cur, n = append(out, cur), nil, 0
			}
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// tofuVerifier pins the first key that verifies for an origin, like
// gossip.Trust without a bundle; it counts its calls.
type tofuVerifier struct {
	mu    sync.Mutex
	pins  map[string][]byte
	calls int
}

func (v *tofuVerifier) Verify(origin string, key, msg, sig []byte) error {
	v.mu.Lock()
	v.calls++
	pin := v.pins[origin]
	v.mu.Unlock()
	use := pin
	if use == nil {
		use = key
	} else if key != nil && !bytes.Equal(key, pin) {
		return &crdt.TrustError{Reason: crdt.ReasonKeyMismatch, Origin: origin}
	}
	if len(use) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize || !ed25519.Verify(use, msg, sig) {
		return &crdt.TrustError{Reason: crdt.ReasonBadSignature, Origin: origin}
	}
	if pin == nil {
		v.mu.Lock()
		if v.pins[origin] == nil {
			v.pins[origin] = bytes.Clone(key)
		}
		v.mu.Unlock()
	}
	return nil
}

func (v *tofuVerifier) Key(origin string) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.pins[origin]
}

// A joining replica verifies a full sync's signatures in parallel: every
// entry arrives, the crdt takes each entry's answer from the pre-pass,
// except the first chunk of a never-seen origin, which pins its key (trust
// on first use) serially.
func TestJoinPreVerifiesInParallel(t *testing.T) {
	const n = 1500
	src := joinSource(t, "c1", n, true)
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
			ver := &tofuVerifier{pins: map[string][]byte{}}
			r := openReplica(t, filepath.Join(t.TempDir(), "r.db"), "self", Options{VerifyWorkers: workers})
			r.SetVerifier(ver, nil)
			for _, batch := range syncBatches(src) {
				_, err := r.Apply(batch...)
				require.NoError(t, err)
			}
			require.Equal(t, src.Digest()["c1"], r.Digest()["c1"])
			require.Equal(t, joinSigner.PublicKey(), ver.Key("c1"))
			if workers == 1 {
				require.Zero(t, r.pv.hits)
				return
			}
			first := len(src.DeltaSince(crdt.Digest{}, 0)[0].Entries)
			// all but the pinning chunk, and the head record its state
			// mark signs (verified with the mark)
			require.Equal(t, n-first-1, r.pv.hits, "all but the pinning chunk pre-verified")
			require.Equal(t, n-first-1, r.pv.preVerified)
			require.Empty(t, r.pv.ok, "nothing left over after Apply")
		})
	}
}

// A bad signature is refused exactly as without the pre-pass: the same
// error, the same entries applied before it.
func TestPreVerifyRefusesLikeSerial(t *testing.T) {
	src := joinSource(t, "c1", 1200, true)
	outcome := func(workers int) (crdt.OriginDigest, error) {
		ver := &tofuVerifier{pins: map[string][]byte{"c1": joinSigner.PublicKey()}}
		r := openReplica(t, filepath.Join(t.TempDir(), "r.db"), "self", Options{VerifyWorkers: workers})
		r.SetVerifier(ver, nil)
		batch := syncBatches(src)[0]
		batch[2].Entries[7].Sig = bytes.Clone(batch[2].Entries[7].Sig)
		batch[2].Entries[7].Sig[0] ^= 1
		_, err := r.Apply(batch...)
		return r.Digest()["c1"], err
	}
	d1, err1 := outcome(1)
	d4, err4 := outcome(4)
	var te *crdt.TrustError
	require.True(t, errors.As(err1, &te))
	require.Equal(t, crdt.ReasonBadSignature, te.Reason)
	require.Equal(t, err1.Error(), err4.Error())
	require.Equal(t, d1, d4)
	// merged, and the progress advertised: the watermark itself waits for
	// the origin's state mark (issue 29, item 1)
	require.NotZero(t, d1.Reset, "the chunks before the bad one are applied")
}

// BenchmarkJoinIngest measures how fast an empty replica takes in a full
// sync (the path of a cluster joining the set): sync answers of 16384
// entries (512-entry chunks, as gossip sends them) through Replica.Apply
// (crdt merge, signature verification, one bbolt transaction and fsync per
// answer). Entries are realistic pods (~120 B values).
//
//	go test -run XXX -bench JoinIngest -benchtime 1x ./store/
func BenchmarkJoinIngest(b *testing.B) {
	const n = 50_000
	for _, tc := range []struct {
		name    string
		signed  bool
		workers int
		cp      bool
	}{{"unsigned", false, 0, false}, {"signed/serial", true, 1, false}, {"signed/parallel", true, runtime.GOMAXPROCS(0), false},
		{"signed/checkpoint", true, 1, true}} {
		b.Run(tc.name, func(b *testing.B) {
			src := joinSource(b, "c1", n, tc.signed)
			batches := syncBatches(src)
			var cp crdt.Checkpoint
			if tc.cp {
				var err error
				cp, err = src.MakeCheckpoint()
				require.NoError(b, err)
			}
			b.ResetTimer()
			var took time.Duration
			for range b.N {
				b.StopTimer()
				r, err := OpenReplica(filepath.Join(b.TempDir(), "r.db"), "self", Options{VerifyWorkers: tc.workers})
				require.NoError(b, err)
				if tc.signed {
					r.SetVerifier(&tofuVerifier{pins: map[string][]byte{"c1": joinSigner.PublicKey()}}, nil)
				}
				b.StartTimer()
				t0 := time.Now()
				if tc.cp {
					require.NoError(b, r.AcceptCheckpoint(cp))
				}
				for _, batch := range batches {
					if _, err := r.Apply(batch...); err != nil {
						b.Fatal(err)
					}
				}
				took += time.Since(t0)
				b.StopTimer()
				require.Equal(b, uint64(n), r.Digest()["c1"].Max.Seq())
				require.NoError(b, r.Close())
				b.StartTimer()
			}
			b.ReportMetric(float64(n*b.N)/took.Seconds(), "entries/s")
		})
	}
}

// A joining replica that accepted the origin's checkpoint takes in a full
// sync with one signature verification (the checkpoint's), and ends in the
// same state as a per-entry join; parallel pre-verification leaves the
// vouched deltas alone.
func TestJoinWithCheckpoint(t *testing.T) {
	const n = 3000
	src := joinSource(t, "c1", n, true)
	cp, err := src.MakeCheckpoint()
	require.NoError(t, err)
	// chunks of another size than the segments, as a relay with other
	// budgets sends them
	var batches [][]crdt.Delta
	for _, d := range src.DeltaSince(crdt.Digest{}, 700) {
		batches = append(batches, []crdt.Delta{d})
	}
	rest := src.DeltaSince(crdt.Digest{"c1": crdt.OriginDigest{Max: batches[len(batches)-1][0].To}}, 0)
	batches = append(batches, rest)
	for _, workers := range []int{1, 4} {
		ver := &tofuVerifier{pins: map[string][]byte{"c1": joinSigner.PublicKey()}}
		r := openReplica(t, filepath.Join(t.TempDir(), "r.db"), "self", Options{VerifyWorkers: workers})
		r.SetVerifier(ver, nil)
		require.NoError(t, r.AcceptCheckpoint(cp))
		require.Equal(t, cp.Max, r.CheckpointMax("c1"))
		for _, batch := range batches {
			_, err := r.Apply(batch...)
			require.NoError(t, err)
		}
		require.Equal(t, src.Digest()["c1"], r.Digest()["c1"])
		st := r.CheckpointStats()
		// The second segment arrives in two batches, cut at 700: it misses
		// (twice) and its 512 entries are verified one by one.
		require.EqualValues(t, len(cp.Bounds)-1, st.Hits)
		require.EqualValues(t, 2, st.Misses)
		require.EqualValues(t, n-crdt.SegmentEntries, st.SkippedVerifies)
		if workers == 1 {
			// the checkpoint, the state mark (once), the missed segment
			require.Equal(t, 2+crdt.SegmentEntries, ver.calls)
		} else {
			require.Equal(t, crdt.SegmentEntries, r.pv.preVerified, "vouched deltas are not pre-verified")
		}
	}
}
