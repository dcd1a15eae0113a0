package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// allPolicies is the enforcer's debouncer key for "recompute every
// policy": the zero PolicyRef, which names no policy (an origin is a
// non-empty cluster ID). It sorts first in a batch.
var allPolicies = enforce.PolicyRef{}

// desiredApplier is what the enforcer needs of the NetworkPolicy applier.
type desiredApplier interface {
	// Failures is by origin annotation (policyFailures reads it).
	Failures() map[string]string
	SetDesired(desired []networkingv1.NetworkPolicy) error
	ApplyChanges(changes map[enforce.PolicyRef][]networkingv1.NetworkPolicy) error
}

// reportPublisher takes the enforcer's reports (the reporter).
type reportPublisher interface {
	Publish(reports []reportWrite, all bool)
}

// enforcer is the enforcement loop, fired by a debouncer over policies
// (allPolicies = everything): it recomputes the affected policies from the
// view and, when leading, hands the generated NetworkPolicies to the
// applier and the reports to the reporter. A standby computes too, so its
// results are warm for a quick failover.
type enforcer struct {
	view    *view
	roles   *roles
	applier desiredApplier // set before the debouncer runs
	reports reportPublisher
	m       *metrics
	log     *slog.Logger

	maxStamp atomic.Int64  // newest origin stamp not yet enforced
	lastRun  *atomic.Int64 // unix nanos of the last run (liveness)
	// gateOpened: the next run releases the applier's hold (releaseHold)
	// after handing over its desired set.
	gateOpened  atomic.Bool
	releaseHold func()
	// handedOff: every change set the outputs produced since the last
	// full hand-off reached the applier, so the next leading run hands
	// over only the change set (Outputs.TakeChanges, Applier.ApplyChanges).
	// A run that does not (a standby's, a decommissioned cluster's) clears
	// it: the next leading run hands over everything (SetDesired). Only
	// Fire uses it (the debouncer runs one batch at a time).
	handedOff bool
}

// enforceRound is what one run computed under the view lock.
type enforceRound struct {
	all       bool
	full      bool                         // desired is everything (else changes)
	desired   []networkingv1.NetworkPolicy // a full hand-off
	changes   map[enforce.PolicyRef][]networkingv1.NetworkPolicy
	generated int
	reports   []reportWrite
	npolicies int
	refused   int // not admitted by this cluster's consent
}

// policyFailures is the applier's failures (by origin annotation, the
// Kubernetes boundary) by policy. An annotation that is no policy reference
// (a hand-edited live object) names no policy to report on: it is logged
// and left out.
func policyFailures(byOrigin map[string]string, log *slog.Logger) map[enforce.PolicyRef]string {
	out := make(map[enforce.PolicyRef]string, len(byOrigin))
	for origin, why := range byOrigin {
		ref, ok := enforce.ParsePolicyRef(origin)
		if !ok {
			log.Warn("applier failure under an origin annotation that is no policy; not reported", "origin", origin, "why", why)
			continue
		}
		out[ref] = why
	}
	return out
}

// markFailed is the applier's OnFailure: the policy of an origin annotation
// whose failures changed is re-enforced (its report carries them).
func (d *Daemon) markFailed(origin string) {
	if ref, ok := enforce.ParsePolicyRef(origin); ok {
		d.enforce.Mark(ref)
	}
}

// NoteStamp records the newest origin stamp of a change (enforcement lag).
func (e *enforcer) NoteStamp(newest int64) {
	for newest > 0 {
		cur := e.maxStamp.Load()
		if newest <= cur || e.maxStamp.CompareAndSwap(cur, newest) {
			return
		}
	}
}

// releaseHoldAfterNextRun makes the next run release the applier's hold
// (the empty-view gate opened) once it has handed over its desired set.
func (e *enforcer) releaseHoldAfterNextRun() { e.gateOpened.Store(true) }

// Fire recomputes the affected policies and applies the result.
func (e *enforcer) Fire(_ context.Context, keys []enforce.PolicyRef) {
	release := e.gateOpened.Swap(false) // read before computing: this run's view is new enough
	start := time.Now()
	stamp := e.maxStamp.Swap(0)
	e.lastRun.Store(start.UnixNano())
	leading, decommissioned := e.roles.leader.Load(), e.roles.decommissioned.Load()
	r := e.compute(keys, policyFailures(e.applier.Failures(), e.log), leading && !decommissioned && !e.handedOff)
	e.handedOff = leading && !decommissioned
	if decommissioned {
		r.full, r.desired, r.generated = true, nil, 0
	}
	e.m.enforceRuns.Inc()
	e.m.enforceDuration.Observe(time.Since(start).Seconds())
	e.m.policies.Set(float64(r.npolicies))
	e.m.generated.Set(float64(r.generated))
	e.m.notAdmitted.Set(float64(r.refused))
	if !leading {
		return // standby: results stay warm for a quick failover
	}
	if err := e.handOff(r); err != nil {
		e.m.enforceErrors.Inc()
		e.log.Error("some generated NetworkPolicies were refused; only their MCNPs are affected", "err", err)
	}
	if release && e.releaseHold != nil {
		e.releaseHold()
	}
	if stamp > 0 {
		if lag := time.Since(time.Unix(0, stamp)); lag >= 0 && lag < time.Hour {
			e.m.enforceLag.Observe(lag.Seconds())
		}
	}
	e.reports.Publish(r.reports, r.all)
}

// handOff gives the applier the round's NetworkPolicies: everything, or
// the change set.
func (e *enforcer) handOff(r enforceRound) error {
	if r.full {
		return e.applier.SetDesired(r.desired)
	}
	return e.applier.ApplyChanges(r.changes)
}

// compute recomputes under the view lock: the generated NetworkPolicies
// (every one when full, else the change set since the previous run) and
// the reports of the changed policies (of every policy on a full run).
func (e *enforcer) compute(keys []enforce.PolicyRef, failures map[enforce.PolicyRef]string, full bool) enforceRound {
	r := enforceRound{full: full}
	for _, k := range keys {
		if k == allPolicies {
			r.all = true
		}
	}
	v := e.view
	v.mu.Lock()
	defer v.mu.Unlock()
	failChanged := v.outputs.SetFailures(failures)
	changed := v.outputs.Recompute(v.mirror.Inventory(), keys, r.all)
	changed = appendMissing(changed, failChanged)
	r.changes = v.outputs.TakeChanges()
	if full {
		r.desired, r.changes = v.outputs.Desired(), nil
	}
	r.generated = v.outputs.Generated()
	if r.all {
		changed = v.mirror.Inventory().Policies() // read only
	}
	for _, ref := range changed {
		res, ok := v.outputs.Result(ref)
		if ok && res.Selected {
			p, _ := v.mirror.Inventory().Policy(ref)
			r.reports = append(r.reports, reportWrite{ref, v.outputs.Report(ref, res, p.Generation), true})
		} else {
			r.reports = append(r.reports, reportWrite{ref, crdt.ReportValue{}, false})
		}
	}
	r.npolicies = v.outputs.Len()
	r.refused = v.outputs.NotAdmitted()
	return r
}
