package daemon

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
)

// SanityInterval is how often the cluster-set sanity checks run.
var SanityInterval = 5 * time.Second

// ReasonDuplicateClusterID is reported (MCNP Degraded condition, Event,
// metric) while two clusters claim one cluster ID.
const ReasonDuplicateClusterID = "DuplicateClusterID"

// Sanity check names, the "check" label of coastguard_sanity_problems.
const (
	CheckDuplicateClusterID   = "duplicate_cluster_id"
	CheckOverlappingPodCIDRs  = "overlapping_pod_cidrs"
	CheckPodIPOutsideCIDR     = "pod_ip_outside_cidr"
	sanityEventReasonOverlap  = "OverlappingPodCIDRs"
	sanityEventReasonOutside  = "PodIPOutsideClusterCIDR"
	sanityEventReasonConflict = ReasonDuplicateClusterID
)

// duplicateConfirmRounds is how many consecutive checks (SanityInterval
// apart: 30 s) must see two writers of one cluster ID. A leader handover
// shows two while the old leader's writer flag is still on its way
// through gossip: with two checks, nemesis runs with lossy links flagged
// it for 5-10 s after a failover (a Warning Event, and every policy's
// status degraded with DuplicateClusterID meanwhile). Two clusters
// sharing an ID show it for good.
const duplicateConfirmRounds = 6

// sanity holds the state of the cluster-set checks between rounds.
type sanity struct {
	gauge  *prometheus.GaugeVec
	streak map[string]int    // cluster -> consecutive rounds with >1 writer
	active map[string]string // finding key -> message (for transitions)
}

func newSanity(reg prometheus.Registerer) (*sanity, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "coastguard_sanity_problems",
		Help: "Cluster-set problems currently detected, by check (duplicate_cluster_id, overlapping_pod_cidrs, pod_ip_outside_cidr)."}, []string{"check"})
	if err := metricsreg.All(reg, g); err != nil {
		return nil, err
	}
	for _, c := range []string{CheckDuplicateClusterID, CheckOverlappingPodCIDRs, CheckPodIPOutsideCIDR} {
		g.WithLabelValues(c).Set(0)
	}
	return &sanity{gauge: g, streak: map[string]int{}, active: map[string]string{}}, nil
}

// duplicateClusters returns the clusters with more than one alive writer
// (Lease holder) among the gossip members: one cluster has one Lease, so
// two writers mean two clusters use the same cluster ID. A cluster must
// show it for duplicateConfirmRounds consecutive rounds.
func (s *sanity) duplicateClusters(members []gossip.MemberInfo) map[string][]string {
	writers := map[string][]string{}
	for _, m := range members {
		if m.Alive && m.Writer {
			writers[m.Cluster] = append(writers[m.Cluster], m.Name)
		}
	}
	out := map[string][]string{}
	for c := range s.streak {
		if len(writers[c]) < 2 {
			delete(s.streak, c)
		}
	}
	for c, names := range writers {
		if len(names) < 2 {
			continue
		}
		s.streak[c]++
		if s.streak[c] >= duplicateConfirmRounds {
			sort.Strings(names)
			out[c] = names
		}
	}
	return out
}

// finding is one current problem, keyed for transition detection.
type finding struct {
	key, check, reason, message string
}

// evaluate turns the members and inventory findings into the current
// problem list (sorted by key).
func (s *sanity) evaluate(members []gossip.MemberInfo, inv []enforce.Finding) []finding {
	var out []finding
	for c, names := range s.duplicateClusters(members) {
		out = append(out, finding{key: CheckDuplicateClusterID + "/" + c, check: CheckDuplicateClusterID, reason: sanityEventReasonConflict,
			message: fmt.Sprintf("cluster ID %s is claimed by two clusters: gossip members %s are both its writer (Lease holder); give each cluster its own ID", c, strings.Join(names, " and "))})
	}
	for _, f := range inv {
		r := sanityEventReasonOverlap
		if f.Check == CheckPodIPOutsideCIDR {
			r = sanityEventReasonOutside
		}
		out = append(out, finding{key: f.Check + "/" + strings.Join(f.Clusters, ","), check: f.Check, reason: r, message: f.Message})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// sanityLoop runs the checks every SanityInterval: metrics always, a
// Warning log and (leader only) an Event on this cluster's Lease when a
// problem appears, and a Degraded reason on every policy while a duplicate
// cluster ID exists (overlaps and stray pod IPs degrade exactly the
// policies whose peers they concern, in the translator).
func (d *Daemon) sanityLoop(ctx context.Context, s *sanity, rec record.EventRecorder) {
	every(ctx, SanityInterval, func(time.Time) { d.sanityRound(s, rec) })
}

func (d *Daemon) sanityRound(s *sanity, rec record.EventRecorder) {
	var members []gossip.MemberInfo
	if d.node != nil {
		members = d.node.Members()
	}
	d.mu.Lock()
	found := s.evaluate(members, enforce.Findings(d.mirror.Inventory()))
	drops := enforce.PodIPDrops(d.mirror.Inventory(), d.opts.ClusterID)
	d.mu.Unlock()
	if d.podIPs != nil {
		d.podIPs.update(d.log, drops, time.Now())
	}

	counts := map[string]int{CheckDuplicateClusterID: 0, CheckOverlappingPodCIDRs: 0, CheckPodIPOutsideCIDR: 0}
	dup := ""
	now := map[string]string{}
	for _, f := range found {
		counts[f.check]++
		now[f.key] = f.message
		if f.check == CheckDuplicateClusterID {
			dup = ReasonDuplicateClusterID
		}
		if prev, ok := s.active[f.key]; !ok || prev != f.message {
			d.log.Warn("cluster-set sanity check failed", "check", f.check, "problem", f.message)
			if rec != nil && d.leader.Load() && d.elector != nil {
				rec.Event(d.leaseRef(), corev1.EventTypeWarning, f.reason, f.message)
			}
		}
	}
	for k := range s.active {
		if _, ok := now[k]; !ok {
			d.log.Info("cluster-set sanity problem resolved", "problem", s.active[k])
		}
	}
	s.active = now
	for c, n := range counts {
		s.gauge.WithLabelValues(c).Set(float64(n))
	}
	d.mu.Lock()
	changed := d.outputs.SetSetDegraded(dup)
	d.mu.Unlock()
	if changed && d.enforce != nil {
		d.enforce.Mark(allPolicies)
	}
}

// leaseRef is the object sanity Events are attached to: this cluster's
// Lease, in the daemon's namespace.
func (d *Daemon) leaseRef() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
		Namespace: d.opts.Namespace, Name: d.elector.LeaseName()}
}
