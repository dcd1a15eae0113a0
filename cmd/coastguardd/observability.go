package main

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
	"github.com/coastguard-mcnp/coastguard/internal/version"
)

// routeKlog sends client-go's klog output (leader election, reflectors,
// workqueues) through the daemon's slog logger, so it honours --log-level and
// the JSON format. klog's own -v gate stays at 0; klog.V(n) lines map to slog
// level -n and are dropped below debug anyway.
func routeKlog(log *slog.Logger) {
	klog.SetSlogLogger(log.With("source", "client-go"))
}

// workqueueMetrics is a workqueue.MetricsProvider on the daemon's registry:
// the standard workqueue_* series, labelled by queue name.
type workqueueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, duration          *prometheus.HistogramVec
}

func newWorkqueueMetrics(reg prometheus.Registerer) (*workqueueMetrics, error) {
	buckets := prometheus.ExponentialBuckets(1e-6, 10, 10) // 1µs .. 1000s
	m := &workqueueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_depth", Help: "Current depth of the workqueue.",
		}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_adds_total", Help: "Adds handled by the workqueue.",
		}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_queue_duration_seconds", Help: "Seconds an item stays in the workqueue before it is requested.", Buckets: buckets,
		}, []string{"name"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_work_duration_seconds", Help: "Seconds processing an item from the workqueue takes.", Buckets: buckets,
		}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration.",
		}, []string{"name"}),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_longest_running_processor_seconds", Help: "Seconds the longest running processor of the workqueue has been running.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_retries_total", Help: "Retries handled by the workqueue.",
		}, []string{"name"}),
	}
	if err := metricsreg.All(reg, m.depth, m.adds, m.latency, m.duration, m.unfinished, m.longest, m.retries); err != nil {
		return nil, fmt.Errorf("workqueue metrics: %w", err)
	}
	return m, nil
}

func (m *workqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}
func (m *workqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}
func (m *workqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}
func (m *workqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.duration.WithLabelValues(name)
}
func (m *workqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}
func (m *workqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name)
}
func (m *workqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}

// debugStateWithVersions adds this daemon's version and the versions its
// alive gossip members announce to /debug/state, so a mixed-version cluster
// set is visible there as well as in coastguard_gossip_version_skew.
func debugStateWithVersions(state any) any {
	b, err := json.Marshal(state)
	if err != nil {
		return state
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return state
	}
	versions := map[string]int{}
	if members, ok := m["members"].([]any); ok {
		for _, x := range members {
			mm, _ := x.(map[string]any)
			if alive, _ := mm["Alive"].(bool); !alive {
				continue
			}
			v, _ := mm["Version"].(string)
			if v == "" {
				v = "unknown"
			}
			versions[v]++
		}
	}
	m["version"] = version.Get()
	m["memberVersions"] = versions
	m["versionSkew"] = len(versions) > 1
	return m
}
