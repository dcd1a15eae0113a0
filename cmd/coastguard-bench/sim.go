package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/gossip/sim"
)

// profileTimings describes the memberlist timings of a profile, as both
// coastguard and the naive baseline run them.
func profileTimings(p gossip.Profile) string {
	mc := gossip.MemberlistConfigForProfile(p)
	return fmt.Sprintf("%s: gossip %s to %d nodes, probe %s (timeout %s), push-pull %s, suspicion mult %d",
		p, mc.GossipInterval, mc.GossipNodes, mc.ProbeInterval, mc.ProbeTimeout, mc.PushPullInterval, mc.SuspicionMult)
}

func simMS(d time.Duration) float64 {
	if d == time.Duration(math.MaxInt64) {
		return math.Inf(1)
	}
	return ms(d)
}

// simPlan is one timing profile and the mesh sizes run with it.
type simPlan struct {
	profile gossip.Profile
	ns      []int
}

// simPlans returns the meshes the sim section runs (-sim-n and
// -sim-profiles, or the defaults; -quick: one small LAN mesh) and the
// updates per mesh.
func simPlans(cfg *config) ([]simPlan, int) {
	plans := []simPlan{{gossip.ProfileLAN, []int{10, 50, 100, 300}}, {gossip.ProfileWAN, []int{300}}}
	if len(cfg.simN) > 0 {
		plans = nil
		for _, p := range cfg.simProfiles {
			plans = append(plans, simPlan{gossip.Profile(p), cfg.simN})
		}
	}
	updates := 15
	if cfg.quick {
		plans = []simPlan{{gossip.ProfileLAN, []int{10}}}
		updates = 5
	}
	return plans, updates
}

// runSim measures propagation of single-pod updates through in-process
// meshes over loopback UDP/TCP (encrypted as deployed), coastguard and the
// naive baseline back to back at each size.
func runSim(ctx context.Context, cfg *config, rec *recorder) error {
	plans, updates := simPlans(cfg)
	var errs []error
	for _, pl := range plans {
		for _, n := range pl.ns {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			base := sim.Options{N: n, Profile: pl.profile, Updates: updates, IdleWindow: 2 * time.Second, Timeout: 10 * time.Second, Unsigned: cfg.simUnsigned}
			cg, cgErr := runSimRetry(ctx, base)
			nb := base
			nb.Naive = true
			nv, nvErr := runSimRetry(ctx, nb)
			if cgErr != nil || nvErr != nil {
				errs = append(errs, fmt.Errorf("%s N=%d: %w", pl.profile, n, errors.Join(cgErr, nvErr)))
				if nvErr == nil {
					// keep the baseline point even when ours failed
					recordSimNaive(rec, pl.profile, n, updates, nv)
				}
				continue
			}
			recordSimPair(rec, cfg, pl.profile, n, updates, cg, nv)
		}
	}
	return errors.Join(errs...)
}

// recordSimNaive records the naive baseline's point of a mesh whose
// coastguard run failed.
func recordSimNaive(rec *recorder, profile gossip.Profile, n, updates int, nv sim.Result) {
	rec.add("sim_propagation_p99_ms_naive", simMS(nv.P99), "ms", map[string]any{"n": n, "profile": string(profile),
		"mode": "naive", "p50_ms": round(simMS(nv.P50)), "received": fmt.Sprintf("%d/%d", nv.Received, nv.Expected),
		"updates": updates, "timings": profileTimings(profile)}, "", nil)
	rec.simPoints = append(rec.simPoints, simPoint{Mode: "naive", Profile: string(profile), N: n, P99ms: simMS(nv.P99)})
}

// simTarget is the p99 goal of a coastguard mesh: at N=300, 1s on LAN and
// 2s on WAN timings; none otherwise.
func simTarget(profile gossip.Profile, n int) (string, func(float64) bool) {
	if n == 300 {
		switch profile {
		case gossip.ProfileLAN:
			return "<= 1000", le(1000)
		case gossip.ProfileWAN:
			return "<= 2000", le(2000)
		}
	}
	return "", nil
}

// recordSimPair records a mesh size's coastguard and naive runs and their
// ratios.
func recordSimPair(rec *recorder, cfg *config, profile gossip.Profile, n, updates int, cg, nv sim.Result) {
	target, ok := simTarget(profile, n)
	params := map[string]any{"n": n, "profile": string(profile), "timings": profileTimings(profile),
		"updates": updates, "payload_b": cg.PayloadBytes, "transport": "loopback UDP/TCP, AES-GCM keyring", "signed": !cfg.simUnsigned}
	recv := func(r sim.Result) string { return fmt.Sprintf("%d/%d", r.Received, r.Expected) }
	rec.add("sim_propagation_p99_ms", simMS(cg.P99), "ms", merge(params, map[string]any{"mode": "coastguard",
		"p50_ms": round(simMS(cg.P50)), "received": recv(cg), "min_members_seen": cg.MinMembersSeen,
		"tail_members": cg.TailMembers, "short_views": cg.ShortViews}, fdParams(cg)), target, ok)
	rec.add("sim_propagation_p99_ms_naive", simMS(nv.P99), "ms", merge(params, map[string]any{"mode": "naive",
		"p50_ms": round(simMS(nv.P50)), "received": recv(nv), "min_members_seen": nv.MinMembersSeen,
		"tail_members": nv.TailMembers, "short_views": nv.ShortViews}, fdParams(nv)), "", nil)
	rec.add("sim_p99_ratio_ours_over_naive", ratio(simMS(cg.P99), simMS(nv.P99)), "ratio",
		map[string]any{"n": n, "profile": string(profile), "p50_ratio": round(ratio(simMS(cg.P50), simMS(nv.P50))),
			"received": recv(cg), "received_naive": recv(nv)}, "< 1", func(v float64) bool { return v < 1 })
	rec.add("sim_wire_bytes_per_update_per_node_ratio_ours_over_naive", ratio(cg.WireBytesPerUpdatePerNode, nv.WireBytesPerUpdatePerNode), "ratio",
		map[string]any{"n": n, "profile": string(profile), "ours_wire_b": round(cg.WireBytesPerUpdatePerNode), "naive_wire_b": round(nv.WireBytesPerUpdatePerNode),
			"app_ratio":   round(ratio(cg.AppBytesPerUpdatePerNode, nv.AppBytesPerUpdatePerNode)),
			"gross_ratio": round(ratio(cg.GrossWireBytesPerUpdatePerNode, nv.GrossWireBytesPerUpdatePerNode))}, "< 1", func(v float64) bool { return v < 1 })
	rec.simPoints = append(rec.simPoints,
		simPoint{Mode: "coastguard", Profile: string(profile), N: n, P99ms: simMS(cg.P99)},
		simPoint{Mode: "naive", Profile: string(profile), N: n, P99ms: simMS(nv.P99)})
}

// fdParams reports how settled the mesh's failure detector was: the wait
// for a quiet detector before measuring, and its events during the updates.
func fdParams(r sim.Result) map[string]any {
	return map[string]any{"settle_wait_s": round(r.SettleWait.Seconds()), "unsettled": r.Unsettled,
		"update_suspects": r.UpdateFD.Suspect, "update_probe_fails": r.UpdateFD.ProbeFailed, "update_dead": r.UpdateFD.Dead}
}

// runSimRetry runs a mesh isolated, once more when it failed for a reason
// other than its deadline (on an overloaded machine a join can time out).
func runSimRetry(ctx context.Context, o sim.Options) (sim.Result, error) {
	timeout := simTimeout(o.N)
	if simTimeoutOverride > 0 {
		timeout = simTimeoutOverride
	}
	r, err := runSimIsolated(ctx, o, timeout)
	if err != nil && ctx.Err() == nil && !errors.Is(err, errSimKilled) {
		slog.Warn("simulation failed, retrying once", "n", o.N, "naive", o.Naive, "profile", o.Profile, "err", err)
		r, err = runSimIsolated(ctx, o, timeout)
	}
	return r, err
}

// simTimeoutOverride replaces simTimeout when set (-sim-timeout).
var simTimeoutOverride time.Duration

// simTimeout bounds one simulated mesh run (start, join, idle window,
// updates, shutdown).
func simTimeout(n int) time.Duration { return 90*time.Second + time.Duration(n)*600*time.Millisecond }

// runBytes measures bytes sent per update per node and idle bytes per
// second per node with 10k and 100k replicated entries, and the naive
// baseline's figures in the same run.
func runBytes(ctx context.Context, cfg *config, rec *recorder) error {
	n, updates := 20, 20
	entries := []int{10_000, 100_000}
	idle := 10 * time.Second
	if cfg.quick {
		n, updates, idle = 8, 5, 2*time.Second
		entries = []int{1_000, 10_000}
	}
	prof := gossip.ProfileWAN
	var idleByEntries []float64
	var last sim.Result
	for _, e := range entries {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r, err := runSimIsolated(ctx, sim.Options{N: n, Profile: prof, Updates: updates, Entries: e, IdleWindow: idle, Timeout: 10 * time.Second, Unsigned: cfg.simUnsigned}, simTimeout(n)+idle+time.Minute)
		if err != nil {
			return fmt.Errorf("coastguard entries=%d: %w", e, err)
		}
		params := map[string]any{"n": n, "entries": e, "profile": string(prof), "updates": updates, "payload_b": r.PayloadBytes, "signed": !cfg.simUnsigned,
			"app_b": round(r.AppBytesPerUpdatePerNode), "gross_b": round(r.GrossWireBytesPerUpdatePerNode), "idle_exceeded_update": r.IdleExceededUpdate,
			"what": "UDP+TCP bytes sent by all nodes during the update phase minus the idle rate (clamped at 0), / (updates*N); gross_b without subtraction"}
		rec.add("bytes_per_update_per_node", r.WireBytesPerUpdatePerNode, "B", params,
			fmt.Sprintf("<= %d (2x payload)", 2*r.PayloadBytes), le(2*float64(r.PayloadBytes)))
		rec.add("bytes_per_update_per_node_over_payload", ratio(r.WireBytesPerUpdatePerNode, float64(r.PayloadBytes)), "ratio",
			map[string]any{"n": n, "entries": e, "app_ratio": round(ratio(r.AppBytesPerUpdatePerNode, float64(r.PayloadBytes))),
				"gross_ratio": round(ratio(r.GrossWireBytesPerUpdatePerNode, float64(r.PayloadBytes))), "idle_exceeded_update": r.IdleExceededUpdate}, "<= 2", le(2))
		rec.add("idle_bytes_per_sec_per_node", r.IdleWireBytesPerSecPerNode, "B/s", map[string]any{"n": n, "entries": e, "profile": string(prof),
			"window_s": idle.Seconds(), "app_b_per_s": round(r.IdleAppBytesPerSecPerNode)}, "", nil)
		idleByEntries = append(idleByEntries, r.IdleWireBytesPerSecPerNode)
		last = r
	}
	nv, err := runSimIsolated(ctx, sim.Options{N: n, Profile: prof, Updates: updates, Naive: true, IdleWindow: idle, Timeout: 10 * time.Second}, simTimeout(n)+idle)
	if err != nil {
		return fmt.Errorf("naive: %w", err)
	}
	rec.add("bytes_per_update_per_node_naive", nv.WireBytesPerUpdatePerNode, "B", map[string]any{"n": n, "profile": string(prof), "updates": updates,
		"payload_b": nv.PayloadBytes, "app_b": round(nv.AppBytesPerUpdatePerNode)}, "", nil)
	rec.add("bytes_per_update_ratio_ours_over_naive", ratio(last.WireBytesPerUpdatePerNode, nv.WireBytesPerUpdatePerNode), "ratio",
		map[string]any{"n": n, "ours_entries": last.Entries}, "< 1", func(v float64) bool { return v < 1 })
	rec.add("idle_bytes_per_sec_per_node_naive", nv.IdleWireBytesPerSecPerNode, "B/s", map[string]any{"n": n, "profile": string(prof), "window_s": idle.Seconds()}, "", nil)
	if len(idleByEntries) == 2 {
		rec.add("idle_bytes_ratio_large_over_small", ratio(idleByEntries[1], idleByEntries[0]), "ratio",
			map[string]any{"n": n, "entries": fmt.Sprintf("%d/%d", entries[1], entries[0]), "what": "idle traffic must not grow with entry count"}, "~1 (<= 1.2)", le(1.2))
	}
	return nil
}
