package store

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	commitLatency    prometheus.Histogram
	batchRequests    prometheus.Histogram
	batchChanges     prometheus.Histogram
	entriesPerOrigin *prometheus.GaugeVec
	corruptFiles     prometheus.Counter
	resetOrigins     prometheus.Counter
	loadSeconds      prometheus.Gauge
	commitErrors     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coastguard_store_commit_seconds",
			Help:    "Latency of one bbolt commit (one group of batched writes), including fsync.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batchRequests: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coastguard_store_commit_batch_requests",
			Help:    "Number of write requests (deltas/local writes) coalesced into one bbolt transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		batchChanges: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "coastguard_store_commit_batch_changes",
			Help:    "Number of entry changes written in one bbolt transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		entriesPerOrigin: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coastguard_store_entries",
			Help: "Entries (including tombstones) persisted per origin cluster.",
		}, []string{"origin"}),
		corruptFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_store_corrupt_files_total",
			Help: "Store files found corrupt or truncated at open and moved aside.",
		}),
		resetOrigins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_store_origin_resets_total",
			Help: "Origins whose persisted digest disagreed with their entries at load and were marked for re-pull.",
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_store_commit_errors_total",
			Help: "Failed bbolt commits (disk full, I/O error); the store refuses writes after the first until restart.",
		}),
		loadSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coastguard_store_load_seconds",
			Help: "Duration of the last cold start: file load and in-memory state restore.",
		}),
	}
	if reg != nil {
		m.commitLatency = register(reg, m.commitLatency)
		m.batchRequests = register(reg, m.batchRequests)
		m.batchChanges = register(reg, m.batchChanges)
		m.entriesPerOrigin = register(reg, m.entriesPerOrigin)
		m.corruptFiles = register(reg, m.corruptFiles)
		m.resetOrigins = register(reg, m.resetOrigins)
		m.loadSeconds = register(reg, m.loadSeconds)
		m.commitErrors = register(reg, m.commitErrors)
	}
	return m
}

// register registers c, or returns the collector already registered under
// the same descriptor (a store reopened in the same process keeps counting).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
