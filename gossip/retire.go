package gossip

import (
	"log/slog"
	"sort"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// The reconnect-timeout retirement policy: a cluster that still holds live
// entries but from which no fresh origin-signed heartbeat has been
// received for ReconnectTimeout (beat.go; a cluster that has sent none
// since this node started: of which no member has been alive for
// ReconnectTimeout) is retired (a crdt.Retire up to its watermark), so that a cluster that died
// without decommissioning does not stay in every view for ever. A daemon
// restart (a new member of the same cluster) is not a death: it is alive
// again long before the timeout. The decision is pure (clusterVerdicts); the
// retirer runs it on a ticker and applies the retirements.

// clusterState classifies one cluster for the policy (and its metrics).
type clusterState int

const (
	clusterAlive clusterState = iota // a member is alive (or it is our own)
	clusterGone                      // nothing live of it in state: not tracked
	clusterStale                     // live entries, no alive member
)

// clusterVerdict is the policy's answer for one cluster.
type clusterVerdict struct {
	cluster string
	state   clusterState
	// retire is set for a stale cluster whose last alive member is
	// ReconnectTimeout or more in the past.
	retire *crdt.Retire
	// lastAlive is when a member of the cluster was last seen alive, or
	// for a cluster that beats, when its last heartbeat was received.
	lastAlive time.Time
}

// clusterVerdicts is the pure retirement decision at now, for every cluster
// of status (the membership view; self is the own cluster, always alive),
// given the local digest. Sorted by cluster.
func clusterVerdicts(self string, status map[string]ClusterStatus, digest crdt.Digest,
	now time.Time, timeout time.Duration) []clusterVerdict {
	out := make([]clusterVerdict, 0, len(status))
	staleAfter := beatStale(timeout)
	for c, st := range status {
		v := clusterVerdict{cluster: c, lastAlive: st.LastAlive}
		alive := st.Alive
		if !st.LastBeat.IsZero() {
			// it beats: heartbeats alone decide, not the membership view
			v.lastAlive = st.LastBeat
			alive = now.Sub(st.LastBeat) < staleAfter
		}
		od, inState := digest[c]
		switch {
		case alive || c == self:
			v.state = clusterAlive
		case !inState || od.Max <= od.Retired:
			v.state = clusterGone
		default:
			v.state = clusterStale
			if now.Sub(v.lastAlive) >= timeout {
				v.retire = &crdt.Retire{Origin: c, UpTo: od.Max}
			}
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cluster < out[j].cluster })
	return out
}

// retirer runs the reconnect-timeout policy: every round it reads the
// digest and the cluster liveness, publishes the cluster gauges and applies
// the retirements the policy asks for.
type retirer struct {
	self    string
	timeout time.Duration
	now     func() time.Time
	digest  func() crdt.Digest
	// status returns the cluster liveness at now, noticing the digest's
	// origins (members.noticeOrigins).
	status func(crdt.Digest, time.Time) map[string]ClusterStatus
	// retire applies and re-gossips a retirement; true if it was news.
	retire func(crdt.Retire) bool
	m      *metrics
	log    *slog.Logger
}

// round runs the policy once.
func (r *retirer) round() {
	digest := r.digest()
	now := r.now()
	var alive, stale float64
	for _, v := range clusterVerdicts(r.self, r.status(digest, now), digest, now, r.timeout) {
		switch v.state {
		case clusterAlive:
			alive++
			r.m.clusterStale.WithLabelValues(v.cluster).Set(0)
		case clusterGone:
			r.m.clusterStale.DeleteLabelValues(v.cluster)
		case clusterStale:
			stale++
			r.m.clusterStale.WithLabelValues(v.cluster).Set(1)
		}
		if v.retire != nil && r.retire(*v.retire) {
			r.m.retirements.WithLabelValues("reconnect_timeout").Inc()
			r.log.Warn("cluster retired after reconnect timeout", "remote_cluster", v.cluster,
				"last_alive", v.lastAlive, "timeout", r.timeout)
		}
	}
	r.m.clusters.WithLabelValues("alive").Set(alive)
	r.m.clusters.WithLabelValues("stale").Set(stale)
}
