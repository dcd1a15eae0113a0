package main

import (
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/store"
)

// BenchmarkHeapPerRemotePodEntry reports the live heap per remote pod entry
// of an open store.Replica (crdt state) and of the replica plus the daemon's
// enforce mirror, at 100k realistic pods (10 origins): the small-scale
// version of the bench's 1M "store" section.
//
//	go test -run XXX -bench HeapPerRemotePodEntry -benchtime 1x ./cmd/coastguard-bench/
func BenchmarkHeapPerRemotePodEntry(b *testing.B) {
	const origins, per = 10, 10_000
	path := filepath.Join(b.TempDir(), "s.db")
	_, err := buildStore(path, origins, per)
	require.NoError(b, err)
	total := float64(origins * per)
	b.ResetTimer()
	for range b.N {
		before := heapAlloc()
		r, err := store.OpenReplica(path, "", store.Options{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		rep := heapAlloc()
		m := daemon.NewMirror("cluster-self")
		var errs []error
		r.View(func(st *crdt.State) { errs = m.Load(st) })
		require.Empty(b, errs)
		withMirror := heapAlloc()
		b.ReportMetric(float64(rep-before)/total, "B/entry-replica")
		b.ReportMetric(float64(withMirror-before)/total, "B/entry-replica+mirror")
		b.ReportMetric(float64(withMirror-rep)/total, "B/entry-mirror")
		runtime.KeepAlive(m)
		require.NoError(b, r.Close())
	}
}
