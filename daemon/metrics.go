package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
)

type metrics struct {
	leader          prometheus.Gauge
	enforceRuns     prometheus.Counter
	enforceErrors   prometheus.Counter
	enforceDuration prometheus.Histogram
	enforceLag      prometheus.Histogram
	enforcePending  prometheus.Gauge
	policies        prometheus.Gauge
	generated       prometheus.Gauge
	statusUpdates   prometheus.Counter
	decodeErrors    prometheus.Counter
	notAdmitted     prometheus.Gauge
	lostPolicies    *prometheus.GaugeVec
	lostEvents      *prometheus.CounterVec
	unprovenHeld    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_leader",
			Help: "1 when this daemon holds its cluster's Lease (writes entries, applies NetworkPolicies)."}),
		enforceRuns: prometheus.NewCounter(prometheus.CounterOpts{Name: "coastguard_enforcer_runs_total",
			Help: "Enforcer recomputations."}),
		enforceErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "coastguard_enforcer_errors_total",
			Help: "Enforcer runs whose output could not be handed to the applier."}),
		enforceDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coastguard_enforcer_duration_seconds",
			Help: "Time to recompute the affected policies.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		enforceLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "coastguard_propagation_lag_seconds",
			Help:    "From a write in its origin cluster (origin wall clock, metrics only) until the enforcer handed the result to the applier here.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		enforcePending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_enforcer_pending",
			Help: "Policies marked dirty and waiting for the debouncer."}),
		policies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_policies",
			Help: "MultiClusterNetworkPolicies known in the cluster set (evaluated for this cluster)."}),
		generated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_generated_networkpolicies",
			Help: "NetworkPolicies this cluster should have (desired set)."}),
		statusUpdates: prometheus.NewCounter(prometheus.CounterOpts{Name: "coastguard_status_updates_total",
			Help: "MCNP status updates written by this cluster's leader."}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "coastguard_entry_decode_errors_total",
			Help: "Replicated entries skipped because their value could not be decoded."}),
		notAdmitted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_mcnp_not_admitted",
			Help: "MCNPs of other clusters that select this cluster but that its consent (--consent-file) does not admit: nothing is generated for them here."}),
		lostPolicies: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coastguard_lost_origin_policies",
			Help: "MCNPs of a lost cluster (retired because it disappeared) still enforced here from their last-known state, by origin."},
			[]string{"origin"}),
		lostEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coastguard_lost_origins_total",
			Help: "Lost-origin transitions: lost (its policies kept), released (by the annotation), decommissioned, back (the origin rewrote them), store_error."},
			[]string{"event"}),
		unprovenHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_inventory_unproven",
			Help: "Pod, namespace and Service entries of other clusters above their origin's proven watermark (not yet confirmed by the origin's signed state mark): held out of every policy until proven."}),
	}
	for _, e := range []string{"lost", "sealed", "released", "decommissioned", "back", "store_error"} {
		m.lostEvents.WithLabelValues(e)
	}
	if err := metricsreg.All(reg, m.leader, m.enforceRuns, m.enforceErrors, m.enforceDuration, m.enforceLag,
		m.enforcePending, m.policies, m.generated, m.statusUpdates, m.decodeErrors, m.notAdmitted, m.lostPolicies, m.lostEvents, m.unprovenHeld); err != nil {
		return nil, err
	}
	return m, nil
}
