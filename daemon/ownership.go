package daemon

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// Pod-IP ownership, the daemon side (docs/SEMANTICS.md "Pod-IP
// ownership"): the trusted networks come from Submariner's Cluster objects
// (synced by the broker, never by gossip) and the operator's
// --cluster-cidrs; the translator drops every remote address outside them.
// This file feeds that knowledge in and reports what is dropped.

// NetworksFromSubmariner is kube.SubmarinerNetworks (kept for callers).
func NetworksFromSubmariner(cs []kube.SubmarinerCluster) (enforce.Networks, []error) {
	return kube.SubmarinerNetworks(cs)
}

// refreshNetworks recomputes the trusted networks from the Submariner
// watcher and the operator configuration; on a change it recomputes every
// policy.
func (d *Daemon) refreshNetworks() {
	var sub enforce.Networks
	if d.opts.Submariner != nil {
		var errs []error
		sub, errs = NetworksFromSubmariner(d.opts.Submariner.Clusters())
		for _, e := range errs {
			d.log.Warn("ignoring invalid CIDR", "err", e)
		}
	}
	n := enforce.MergeNetworks(sub, d.opts.ClusterCIDRs)
	d.setKnownOrigins(n)
	d.mu.Lock()
	changed := d.mirror.SetNetworks(n)
	if changed {
		// Recompute now, not only on the debouncer: a leader elected in
		// between must be seeded with outputs computed on these networks.
		d.outputs.Recompute(d.mirror.Inventory(), nil, true)
	}
	d.mu.Unlock()
	if !changed {
		return
	}
	for _, p := range d.mirror.Inventory().NetworkProblems() {
		d.log.Error("refusing a trusted cluster range (issue 29): its pods are left out of allow rules",
			"of_cluster", p.Cluster, "range", p.Range.String(), "why", p.Why)
	}
	for _, id := range slices.Sorted(maps.Keys(n)) {
		cn := n[id]
		d.log.Info("trusted cluster networks", "of_cluster", id, "pod_cidrs", cn.PodCIDRs,
			"service_cidrs", cn.ServiceCIDRs, "global_cidrs", cn.GlobalCIDRs, "sources", cn.Sources)
	}
	if _, ok := n[d.opts.ClusterID]; !ok {
		d.log.Warn("this cluster's own pod and service CIDRs are unknown: remote pod IPs cannot be checked against them (create its Submariner Cluster object or set --cluster-cidrs)")
	}
	if d.enforce != nil {
		d.enforce.Mark(allPolicies)
	}
}

// PodIPLogEvery rate-limits the log line about dropped remote pod IPs: at
// most one per remote cluster and reason in this interval (and one when
// the count changes after it).
var PodIPLogEvery = time.Minute

// podIPReport exports coastguard_pod_ips_dropped and logs changes.
type podIPReport struct {
	gauge  *prometheus.GaugeVec
	mu     sync.Mutex
	counts map[[2]string]int       // remote cluster, reason -> count
	logged map[[2]string]time.Time // last log line
}

func newPodIPReport(reg prometheus.Registerer) (*podIPReport, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coastguard_pod_ips_dropped",
		Help: "Remote pod IPs (or Globalnet addresses) never rendered into NetworkPolicies here, by remote_cluster and reason " +
			"(cidrs_unknown, reserved_address, outside_owner_cidrs, inside_local_cidrs)."}, []string{"remote_cluster", "reason"})
	if err := metricsreg.All(reg, g); err != nil {
		return nil, err
	}
	return &podIPReport{gauge: g, counts: map[[2]string]int{}, logged: map[[2]string]time.Time{}}, nil
}

// update sets the gauge to drops and logs (rate-limited) what changed.
func (r *podIPReport) update(log *slog.Logger, drops []enforce.PodIPDrop, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := map[[2]string]int{}
	for _, d := range drops {
		k := [2]string{d.Cluster, string(d.Reason)}
		cur[k] = d.Count
		r.gauge.WithLabelValues(k[0], k[1]).Set(float64(d.Count))
		if prev, ok := r.counts[k]; ok && prev == d.Count {
			continue
		}
		if last, ok := r.logged[k]; ok && now.Sub(last) < PodIPLogEvery {
			continue
		}
		r.logged[k] = now
		log.Warn("remote pod IPs dropped: they never become allow rules here", "remote_cluster", d.Cluster,
			"reason", string(d.Reason), "count", d.Count, "example", d.Example)
	}
	for k := range r.counts {
		if _, ok := cur[k]; !ok {
			r.gauge.DeleteLabelValues(k[0], k[1])
			delete(r.logged, k)
			log.Info("remote pod IPs no longer dropped", "remote_cluster", k[0], "reason", k[1])
		}
	}
	r.counts = cur
}

// setKnownOrigins records the clusters this daemon knows independently of
// gossip: itself, its trust bundle and the clusters of its trusted
// networks (Submariner Cluster objects, --cluster-cidrs). They always get
// an origin slot in the replica (crdt.Limits.Known, set in startGossip).
func (d *Daemon) setKnownOrigins(n enforce.Networks) {
	known := map[string]bool{d.opts.ClusterID: true}
	for id := range d.opts.TrustBundle {
		known[id] = true
	}
	for id := range n {
		known[id] = true
	}
	d.known.Store(&known)
}

// knownOrigin reports whether origin is known independently of gossip.
func (d *Daemon) knownOrigin(origin string) bool {
	k := d.known.Load()
	return k != nil && (*k)[origin]
}
