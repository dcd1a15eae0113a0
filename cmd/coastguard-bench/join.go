package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/model"
	"github.com/coastguard-mcnp/coastguard/store"
)

// runJoin measures a new cluster joining a set (issue 18: 1 M entries,
// full view and enforce view within 15 s), end to end in-process over
// loopback gossip: a fresh coastguardd-like node (gossip.Node, store.Replica
// on bbolt with fsync, gossip.Trust on first use, the daemon's enforce
// Mirror fed by the replica's change feed) joins a mesh whose members hold
// `origins` signed origins of realistic pods, and takes in everything by
// bulk sync. With checkpoints the joiner asks each origin's writer for its
// signed checkpoint and skips per-entry verification for matching
// segments; the per-entry baseline hides the checkpoint methods from gossip.
// Both variants run at the smaller size in this run (the ratio); the
// checkpointed one also at the full size.
func runJoin(ctx context.Context, cfg *config, rec *recorder) error {
	origins, full, small := 10, 100_000, 10_000
	if cfg.quick {
		full, small = 5_000, 2_000
	}
	dir, err := os.MkdirTemp("", "coastguard-join-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	var smallRates [2]float64
	for i, withCP := range []bool{false, true} {
		r, err := measureJoin(ctx, filepath.Join(dir, fmt.Sprint("small-", i)), origins, small, withCP, true)
		if err != nil {
			return err
		}
		smallRates[i] = r.rate()
		rec.add("join_entries_per_s", r.rate(), "entries/s", r.params(), "", nil)
	}
	rec.add("join_checkpoint_speedup", smallRates[1]/smallRates[0], "ratio",
		map[string]any{"entries": origins * small, "what": "ingest rate with checkpoints / per-entry verification, same run"}, "", nil)
	r, err := measureJoin(ctx, filepath.Join(dir, "full"), origins, full, true, true)
	if err != nil {
		return err
	}
	rec.add("join_entries_per_s", r.rate(), "entries/s", r.params(), "", nil)
	target := ""
	var met func(float64) bool
	if origins*full >= 1_000_000 {
		target, met = "<= 15", le(15)
	}
	rec.add("join_full_view_s", r.view.Seconds(), "s", r.params(), target, met)
	rec.add("join_enforce_view_s", r.enforce.Seconds(), "s", r.params(), target, met)
	return nil
}

// joinTimeout bounds one join measurement.
var joinTimeout = 5 * time.Minute

type joinResult struct {
	origins, per int
	checkpoint   bool
	isolated     bool          // the set ran in a child process
	peakRSS      int64         // the joiner process's peak RSS (VmHWM), bytes
	view         time.Duration // until the replica holds every origin's digest
	enforce      time.Duration // until the enforce mirror holds every entry
	build        time.Duration // writers' checkpoints (MakeCheckpoint), total
	stats        crdt.CheckpointStats
}

func (r joinResult) rate() float64 { return float64(r.origins*r.per) / r.view.Seconds() }

func (r joinResult) params() map[string]any {
	return map[string]any{
		"entries": r.origins * r.per, "origins": r.origins, "checkpoints": r.checkpoint,
		"view_s": round(r.view.Seconds()), "enforce_view_s": round(r.enforce.Seconds()),
		"checkpoint_build_ms_total": round(float64(r.build.Milliseconds())),
		"segment_hits":              r.stats.Hits, "segment_misses": r.stats.Misses, "verifies_skipped": r.stats.SkippedVerifies,
		"set_process":      map[bool]string{true: "child", false: "same"}[r.isolated],
		"memory_limit_mib": joinMemoryLimit >> 20,
		"peak_rss_mib":     r.peakRSS >> 20,
		"how": "joiner gossip.Node + store.Replica (bbolt, fsync) + model.Mirror via the change feed; " +
			"the set (1 hub + 1 writer node per origin, sharing one in-memory replica) in a child process, over loopback TCP/UDP, LAN profile; " +
			"timed from Join until the joiner's digest equals the hub's (view) and the mirror holds every entry (enforce); " +
			"not included: the enforcer's first full translation",
	}
}

// joinMesh is the existing cluster set: one hub node and one writer node
// per origin, all on one in-memory replica holding every origin (so they
// never sync among themselves); each writer node serves its origin's
// checkpoint, built once when the data was written.
type joinMesh struct {
	hub   *store.Replica
	nodes []*gossip.Node
	build time.Duration
}

func (m *joinMesh) close() {
	for _, n := range m.nodes {
		_ = n.Shutdown()
	}
	_ = m.hub.Close()
}

// writerView is a writer node's Replica: the shared data, and its own
// origin's checkpoint.
type writerView struct {
	*store.Replica
	cp crdt.Checkpoint
}

func (w writerView) MakeCheckpoint() (crdt.Checkpoint, error) { return w.cp, nil }

func joinKey(seed int) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	s[0], s[1] = byte(seed), 0x5a
	return ed25519.NewKeyFromSeed(s)
}

func quietLogger() *slog.Logger {
	if os.Getenv("JOIN_DEBUG") != "" {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}

func newJoinMesh(origins, per int) (*joinMesh, error) {
	m := &joinMesh{hub: store.NewMemReplica("")}
	cps := make([]crdt.Checkpoint, origins)
	pins := map[string][]byte{}
	for c := 0; c < origins; c++ {
		cp, took, err := fillOrigin(m.hub, fmt.Sprintf("cluster-%02d", c), c, per)
		if err != nil {
			_ = m.hub.Close()
			return nil, err
		}
		cps[c], m.build = cp, m.build+took
		pins[cp.Origin] = cp.Key
	}
	// The members pin the origins' keys (relays forward them with the
	// data); set after the fill, which is not what is measured.
	tr, err := gossip.NewTrust(pins, true, "", nil, nil, quietLogger())
	if err != nil {
		_ = m.hub.Close()
		return nil, err
	}
	m.hub.SetVerifier(tr, nil)
	start := func(name, cluster string, rep benchReplica, seeds []string) error {
		n, err := newBenchNode(name, cluster, rep, seeds, nil, nil)
		if err != nil {
			return err
		}
		m.nodes = append(m.nodes, n)
		return nil
	}
	if err := start("hub-0", "hub", m.hub, nil); err != nil {
		m.close()
		return nil, err
	}
	for c := 0; c < origins; c++ {
		if err := start(fmt.Sprintf("cluster-%02d-0", c), fmt.Sprintf("cluster-%02d", c),
			writerView{Replica: m.hub, cp: cps[c]}, []string{m.nodes[0].Addr()}); err != nil {
			m.close()
			return nil, err
		}
	}
	return m, nil
}

// fillOrigin writes per signed pods as origin's writer and hands them to
// the hub (no verifier there); it returns the writer's checkpoint and the
// time MakeCheckpoint took.
func fillOrigin(hub *store.Replica, origin string, seed, per int) (crdt.Checkpoint, time.Duration, error) {
	w := crdt.NewState(origin)
	w.SetSigner(gossip.NewSigner(joinKey(seed)))
	if err := w.SetEpoch(1); err != nil {
		return crdt.Checkpoint{}, 0, err
	}
	for i := 0; i < per; i++ {
		v, err := realisticPodValue(seed*per + i)
		if err != nil {
			return crdt.Checkpoint{}, 0, err
		}
		if _, _, err := w.Write(crdt.KindPod, fmt.Sprintf("team-%02d/web-%07d", i%50, i), v, false, int64(i+1)); err != nil {
			return crdt.Checkpoint{}, 0, err
		}
	}
	t0 := time.Now()
	cp, err := w.MakeCheckpoint()
	took := time.Since(t0)
	if err != nil {
		return crdt.Checkpoint{}, 0, err
	}
	if _, err := hub.Apply(w.DeltaSince(crdt.Digest{}, 0)...); err != nil {
		return crdt.Checkpoint{}, 0, err
	}
	return cp, took, nil
}

// benchReplica is a replica the bench builds and configures itself.
type benchReplica interface {
	gossip.Replica
	gossip.Configurable
}

func newBenchNode(name, cluster string, rep benchReplica, seeds []string, sg crdt.Signer, tr *gossip.Trust) (*gossip.Node, error) {
	inner, err := gossip.NewLoopbackTransport("127.0.0.1")
	if err != nil {
		return nil, err
	}
	cfg := gossip.Config{
		NodeName: name, ClusterID: cluster, BindAddr: "127.0.0.1", EphemeralPort: true,
		Keyring: [][]byte{make([]byte, 32)}, Profile: gossip.ProfileLAN, Seeds: seeds, Logger: quietLogger(),
		Transport: gossip.NewFaultTransport(inner), IsWriter: func() bool { return true },
	}
	if sg != nil {
		// The members (hub, origin nodes) have no signing key of their own:
		// the joiner takes their unsigned membership metadata as during a
		// rollout (--allow-unsigned-meta); every entry is still signed and
		// verified, which is what the join measures.
		cfg.Signer, cfg.Trust, cfg.AllowUnsignedMeta = sg, tr, true
	}
	gossip.ConfigureReplica(&cfg, rep, crdt.DefaultLimits())
	return gossip.New(cfg, rep)
}

// plainReplica is a replica without checkpoints (it builds none and
// accepts none): the per-entry baseline.
type plainReplica struct {
	gossip.NoCheckpoints
	r *store.Replica
}

func (p plainReplica) Digest() crdt.Digest { return p.r.Digest() }
func (p plainReplica) DeltaSince(d crdt.Digest, n int) []crdt.Delta {
	return p.r.DeltaSince(d, n)
}
func (p plainReplica) Apply(ds ...crdt.Delta) ([]crdt.Change, error) { return p.r.Apply(ds...) }
func (p plainReplica) ApplyRetire(rt crdt.Retire) ([]crdt.Change, error) {
	return p.r.ApplyRetire(rt)
}
func (p plainReplica) SetSigner(sg crdt.Signer) { p.r.SetSigner(sg) }
func (p plainReplica) SetVerifier(v crdt.Verifier, a crdt.RetireAuthority) {
	p.r.SetVerifier(v, a)
}
func (p plainReplica) SetLimits(l crdt.Limits) { p.r.SetLimits(l) }

// mirrorFeed is the daemon's enforce view, fed by the replica's change
// feed (as daemon wiring does), counting the changes it took in.
type mirrorFeed struct {
	mu     sync.Mutex
	m      *model.Mirror
	copied atomic.Int64
}

func (f *mirrorFeed) apply(ch []crdt.Change) {
	f.mu.Lock()
	f.m.Apply(ch)
	f.mu.Unlock()
	f.copied.Add(int64(len(ch)))
}

func measureJoin(ctx context.Context, path string, origins, per int, withCP, isolated bool) (joinResult, error) {
	res := joinResult{origins: origins, per: per, checkpoint: withCP, isolated: isolated}
	set, err := startJoinSet(ctx, origins, per, isolated)
	if err != nil {
		return res, err
	}
	defer set.close()
	res.build = set.Build
	rep, err := store.OpenReplica(path, "joiner", store.Options{Logger: quietLogger()})
	if err != nil {
		return res, err
	}
	defer func() { _ = rep.Close() }()
	// The joiner runs as deploy/ runs the daemon, under a memory limit
	// (GOMEMLIMIT from the container's limit; docs/OPERATIONS.md "Sizing"
	// asks 1.5Gi for a 1 M-entry set) and the default GOGC.
	prevLimit := debug.SetMemoryLimit(joinMemoryLimit)
	defer debug.SetMemoryLimit(prevLimit)
	feed := &mirrorFeed{m: model.NewMirror("joiner")}
	rep.Subscribe(feed.apply)
	sg := gossip.NewSigner(joinKey(200))
	tr, err := gossip.NewTrust(nil, false, "joiner", sg.PublicKey(), nil, quietLogger())
	if err != nil {
		return res, err
	}
	var grep benchReplica = rep
	if !withCP {
		grep = plainReplica{r: rep}
	}
	runtime.GC()
	stopProfile := joinProfile()
	defer stopProfile()
	t0 := time.Now()
	n, err := newBenchNode("joiner-0", "joiner", grep, []string{set.Addr}, sg, tr)
	if err != nil {
		return res, err
	}
	defer func() { _ = n.Shutdown() }()
	want := set.Want
	total := int64(origins * per)
	deadline := time.Now().Add(joinTimeout)
	for res.view == 0 || res.enforce == 0 {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return res, errors.Join(ctx.Err(), fmt.Errorf("join of %d entries incomplete after %s (mirrored %d)", total, time.Since(t0), feed.copied.Load()))
		}
		time.Sleep(10 * time.Millisecond)
		if res.view == 0 && sameOrigins(rep.Digest(), want) {
			res.view = time.Since(t0)
		}
		if res.enforce == 0 && feed.copied.Load() >= total {
			res.enforce = time.Since(t0)
		}
	}
	res.stats = rep.CheckpointStats()
	res.peakRSS = peakRSS()
	slog.Info("join measured", "entries", total, "checkpoints", withCP, "view", res.view, "enforce", res.enforce, "stats", res.stats)
	return res, nil
}

// joinMemoryLimit is the joiner's GOMEMLIMIT (the Sizing figure for 1 M
// entries).
const joinMemoryLimit = 1536 << 20

// peakRSS returns this process's peak resident set (VmHWM), 0 if unknown.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// joinProfile starts a CPU profile of the timed window when JOIN_CPUPROFILE
// names a file (each measurement overwrites it: the last, full-size one
// remains); it returns the stop function.
func joinProfile() func() {
	path := os.Getenv("JOIN_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		slog.Warn("join profile", "err", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		slog.Warn("join profile", "err", err)
		_ = f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// sameOrigins reports whether got holds every origin of want as want does.
func sameOrigins(got, want crdt.Digest) bool {
	for o, w := range want {
		g := got[o]
		if g.Max != w.Max || g.Hash != w.Hash {
			return false
		}
	}
	return true
}
