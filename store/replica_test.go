package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func podValue(t testing.TB, labels map[string]string, ips ...string) []byte {
	b, err := crdt.EncodeValue(&crdt.PodValue{Labels: labels, IPs: ips})
	require.NoError(t, err)
	return b
}

func openReplica(t *testing.T, path, self string, opts Options) *Replica {
	t.Helper()
	r, err := OpenReplica(path, self, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// stateEntries lists every stored entry of st, sorted by origin then kind
// then name (the store's key order is not needed, only grouping by origin).
func stateEntries(st *crdt.State) []crdt.Entry {
	var out []crdt.Entry
	for _, o := range st.Origins() {
		for k := crdt.KindCluster; k <= crdt.KindReport; k++ {
			st.Range(o, k, func(e crdt.Entry) bool { out = append(out, e); return true })
		}
	}
	return out
}

func TestOriginHashesMatchCRDT(t *testing.T) {
	st := crdt.NewState("c1")
	require.NoError(t, st.SetEpoch(3))
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 500 {
		name := fmt.Sprintf("ns/p%d", r.IntN(100))
		var val []byte
		del := r.IntN(4) == 0
		if !del {
			val = podValue(t, map[string]string{"i": fmt.Sprint(i)})
		}
		_, _, err := st.Write(crdt.KindPod, name, val, del, int64(i))
		require.NoError(t, err)
	}
	h := originHashes(stateEntries(st))
	require.Equal(t, st.Digest()["c1"].Hash, h["c1"], "store recomputes origin hashes exactly as crdt does")
}

func TestReplicaWriteReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	reg := prometheus.NewRegistry()
	r, err := OpenReplica(path, "c1", Options{Registerer: reg})
	require.NoError(t, err)
	e1 := r.Epoch()
	require.GreaterOrEqual(t, e1, uint32(1))
	var last crdt.Version
	for i := range 50 {
		d, err := r.Write(crdt.KindPod, fmt.Sprintf("default/p%d", i%20), podValue(t, map[string]string{"app": "web"}, fmt.Sprintf("10.0.0.%d", i)), i%7 == 6)
		require.NoError(t, err)
		require.Greater(t, d.To, last)
		last = d.To
	}
	dig := r.Digest()
	require.NoError(t, r.Close())

	r2 := openReplica(t, path, "c1", Options{Registerer: reg})
	require.Equal(t, dig, r2.Digest())
	require.Empty(t, r2.ResetOrigins())
	require.Greater(t, r2.Epoch(), e1, "epoch must be bumped on every open")
	d, err := r2.Write(crdt.KindPod, "default/new", podValue(t, nil, "10.9.9.9"), false)
	require.NoError(t, err)
	require.Greater(t, d.To, last, "versions never regress across restarts")
	require.Equal(t, r2.Epoch(), d.To.Epoch())
	refs := livePaths(t, r2.Store(), "/coastguard/c1/pod/default/")
	var live int
	r2.View(func(st *crdt.State) {
		st.Range("c1", crdt.KindPod, func(e crdt.Entry) bool {
			if !e.Deleted {
				live++
			}
			return true
		})
	})
	require.Len(t, refs, live)
	require.Equal(t, float64(21), testutil.ToFloat64(r2.Store().m.entriesPerOrigin.WithLabelValues("c1")))
	n, err := testutil.GatherAndCount(reg, "coastguard_store_commit_seconds", "coastguard_store_corrupt_files_total")
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func TestReplicaApplyRetireAndSubscribe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r := openReplica(t, path, "c1", Options{})
	var mu sync.Mutex
	var got []crdt.Change
	r.Subscribe(func(ch []crdt.Change) {
		mu.Lock()
		got = append(got, ch...)
		mu.Unlock()
	})
	peer := crdt.NewState("peer")
	require.NoError(t, peer.SetEpoch(1))
	for i := range 30 {
		_, _, err := peer.Write(crdt.KindPod, fmt.Sprintf("ns%d/p%d", i%3, i), podValue(t, map[string]string{"app": fmt.Sprint(i % 2)}, fmt.Sprintf("10.1.0.%d", i)), false, 0)
		require.NoError(t, err)
	}
	_, _, err := peer.Write(crdt.KindNamespace, "ns0", mustEncode(t, &crdt.NamespaceValue{}), false, 0)
	require.NoError(t, err)
	changes, err := r.Apply(peer.DeltaSince(r.Digest(), 0)...)
	require.NoError(t, err)
	require.Len(t, changes, 31)
	require.Equal(t, peer.Digest()["peer"].Hash, r.Digest()["peer"].Hash)

	require.Len(t, livePaths(t, r.Store(), "/coastguard/peer/pod/ns1/"), 10)
	require.Equal(t, []string{"/coastguard/peer/namespace/ns0"}, livePaths(t, r.Store(), "/coastguard/peer/namespace/"))

	// Retire the peer: everything of it disappears, from state and file.
	rc, err := r.ApplyRetire(r.RetireRecord("peer"))
	require.NoError(t, err)
	require.Len(t, rc, 31)
	require.Empty(t, scanPaths(t, r.Store(), "/coastguard/peer/", 0))
	require.NoError(t, r.Close())

	mu.Lock()
	require.Len(t, got, 62, "subscribers see every change after commit")
	require.Nil(t, got[0].Old)
	require.NotNil(t, got[31].Old)
	require.Nil(t, got[31].New)
	mu.Unlock()

	r2 := openReplica(t, path, "c1", Options{})
	require.Equal(t, crdt.Version(0), r2.Digest()["c1"].Max)
	require.NotZero(t, r2.Digest()["peer"].Retired)
	snap, err := r2.Store().Load()
	require.NoError(t, err)
	require.Empty(t, snap.Entries)
	// A retired peer's old deltas do not resurrect anything.
	ch, err := r2.Apply(peer.DeltaSince(crdt.Digest{}, 0)...)
	require.NoError(t, err)
	require.Empty(t, ch)
}

func mustEncode(t testing.TB, v any) []byte {
	b, err := crdt.EncodeValue(v)
	require.NoError(t, err)
	return b
}

func TestReplicaSetMinEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	require.NoError(t, r.SetMinEpoch(50))
	require.Equal(t, uint32(50), r.Epoch())
	require.NoError(t, r.SetMinEpoch(10)) // never lowers
	require.Equal(t, uint32(50), r.Epoch())
	d, err := r.Write(crdt.KindPod, "ns/p", podValue(t, nil), false)
	require.NoError(t, err)
	require.Equal(t, uint32(50), d.To.Epoch())
	require.NoError(t, r.Close())
	r2 := openReplica(t, path, "c1", Options{})
	require.Equal(t, uint32(51), r2.Epoch())
}

// TestReplicaSetMinEpochBelowSeenEpochs is the nemesis's seed-8 finding: a
// daemon whose store was lost restarts, learns from peers that its own
// origin already wrote at epoch 3, and wins the Lease with an epoch hint of
// 2. The hint is a floor, not an exact epoch: the writer must move to the
// minimum safe epoch instead of failing (which left the cluster with a
// Lease holder that enforced nothing).
func TestReplicaSetMinEpochBelowSeenEpochs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	old := crdt.NewState("c1")
	require.NoError(t, old.SetEpoch(3))
	_, _, err := old.Write(crdt.KindPod, "ns/p", podValue(t, nil, "10.0.0.1"), false, 0)
	require.NoError(t, err)

	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	_, err = r.Apply(old.DeltaSince(r.Digest(), 0)...)
	require.NoError(t, err)
	require.NoError(t, r.SetMinEpoch(2), "a hint below the epochs already seen is raised, not refused")
	require.GreaterOrEqual(t, r.Epoch(), uint32(4))
	d, err := r.Write(crdt.KindPod, "ns/q", podValue(t, nil, "10.0.0.2"), false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, d.To.Epoch(), uint32(4))
}

func TestReplicaDigestMismatchResetsOrigin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	peer := crdt.NewState("peer")
	require.NoError(t, peer.SetEpoch(1))
	for i := range 10 {
		_, _, err := peer.Write(crdt.KindPod, fmt.Sprintf("ns/p%d", i), podValue(t, nil, "10.0.0.1"), false, 0)
		require.NoError(t, err)
	}
	_, err = r.Apply(peer.DeltaSince(r.Digest(), 0)...)
	require.NoError(t, err)
	_, err = r.Write(crdt.KindPod, "ns/mine", podValue(t, nil), false)
	require.NoError(t, err)
	want := r.Digest()
	require.NoError(t, r.Close())

	// Tamper with the peer's persisted hash, as a torn or buggy write would.
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		d := want["peer"]
		d.Hash ^= 1
		return tx.Bucket(bucketOrigins).Put(encodeKey("peer"), encodeDigest(d))
	}))
	require.NoError(t, db.Close())

	reg := prometheus.NewRegistry()
	r2 := openReplica(t, path, "c1", Options{Registerer: reg})
	require.Equal(t, []string{"peer"}, r2.ResetOrigins())
	got := r2.Digest()
	require.Equal(t, crdt.Version(0), got["peer"].Max, "untrusted origin must be re-pulled")
	require.Equal(t, want["peer"].Hash, got["peer"].Hash, "hash recomputed from entries")
	require.Equal(t, want["c1"].Max, got["c1"].Max, "other origins stay trusted")
	require.Equal(t, 1.0, testutil.ToFloat64(r2.Store().m.resetOrigins))
	require.Len(t, livePaths(t, r2.Store(), "/coastguard/peer/pod/ns/"), 10, "entries stay usable for enforcement meanwhile")
	// The peer re-sends; the origin converges.
	_, err = r2.Apply(peer.DeltaSince(got, 0)...)
	require.NoError(t, err)
	require.Equal(t, peer.Digest()["peer"].Max, r2.Digest()["peer"].Max)
	require.NoError(t, r2.Close())
	r3 := openReplica(t, path, "c1", Options{})
	require.Empty(t, r3.ResetOrigins())
}

func TestReplicaCorruptFileStartsEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	_, err = r.Write(crdt.KindPod, "ns/p", podValue(t, nil), false)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	// A record that fails to decode at load (valid bbolt, bad content).
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEntries).Put(entryKey(crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: "ns/p"}), []byte{7})
	}))
	require.NoError(t, db.Close())
	r2 := openReplica(t, path, "c1", Options{})
	require.NotEmpty(t, r2.Info().MovedAside)
	require.ErrorIs(t, r2.Info().Corrupt, ErrCorrupt)
	require.FileExists(t, r2.Info().MovedAside)
	require.Empty(t, r2.Digest()["c1"].Max)
	_, err = r2.Write(crdt.KindPod, "ns/p", podValue(t, nil), false)
	require.NoError(t, err)
}

func commitCount(t *testing.T, r *Replica) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, r.Store().m.commitLatency.Write(&m))
	return m.GetHistogram().GetSampleCount()
}

func TestReplicaBumpEpochAfterSelfRetired(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	_, err = r.Write(crdt.KindPod, "ns/p", podValue(t, nil), false)
	require.NoError(t, err)
	// Another member retires us (we were believed gone).
	_, err = r.ApplyRetire(r.RetireRecord("c1"))
	require.NoError(t, err)
	_, err = r.Write(crdt.KindPod, "ns/p", podValue(t, nil), false)
	require.ErrorIs(t, err, crdt.ErrNeedsEpochBump)
	e, err := r.BumpEpoch()
	require.NoError(t, err)
	d, err := r.Write(crdt.KindPod, "ns/p", podValue(t, nil), false)
	require.NoError(t, err)
	require.Equal(t, e, d.To.Epoch())
	require.NoError(t, r.Close())
	r2 := openReplica(t, path, "c1", Options{})
	require.Greater(t, r2.Epoch(), e)
	var ok bool
	r2.View(func(st *crdt.State) { _, ok = st.Get(crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: "ns/p"}) })
	require.True(t, ok, "the post-retirement write survives a restart")
}

func TestReplicaWriteManyOneCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	n := commitCount(t, r)
	ops := make([]WriteOp, 100)
	for i := range ops {
		ops[i] = WriteOp{Kind: crdt.KindPod, Name: fmt.Sprintf("ns/p%d", i), Value: podValue(t, map[string]string{"a": "b"}, "10.0.0.1")}
	}
	ops = append(ops, WriteOp{Kind: crdt.KindPod, Name: "no-slash-bad\x00", Value: nil, Deleted: true})
	deltas, err := r.WriteMany(ops)
	require.Error(t, err, "invalid op reported")
	require.Len(t, deltas, 100)
	require.Equal(t, n+1, commitCount(t, r), "one transaction for the whole batch")
	require.NoError(t, r.Close())
	r2 := openReplica(t, path, "c1", Options{})
	require.Len(t, livePaths(t, r2.Store(), "/coastguard/c1/pod/"), 100)
}

func TestReplicaDeferredPageCheckRejectsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	populated(t, path)
	// Unclean image (no clean mark) with damage in the second half only.
	s, err := Open(path, Options{Check: CheckNever})
	require.NoError(t, err)
	img, err := os.ReadFile(path) // taken while open: mark cleared
	require.NoError(t, err)
	require.NoError(t, s.Close())
	r := rand.New(rand.NewPCG(21, 22))
	for p := len(img) / 4096 / 2; p < len(img)/4096; p++ {
		off := p*4096 + r.IntN(64)
		for i := range 32 {
			img[off+i] = byte(r.Uint32())
		}
	}
	require.NoError(t, os.WriteFile(path, img, 0o600))
	rep := openReplica(t, path, "", Options{})
	info := rep.Info()
	require.ErrorIs(t, info.Corrupt, ErrCorrupt)
	require.FileExists(t, info.MovedAside)
	require.Empty(t, rep.Digest())
}

// Barrier runs its function after the change sets of every earlier
// mutation were delivered, in order, on the feed's goroutine.
func TestReplicaBarrierAfterEarlierChanges(t *testing.T) {
	rep, err := OpenReplica(filepath.Join(t.TempDir(), "s.db"), "a", Options{})
	require.NoError(t, err)
	defer rep.Close()
	var mu sync.Mutex
	var seen []string
	rep.Subscribe(func(ch []crdt.Change) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range ch {
			seen = append(seen, c.Key.Name)
		}
	})
	v, err := crdt.EncodeValue(&crdt.NamespaceValue{})
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		_, err := rep.Write(crdt.KindNamespace, fmt.Sprint("ns", i), v, false)
		require.NoError(t, err)
	}
	done := make(chan int, 1)
	rep.Barrier(func() {
		mu.Lock()
		defer mu.Unlock()
		done <- len(seen)
	})
	select {
	case n := <-done:
		require.Equal(t, 50, n, "every earlier change set was delivered before the barrier")
	case <-time.After(10 * time.Second):
		t.Fatal("the barrier never ran")
	}
}

// RetireOwn retires the own origin up to its watermark once: the record is
// what gossip disseminates, applied here first; with nothing left to
// retire it is zero.
func TestRetireOwn(t *testing.T) {
	r := NewMemReplica("a")
	t.Cleanup(func() { _ = r.Close() })
	rt, err := r.RetireOwn()
	require.NoError(t, err)
	require.Zero(t, rt, "nothing written: nothing to retire")
	_, err = r.Write(crdt.KindPod, "ns/p", []byte("v"), false)
	require.NoError(t, err)
	head := r.Digest()["a"].Max
	rt, err = r.RetireOwn()
	require.NoError(t, err)
	require.Equal(t, crdt.Retire{Origin: "a", UpTo: head}, rt)
	require.Equal(t, head, r.Digest()["a"].Retired, "applied locally")
	rt, err = r.RetireOwn()
	require.NoError(t, err)
	require.Zero(t, rt, "already retired")
	obs := NewMemReplica("")
	t.Cleanup(func() { _ = obs.Close() })
	_, err = obs.RetireOwn()
	require.ErrorIs(t, err, crdt.ErrObserver)
}
