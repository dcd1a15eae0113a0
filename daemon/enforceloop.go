package daemon

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/model"
)

const allPolicies = "*"

// desiredApplier is what the enforcer needs of the NetworkPolicy applier.
type desiredApplier interface {
	Failures() map[string]string
	SetDesired(desired []networkingv1.NetworkPolicy) error
}

// reportPublisher takes the enforcer's reports (the reporter).
type reportPublisher interface {
	Publish(reports []reportWrite, all bool)
}

// enforcer is the enforcement loop, fired by a debouncer over policy keys
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
}

// enforceRound is what one run computed under the view lock.
type enforceRound struct {
	all       bool
	desired   []networkingv1.NetworkPolicy
	reports   []reportWrite
	npolicies int
	refused   int // not admitted by this cluster's consent
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
func (e *enforcer) Fire(_ context.Context, keys []string) {
	release := e.gateOpened.Swap(false) // read before computing: this run's view is new enough
	start := time.Now()
	stamp := e.maxStamp.Swap(0)
	e.lastRun.Store(start.UnixNano())
	r := e.compute(keys, e.applier.Failures())
	if e.roles.decommissioned.Load() {
		r.desired = nil
	}
	e.m.enforceRuns.Inc()
	e.m.enforceDuration.Observe(time.Since(start).Seconds())
	e.m.policies.Set(float64(r.npolicies))
	e.m.generated.Set(float64(len(r.desired)))
	e.m.notAdmitted.Set(float64(r.refused))
	if !e.roles.leader.Load() {
		return // standby: results stay warm for a quick failover
	}
	if err := e.applier.SetDesired(r.desired); err != nil {
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

// compute recomputes under the view lock: the desired NetworkPolicies and
// the reports of the changed policies (of every policy on a full run).
func (e *enforcer) compute(keys []string, failures map[string]string) enforceRound {
	var r enforceRound
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
	r.desired = v.outputs.Desired()
	if r.all {
		changed = nil
		for _, ref := range v.mirror.Inventory().Policies() {
			changed = append(changed, model.PolicyKey(ref))
		}
	}
	for _, k := range changed {
		res, ok := v.outputs.Result(k)
		if ok && res.Selected {
			ref, _ := model.ParsePolicyKey(k)
			p, _ := v.mirror.Inventory().Policy(ref)
			r.reports = append(r.reports, reportWrite{k, v.outputs.Report(res, p.Generation), true})
		} else {
			r.reports = append(r.reports, reportWrite{k, crdt.ReportValue{}, false})
		}
	}
	r.npolicies = v.outputs.Len()
	r.refused = v.outputs.NotAdmitted()
	return r
}
