package daemon

import (
	"context"
	"fmt"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
)

// safety holds the daemon's enforcement-safety state: the empty-view gate,
// store failure and liveness.
type safety struct {
	cov        *coverage
	gateMu     sync.Mutex
	gateSince  time.Time
	gateClosed atomic.Bool
	gateGauge  prometheus.Gauge
	// gateWant is what gossip asks for while the gate is closed: the
	// clusters the gate still waits for (Config.WantDigests).
	gateWant atomic.Pointer[[]string]
	// gateWake re-evaluates the gate at once when a digest arrives.
	gateWake chan struct{}

	fatalMu  sync.Mutex
	fatalErr error

	lastBeat    atomic.Int64 // unix nanos of the last readiness tick
	lastEnforce atomic.Int64 // unix nanos of the last enforcer run
}

func (d *Daemon) initSafety() error {
	d.cov = newCoverage()
	d.gateWake = make(chan struct{}, 1)
	d.gateGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "coastguard_empty_view_gate_closed",
		Help: "1 while this leader holds back deletes and shrinks of generated NetworkPolicies until its view is complete.",
	})
	if err := metricsreg.All(d.opts.Registry, d.gateGauge); err != nil {
		return fmt.Errorf("register gate metric: %w", err)
	}
	return nil
}

// ignoreFileSizeSignal makes a write over RLIMIT_FSIZE fail with EFBIG (a
// failed commit, handled like disk full) instead of killing the process.
func ignoreFileSizeSignal() { signal.Ignore(syscall.SIGXFSZ) }

// storeFailed is the store's OnCommitError: readiness fails at once, the
// daemon stops (releasing its Lease so the standby of this cluster takes
// over) and Run returns the error, so the process exits non-zero. Entries
// whose commit failed are not lost: they are not in the file, so after a
// restart the digest is lower and anti-entropy pulls them again (own
// entries are rewritten by the inventory's full sync).
func (d *Daemon) storeFailed(err error) {
	d.log.Error("state store commit failed: not ready, releasing the Lease and exiting", "err", err)
	d.opts.Ready("store", fmt.Errorf("store commit failed: %w", err))
	d.fatalMu.Lock()
	if d.fatalErr == nil {
		d.fatalErr = fmt.Errorf("state store failed: %w", err)
	}
	d.fatalMu.Unlock()
	if d.stop != nil {
		go d.stop()
	}
}

func (d *Daemon) fatal() error {
	d.fatalMu.Lock()
	defer d.fatalMu.Unlock()
	return d.fatalErr
}

// observeDigest is gossip's OnDigest hook.
func (d *Daemon) observeDigest(cluster string, dg crdt.Digest) {
	d.cov.observe(cluster, dg, time.Now())
	if d.gateClosed.Load() {
		select {
		case d.gateWake <- struct{}{}:
		default:
		}
	}
}

// wantDigests is gossip's WantDigests hook: while the gate is closed, the
// clusters it waits for, so that anti-entropy asks their members now
// instead of waiting for them to come by.
func (d *Daemon) wantDigests() []string {
	if w := d.gateWant.Load(); w != nil {
		return *w
	}
	return nil
}

// setGateWant publishes the clusters the closed gate waits for (from its
// decision's Missing, without this cluster's own inventory) and wakes
// gossip's anti-entropy when it starts asking.
func (d *Daemon) setGateWant(missing []string) {
	var want []string
	for _, c := range missing {
		if c != d.opts.ClusterID && !strings.HasPrefix(c, d.opts.ClusterID+" ") {
			want = append(want, c)
		}
	}
	was := d.gateWant.Swap(&want)
	if len(want) > 0 && (was == nil || len(*was) == 0) && d.node != nil {
		d.node.WakeAntiEntropy()
	}
}

func (d *Daemon) heartbeat(now time.Time) { d.lastBeat.Store(now.UnixNano()) }

// now is the wall clock this daemon shares with other processes: the
// host's, shifted by Options.ClockOffset (fault injection).
func (d *Daemon) now() time.Time { return time.Now().Add(d.opts.ClockOffset) }

// Healthy is /healthz: the store accepts writes and the daemon's loops make
// progress (the readiness loop ticked within 30s; the enforcer, when it has
// work pending, ran within 2m).
func (d *Daemon) Healthy() error {
	if d.rep != nil {
		if err := d.rep.Failed(); err != nil {
			return err
		}
	}
	now := time.Now()
	if b := d.lastBeat.Load(); b != 0 && now.Sub(time.Unix(0, b)) > 30*time.Second {
		return fmt.Errorf("daemon loop stalled for %s", now.Sub(time.Unix(0, b)).Round(time.Second))
	}
	if d.enforce != nil && d.enforce.Pending() > 0 {
		if e := d.lastEnforce.Load(); e != 0 && now.Sub(time.Unix(0, e)) > 2*time.Minute {
			return fmt.Errorf("enforcer has pending work but has not run for %s", now.Sub(time.Unix(0, e)).Round(time.Second))
		}
	}
	return nil
}

// closeGate closes the empty-view gate at the start of a leadership term.
func (d *Daemon) closeGate() {
	d.gateMu.Lock()
	d.gateSince = time.Now()
	d.gateMu.Unlock()
	d.gateClosed.Store(true)
	d.gateGauge.Set(1)
	d.applier.SetHold(true)
	d.mu.Lock()
	changed := d.outputs.SetGateDegraded(ReasonPartialView)
	d.mu.Unlock()
	if changed && d.enforce != nil {
		d.enforce.Mark(allPolicies)
	}
}

// releaseGate opens the gate: held deletes and content changes proceed.
func (d *Daemon) releaseGate(reason string) {
	if !d.gateClosed.Swap(false) {
		return
	}
	d.gateGauge.Set(0)
	d.gateWant.Store(nil)
	d.mu.Lock()
	d.outputs.SetGateDegraded("")
	d.mu.Unlock()
	// The view was found covered on the store's state; the change feed
	// and the enforcer may still lag behind it. Held deletes proceed only
	// once the enforcer has recomputed from a mirror that holds every
	// change committed before this point (an applier released at once
	// would apply the stale desired set, deleting policies whose entries
	// had just arrived).
	if d.rep == nil || d.enforce == nil || d.enf == nil || reason == "decommission" {
		// (a decommission deletes every generated policy on purpose)
		d.applier.SetHold(false)
	} else {
		d.rep.Barrier(func() {
			d.enf.releaseHoldAfterNextRun()
			d.enforce.Mark(allPolicies)
		})
	}
	d.log.Info("empty-view gate open: deletes and shrinks of generated NetworkPolicies allowed", "reason", reason)
}

// gateInput gathers the gate's inputs from the store, gossip, Submariner
// and the inventory.
func (d *Daemon) gateInput(now time.Time) GateInput {
	d.gateMu.Lock()
	since := d.gateSince
	d.gateMu.Unlock()
	local := d.rep.Digest()
	in := GateInput{Now: now, Since: since, Timeout: d.opts.EmptyViewTimeout, Self: d.opts.ClusterID,
		Retired: map[string]bool{}, Decommissioning: d.decommissioned.Load()}
	for o, od := range local {
		in.Known = append(in.Known, o)
		if od.Retired > 0 && od.Retired >= od.Max {
			in.Retired[o] = true
		}
	}
	if d.node != nil {
		for c := range d.node.Clusters() {
			in.Known = append(in.Known, c)
		}
	}
	var clusters map[string]gossip.ClusterStatus
	if d.node != nil {
		clusters = d.node.Clusters()
	}
	if d.opts.Submariner != nil {
		in.Known = append(in.Known, d.opts.Submariner.KnownClusters()...)
	}
	// the origins of live generated policies: known even with an empty store
	in.Known = append(in.Known, d.applier.LiveOrigins()...)
	// A cluster that beats (origin-signed heartbeats) counts as alive even
	// when memberlist's view, which a gossip key holder can forge, shows
	// its members dead: an alive cluster must cover itself (issue 29,
	// item 2).
	in.Covered = d.cov.covered(since, local, func(c string) bool { return clusters[c].Alive || clusters[c].Beating })
	in.SelfSynced = d.inv != nil && d.inv.HasSynced() && d.inv.Pending() == 0
	return in
}

// gateLoop re-evaluates the gate until it opens or the term ends.
func (d *Daemon) gateLoop(ctx context.Context) {
	var last string
	check := func(now time.Time) bool {
		if !d.gateClosed.Load() {
			return true
		}
		dec := DecideGate(d.gateInput(now))
		if !dec.Open {
			d.setGateWant(dec.Missing)
		}
		if dec.Open {
			if dec.Reason == "timeout" {
				d.log.Warn("empty-view gate timed out before anti-entropy covered every cluster; enforcing the current view",
					"missing", strings.Join(dec.Missing, ","), "timeout", d.opts.EmptyViewTimeout)
			}
			d.releaseGate(dec.Reason)
			return true
		}
		if s := dec.String(); s != last {
			last = s
			d.log.Info("empty-view gate "+s, "missing", dec.Missing)
		}
		return false
	}
	if check(time.Now()) {
		return
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.gateWant.Store(nil) // a standby asks for nothing
			return
		case now := <-t.C:
			if check(now) {
				return
			}
		case <-d.gateWake:
			if check(time.Now()) {
				return
			}
		}
	}
}

// appendMissing appends the elements of add not in list.
func appendMissing[K comparable](list, add []K) []K {
	if len(add) == 0 {
		return list
	}
	seen := make(map[K]bool, len(list))
	for _, k := range list {
		seen[k] = true
	}
	for _, k := range add {
		if !seen[k] {
			list = append(list, k)
			seen[k] = true
		}
	}
	return list
}
