package store

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func benchPod(b testing.TB, origin string, i int, v crdt.Version) *crdt.Entry {
	return podEntry(b, origin, fmt.Sprintf("ns-%04d/pod-%07d", i/1000, i), v,
		map[string]string{"app": fmt.Sprintf("app-%d", i%50), "tier": []string{"fe", "be", "db"}[i%3]},
		fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
}

// BenchmarkCommitBatched measures write throughput with 1000-entry batches
// (one transaction, one fsync each).
func BenchmarkCommitBatched(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "s.db"), Options{})
	require.NoError(b, err)
	defer s.Close()
	const batch = 1000
	n := 0
	b.ResetTimer()
	for range b.N {
		changes := make([]crdt.Change, batch)
		for j := range changes {
			changes[j] = put(benchPod(b, "c", n, crdt.Version(n+1)))
			n++
		}
		require.NoError(b, s.Commit(changes, crdt.Digest{"c": {Max: crdt.Version(n)}}, nil))
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkCommitGroup measures group commit: 64 concurrent writers each
// committing one entry at a time; the committer coalesces them.
func BenchmarkCommitGroup(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "s.db"), Options{})
	require.NoError(b, err)
	defer s.Close()
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(n.Add(1))
			require.NoError(b, s.Commit([]crdt.Change{put(benchPod(b, "c", i, crdt.Version(i)))}, crdt.Digest{"c": {Max: crdt.Version(i)}}, nil))
		}
	})
	b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "entries/s")
}

// million is a store holding 1M pod entries (10 origins x 100 namespaces x
// 1000 pods), built once per test binary run and shared by benchmarks.
var million struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func millionStore(b *testing.B) string {
	million.once.Do(func() {
		// COASTGUARD_BENCH_1M=<path> keeps the fixture between runs.
		if p := os.Getenv("COASTGUARD_BENCH_1M"); p != "" {
			million.path = p
			if _, err := os.Stat(p); err == nil {
				return
			}
			million.err = buildMillion(b, p)
			return
		}
		million.dir, million.err = os.MkdirTemp("", "coastguard-store-bench-")
		if million.err != nil {
			return
		}
		million.path = filepath.Join(million.dir, "million.db")
		million.err = buildMillion(b, million.path)
	})
	require.NoError(b, million.err)
	return million.path
}

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		iter, _ := strconv.Atoi(os.Getenv(crashIterEnv))
		if err := crashChild(path, iter); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	code := m.Run()
	if million.dir != "" {
		_ = os.RemoveAll(million.dir)
	}
	os.Exit(code)
}

// BenchmarkQueryNamespace1000 measures a (cluster, namespace) prefix scan
// of the primary key order (/coastguard/<cluster>/pod/<ns>/) returning 1000
// pods out of 1M entries.
func BenchmarkQueryNamespace1000(b *testing.B) {
	path := millionStore(b)
	s, err := Open(path, Options{Check: CheckNever})
	require.NoError(b, err)
	defer s.Close()
	for i := range b.N {
		n := 0
		err := s.Scan(fmt.Sprintf("/coastguard/cluster-%d/pod/ns-%04d/", i%10, i%100), 0, func(string, crdt.Entry) error { n++; return nil })
		if err != nil || n != 1000 {
			b.Fatalf("got %d entries, err %v", n, err)
		}
	}
}

// BenchmarkFileBytesPerEntry reports the file size per entry of the 1M
// store (entries and digests).
func BenchmarkFileBytesPerEntry(b *testing.B) {
	path := millionStore(b)
	for range b.N {
		fi, err := os.Stat(path)
		require.NoError(b, err)
		b.ReportMetric(float64(fi.Size())/1e6, "bytes/entry")
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
	}
}

// buildMillion writes 10 origins x 100,000 pods through real crdt writer
// states (so digests and hashes are genuine), 10,000 entries per commit.
func buildMillion(b testing.TB, path string) error {
	s, err := Open(path, Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	for c := range 10 {
		origin := fmt.Sprintf("cluster-%d", c)
		st := crdt.NewState(origin)
		if err := st.SetEpoch(1); err != nil {
			return err
		}
		var pending []crdt.Change
		for i := range 100_000 {
			e := benchPod(b, origin, i, 0)
			_, ch, err := st.Write(crdt.KindPod, e.Name, e.Value, false, 1)
			if err != nil {
				return err
			}
			pending = append(pending, ch...)
			if len(pending) == 10_000 {
				if err := s.Commit(pending, st.Digest(), nil); err != nil {
					return err
				}
				pending = nil
			}
		}
	}
	return nil
}

// BenchmarkColdStart1M measures opening a 1M-entry file and restoring a
// ready crdt.State (OpenReplica as an observer: open + page check + load +
// hash verification + Restore).
func BenchmarkColdStart1M(b *testing.B) {
	path := millionStore(b)
	for _, check := range []bool{true, false} {
		b.Run(fmt.Sprintf("check=%v", check), func(b *testing.B) {
			mode := CheckNever
			if check {
				mode = CheckAlways
			}
			for range b.N {
				r, err := OpenReplica(path, "", Options{Check: mode, Logger: quiet})
				require.NoError(b, err)
				var n int
				r.View(func(st *crdt.State) {
					for _, o := range st.Origins() {
						n += st.Len(o)
					}
				})
				require.Equal(b, 1_000_000, n)
				require.Empty(b, r.ResetOrigins())
				require.NoError(b, r.Close())
			}
		})
	}
}

// BenchmarkReplicaApply measures the gossip path: a Replica applying
// deltas of 512 pod entries (crdt merge + index maintenance + one fsynced
// transaction per delta).
func BenchmarkReplicaApply(b *testing.B) {
	r, err := OpenReplica(filepath.Join(b.TempDir(), "r.db"), "self", Options{})
	require.NoError(b, err)
	defer r.Close()
	peer := crdt.NewState("peer")
	require.NoError(b, peer.SetEpoch(1))
	const per = 512
	deltas := make([]crdt.Delta, b.N)
	n := 0
	for i := range deltas {
		var d crdt.Delta
		for range per {
			e := benchPod(b, "peer", n, 0)
			w, _, err := peer.Write(crdt.KindPod, e.Name, e.Value, false, 1)
			require.NoError(b, err)
			if len(d.Entries) == 0 {
				d = w
			} else {
				d.To = w.To
				d.Entries = append(d.Entries, w.Entries...)
			}
			n++
		}
		deltas[i] = d
	}
	b.ResetTimer()
	for _, d := range deltas {
		ch, err := r.Apply(d)
		require.NoError(b, err)
		require.Len(b, ch, per)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}

var quiet = slog.New(slog.DiscardHandler)
