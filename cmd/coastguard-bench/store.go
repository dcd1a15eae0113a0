package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/model"
	"github.com/coastguard-mcnp/coastguard/store"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// realisticPodValue is a typical pod as the inventory writer encodes it:
// three labels (one a pod-template-hash), one IP, phase, one named port.
func realisticPodValue(i int) ([]byte, error) { return podValueInRS(i, 1) }

// podValueInRS is realisticPodValue for pods in ReplicaSets of rs pods:
// pods i/rs share their pod-template-hash (and so every label).
func podValueInRS(i, rs int) ([]byte, error) {
	h := uint64(i / rs)
	return crdt.EncodeValue(&crdt.PodValue{
		Labels: map[string]string{
			"app":               fmt.Sprintf("web-%d", (i/rs)%97),
			"pod-template-hash": fmt.Sprintf("%010x", h*2654435761%(1<<40)),
			"tier":              "frontend",
		},
		IPs:   []string{fmt.Sprintf("10.%d.%d.%d", 244+(i>>16)&3, (i>>8)&255, i&255)},
		Phase: "Running",
		Ports: []crdt.NamedPort{{Name: "http", Port: 8080}},
	})
}

// buildStore writes origins x perOrigin pods through real crdt writer
// states into a bbolt file, 10,000 entries per commit.
func buildStore(path string, origins, perOrigin int) (time.Duration, error) {
	return buildStoreWith(path, origins, perOrigin, realisticPodValue)
}

func buildStoreWith(path string, origins, perOrigin int, value func(int) ([]byte, error)) (time.Duration, error) {
	t0 := time.Now()
	s, err := store.Open(path, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	// On the error paths only; the success path returns Close's error.
	defer func() { _ = s.Close() }()
	for c := 0; c < origins; c++ {
		st := crdt.NewState(fmt.Sprintf("cluster-%02d", c))
		if err := st.SetEpoch(1); err != nil {
			return 0, err
		}
		var pending []crdt.Change
		for i := 0; i < perOrigin; i++ {
			v, err := value(c*perOrigin + i)
			if err != nil {
				return 0, err
			}
			_, ch, err := st.Write(crdt.KindPod, fmt.Sprintf("team-%02d/web-%07d", i%50, i), v, false, 1)
			if err != nil {
				return 0, err
			}
			pending = append(pending, ch...)
			if len(pending) == 10_000 || i == perOrigin-1 {
				if err := s.Commit(pending, st.Digest(), nil); err != nil {
					return 0, err
				}
				pending = nil
			}
		}
	}
	return time.Since(t0), s.Close()
}

func countEntries(path string) (int, error) {
	r, err := store.OpenReplica(path, "", store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	var n int
	r.View(func(st *crdt.State) {
		for _, o := range st.Origins() {
			n += st.Len(o)
		}
	})
	return n, r.Close()
}

func storeFixture(origins, per int) (path string, built bool, took time.Duration, err error) {
	dir := filepath.Join(".cache", "bench")
	if root, rerr := harness.RepoRoot(); rerr == nil {
		dir = filepath.Join(root, ".cache", "bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, 0, err
	}
	path = filepath.Join(dir, fmt.Sprintf("store-%dx%d.db", origins, per))
	if _, serr := os.Stat(path); serr == nil {
		if n, cerr := countEntries(path); cerr == nil && n == origins*per {
			return path, false, 0, nil
		} else {
			slog.Info("store fixture unusable, rebuilding", "path", path, "entries", n, "err", cerr)
		}
	}
	tmp := path + ".building"
	_ = os.Remove(tmp)
	slog.Info("building store fixture", "path", path, "entries", origins*per)
	took, err = buildStore(tmp, origins, per)
	if err != nil {
		_ = os.Remove(tmp)
		return "", false, 0, fmt.Errorf("build: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", false, 0, err
	}
	return path, true, took, nil
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// runStore measures the store: building the fixture (when it is not
// cached), cold start, heap per entry and the time a restarting daemon
// needs before it can enforce.
func runStore(ctx context.Context, cfg *config, rec *recorder) error {
	origins, per := 10, 100_000
	runs := 3
	if cfg.quick {
		origins, per, runs = 10, 10_000, 2
	}
	total := origins * per
	// The fixture is cached under .cache/bench (git-ignored): building 1M
	// entries takes minutes on a loaded machine. A cached file that no
	// longer opens (store format changed) or holds the wrong count is
	// rebuilt.
	path, built, buildDur, err := storeFixture(origins, per)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	params := map[string]any{"entries": total, "origins": origins, "file_mib": round(float64(fi.Size()) / (1 << 20))}
	if built {
		rec.add("store_build_entries_per_s", float64(total)/buildDur.Seconds(), "entries/s",
			merge(params, map[string]any{"batch": 10000, "fsync": "per commit"}), "", nil)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// Each run, back to back: the two steps one after the other (store
	// open, then Mirror.Load of the restored state), then what the daemon
	// does (daemon.LoadState: the view built while the replica restores
	// the same entries, on the second core). The latter is "ready to
	// enforce", the cold-start figure.
	var res storeRuns
	for i := 0; i < runs; i++ {
		if err := res.serialRun(path, total, i == runs-1); err != nil {
			return err
		}
		heapAlloc() // the serial run's garbage is not the next run's to collect
		if err := res.loadStateRun(path, origins); err != nil {
			return err
		}
		heapAlloc()
	}
	res.record(rec, cfg, params, runs)
	return nil
}

// storeRuns collects the store section's figures over its runs.
type storeRuns struct {
	// per run, in ms: store open, Mirror.Load after it, both one after
	// the other, and daemon.LoadState
	cold, views, serial, ready []float64
	// live heap per entry of the last run: the open replica, and it with
	// the enforce mirror
	heapRep, heapMirror float64
}

// quickless returns the target for a full run, none for a -quick one (its
// sizes are too small for the goal to mean anything).
func quickless(cfg *config, target string, limit float64) (string, func(float64) bool) {
	if cfg.quick {
		return "", nil
	}
	return target, le(limit)
}

// serialRun opens the store, checks it holds total entries, then loads a
// mirror from it (the two steps one after the other), and measures the heap
// on the last run.
func (res *storeRuns) serialRun(path string, total int, last bool) error {
	quiet := slog.New(slog.DiscardHandler)
	before := heapAlloc()
	t0 := time.Now()
	r, err := store.OpenReplica(path, "", store.Options{Logger: quiet})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	var n int
	r.View(func(st *crdt.State) {
		for _, o := range st.Origins() {
			n += st.Len(o)
		}
	})
	opened := time.Since(t0)
	if n != total {
		_ = r.Close()
		return fmt.Errorf("replica holds %d entries, want %d", n, total)
	}
	if last {
		// Live heap of an open replica (bbolt mmap is not heap), then
		// with the daemon's enforce mirror of the same entries.
		res.heapRep = float64(heapAlloc()-before) / float64(total)
	}
	m, viewed, errs := loadMirror(r)
	if len(errs) > 0 {
		_ = r.Close()
		return fmt.Errorf("mirror load: %v", errs[0])
	}
	if last {
		res.heapMirror = float64(heapAlloc()-before) / float64(total)
	}
	runtime.KeepAlive(m)
	runtime.KeepAlive(r)
	if err := r.Close(); err != nil {
		return err
	}
	res.cold, res.views, res.serial = append(res.cold, ms(opened)), append(res.views, ms(viewed)), append(res.serial, ms(opened+viewed))
	return nil
}

// loadMirror loads an enforce mirror from the open replica as the daemon's
// cold start does, and returns it, how long the load took and its errors.
func loadMirror(r *store.Replica) (*model.Mirror, time.Duration, []error) {
	m := model.NewMirror("cluster-self")
	m.SetPipeline(daemon.Overlap) // the daemon's cold start
	var errs []error
	t0 := time.Now()
	r.View(func(st *crdt.State) { errs = m.Load(st) })
	return m, time.Since(t0), errs
}

// loadStateRun measures what the daemon does: daemon.LoadState, the view
// built while the replica restores; it checks the view holds every origin.
func (res *storeRuns) loadStateRun(path string, origins int) error {
	m2 := model.NewMirror("cluster-self")
	m2.SetPipeline(daemon.Overlap) // the daemon's cold start
	t2 := time.Now()
	r2, errs, err := daemon.LoadState(path, "", store.Options{Logger: slog.New(slog.DiscardHandler)}, m2)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	res.ready = append(res.ready, ms(time.Since(t2)))
	if len(errs) > 0 || len(m2.Inventory().Clusters()) != origins {
		_ = r2.Close()
		return fmt.Errorf("load state: %d clusters in the view, errors %v", len(m2.Inventory().Clusters()), errs)
	}
	runtime.KeepAlive(m2)
	return r2.Close()
}

// record adds the store section's metrics.
func (res *storeRuns) record(rec *recorder, cfg *config, params map[string]any, runs int) {
	target, ok := quickless(cfg, "<= 10000", 10000)
	rec.add("cold_start_ms", median(res.cold), "ms", merge(params, map[string]any{
		"path": "store.OpenReplica (default check: after unclean shutdown only) + crdt.Restore", "runs": runs, "stat": "median",
		"page_cache": "warm (the store prefetches the file sequentially before opening)"}), target, ok)
	htarget, hok := quickless(cfg, "<= 500", 500)
	rec.add("heap_bytes_per_entry", res.heapRep, "B", merge(params, map[string]any{
		"what": "live heap of an open store.Replica (crdt state + names) per pod entry"}), htarget, hok)
	rec.add("heap_bytes_per_entry_with_mirror", res.heapMirror, "B", merge(params, map[string]any{
		"what": "replica + model.Mirror (enforce inventory) per pod entry"}), "", nil)
	rec.add("mirror_load_ms", median(res.views), "ms", merge(params, map[string]any{
		"what": "model.Mirror.Load of the open replica (decode + enforce inventory), after the store open",
		"runs": runs, "stat": "median"}), "", nil)
	rec.add("ready_serial_ms", median(res.serial), "ms", merge(params, map[string]any{
		"what": "store open, then Mirror.Load, one after the other (the daemon's start-up before LoadState)",
		"runs": runs, "stat": "median", "runs_ms": roundAll(res.serial)}), "", nil)
	rtarget, rok := quickless(cfg, "<= 3000", 3000)
	rec.add("ready_to_enforce_ms", median(res.ready), "ms", merge(params, map[string]any{
		"what": "daemon.LoadState: store open with the enforce view built while the replica restores (what a restarting daemon needs before it can enforce)",
		"runs": runs, "stat": "median", "runs_ms": roundAll(res.ready), "page_cache": "warm"}), rtarget, rok)
}

func roundAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Round(x)
	}
	return out
}
