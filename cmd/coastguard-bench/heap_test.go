package main

import (
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/store"
)

// BenchmarkHeapPerRemotePodEntry reports the live heap per remote pod entry
// of an open store.Replica (crdt state) and of the replica plus the daemon's
// enforce mirror, at 100k realistic pods (10 origins): the small-scale
// version of the bench's 1M "store" section.
//
//	go test -run XXX -bench HeapPerRemotePodEntry -benchtime 1x ./cmd/coastguard-bench/
//
// "unique" gives every pod its own pod-template-hash (no two pods share a
// label set: the compact enforce view's worst case); "rs10" puts pods in
// ReplicaSets of 10 that share their labels, as Deployments do.
func BenchmarkHeapPerRemotePodEntry(b *testing.B) {
	for _, tc := range []struct {
		name string
		rs   int
	}{{"unique", 1}, {"rs10", 10}} {
		b.Run(tc.name, func(b *testing.B) { benchHeap(b, tc.rs) })
	}
}

func benchHeap(b *testing.B, rs int) {
	const origins, per = 10, 10_000
	path := filepath.Join(b.TempDir(), "s.db")
	_, err := buildStoreWith(path, origins, per, func(i int) ([]byte, error) { return podValueInRS(i, rs) })
	require.NoError(b, err)
	total := float64(origins * per)
	b.ResetTimer()
	for range b.N {
		before := heapAlloc()
		r, err := store.OpenReplica(path, "", store.Options{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		rep := heapAlloc()
		m, load, errs := loadMirror(r)
		require.Empty(b, errs)
		withMirror := heapAlloc()
		b.ReportMetric(float64(rep-before)/total, "B/entry-replica")
		b.ReportMetric(float64(withMirror-before)/total, "B/entry-replica+mirror")
		b.ReportMetric(float64(withMirror-rep)/total, "B/entry-mirror")
		b.ReportMetric(total/load.Seconds(), "mirror-load-entries/s")
		runtime.KeepAlive(m)
		require.NoError(b, r.Close())
	}
}
