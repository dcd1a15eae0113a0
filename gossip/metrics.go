package gossip

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
)

// Drop reasons (label values of coastguard_gossip_dropped_total).
const (
	dropDecode         = "decode"          // our message failed to decode
	dropOversize       = "oversize"        // over MaxMessageBytes
	dropUnknownType    = "unknown_type"    // unknown coastguard message type
	dropRateLimited    = "rate_limited"    // sender over its rate limit
	dropOriginMismatch = "origin_mismatch" // pushed delta not from its origin's cluster
	dropUnknownSender  = "unknown_sender"  // push from a non-member
	dropUnsolicited    = "unsolicited"     // sync data we did not ask for
	dropInvalid        = "invalid"         // Replica rejected a delta/retire
	dropDecrypt        = "decrypt"         // memberlist: wrong key / tampered
	dropLabel          = "label"           // memberlist: wrong label
	dropMemberlist     = "memberlist_decode"
	dropChecksum       = "checksum"
	dropQueueFull      = "queue_full"
	dropStateTooLarge  = "state_too_large"
	dropStreamLimit    = "stream_limit" // too many concurrent inbound streams
	dropPreAuth        = "pre_auth"     // stream refused before memberlist read it
	dropOriginLimit    = "origin_limit" // too many origins / entries per origin
	dropCompressed     = "compressed"   // memberlist compressMsg (decompression bomb)
)

type metrics struct {
	members       *prometheus.GaugeVec
	clusters      *prometheus.GaugeVec
	clusterStale  *prometheus.GaugeVec
	deltas        *prometheus.CounterVec
	bytes         *prometheus.CounterVec
	messages      *prometheus.CounterVec
	syncs         *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	retirements   *prometheus.CounterVec
	lag           prometheus.Histogram
	rejoins       prometheus.Counter
	beats         prometheus.Counter
	broadcastQLen prometheus.GaugeFunc
	versions      *prometheus.GaugeVec
	versionSkew   prometheus.Gauge
}

// setVersions publishes the alive members per announced build version
// ("unknown" for members that announce none) and whether they differ.
func (m *metrics) setVersions(v map[string]float64) {
	m.versions.Reset()
	for ver, n := range v {
		if ver == "" {
			ver = "unknown"
		}
		m.versions.WithLabelValues(ver).Add(n)
	}
	skew := 0.0
	if len(v) > 1 {
		skew = 1
	}
	m.versionSkew.Set(skew)
}

func newMetrics(reg prometheus.Registerer, queueLen func() float64) (*metrics, error) {
	m := &metrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coastguard_gossip_members", Help: "Gossip members by state (alive, dead, left).",
		}, []string{"state"}),
		clusters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coastguard_gossip_clusters", Help: "Known clusters by state (alive, stale).",
		}, []string{"state"}),
		clusterStale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coastguard_gossip_cluster_stale", Help: "1 when no member of the cluster is alive, or for a cluster that sends signed heartbeats, none arrived for three heartbeat periods (its entries are stale but kept until ReconnectTimeout).",
		}, []string{"remote_cluster"}),
		deltas: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_gossip_deltas_total", Help: "Deltas sent (out) and applied (in) by path.",
		}, []string{"dir", "path"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_gossip_bytes_total", Help: "Bytes of coastguard gossip messages sent (out) and received (in).",
		}, []string{"dir"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_gossip_messages_total", Help: "Coastguard gossip messages by direction and type.",
		}, []string{"dir", "type"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_gossip_syncs_total", Help: "Anti-entropy syncs by role and result.",
		}, []string{"role", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_gossip_dropped_total", Help: "Dropped packets/messages by reason.",
		}, []string{"reason"}),
		retirements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_gossip_retirements_total", Help: "Cluster retirements issued locally by cause.",
		}, []string{"cause"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coastguard_gossip_propagation_lag_seconds",
			Help:    "Time from the origin's write (Entry.Stamp, origin wall clock) to local apply. Metrics only.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		beats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_gossip_heartbeats_total", Help: "Fresh origin-signed heartbeats of other clusters received and verified (the reconnect-timeout retirement rests on them).",
		}),
		rejoins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_gossip_rejoin_attempts_total", Help: "Periodic rejoin attempts that contacted at least one address.",
		}),
	}
	m.versions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "coastguard_gossip_member_versions", Help: "Alive gossip members by announced coastguardd version.",
	}, []string{"version"})
	m.versionSkew = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "coastguard_gossip_version_skew", Help: "1 when alive gossip members announce more than one coastguardd version.",
	})
	m.broadcastQLen = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "coastguard_gossip_broadcast_queue", Help: "Pending broadcasts in the head/retire queue.",
	}, queueLen)
	if err := m.register(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// register pre-creates the drop reasons (so they read 0, not absent) and
// registers every collector with reg (nil: none). One Node per registry: a
// second one would export another node's queue length and counters under
// the same names, so it is refused (internal/metricsreg.All).
func (m *metrics) register(reg prometheus.Registerer) error {
	for _, r := range []string{dropDecode, dropOversize, dropUnknownType, dropRateLimited, dropOriginMismatch,
		dropUnknownSender, dropUnsolicited, dropInvalid, dropDecrypt, dropLabel, dropMemberlist, dropChecksum,
		dropQueueFull, dropStateTooLarge, dropStreamLimit, dropPreAuth, dropCompressed,
		dropMetaInvalid, dropMetaUnsigned, dropMetaSignature, dropMetaCluster, dropIncarnation,
		// the data layer's trust refusals: an alert on key_mismatch or a
		// signature drop fires on the first one, from zero
		crdt.ReasonBadSignature, crdt.ReasonUnsigned, crdt.ReasonUnprovenWatermark, crdt.ReasonUnprovenReset,
		crdt.ReasonOriginLimit, crdt.ReasonEntryLimit, crdt.ReasonByteLimit, crdt.ReasonRetireRefused,
		crdt.ReasonKeyMismatch, crdt.ReasonUnknownKey, crdt.ReasonCompletenessMismatch} {
		m.dropped.WithLabelValues(r)
	}
	if err := metricsreg.All(reg, m.members, m.clusters, m.clusterStale, m.deltas, m.bytes,
		m.messages, m.syncs, m.dropped, m.retirements, m.lag, m.rejoins, m.beats, m.broadcastQLen, m.versions, m.versionSkew); err != nil {
		return fmt.Errorf("gossip metrics: %w", err)
	}
	return nil
}
