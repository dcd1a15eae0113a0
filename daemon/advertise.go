package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// ReadyAdvertise is the readiness check that fails while a daemon with
// --advertise-global-ip has no usable global IP to advertise.
const ReadyAdvertise = "globalnet-advertise"

type advertiseMetrics struct {
	allocated prometheus.Gauge
	problems  *prometheus.CounterVec
}

func newAdvertiseMetrics(reg prometheus.Registerer) (*advertiseMetrics, error) {
	m := &advertiseMetrics{
		allocated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_globalnet_advertise_ip_allocated",
			Help: "With --advertise-global-ip: 1 once this pod's GlobalIngressIP is allocated and advertised for gossip, 0 while the daemon waits (it has not joined the mesh)."}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "coastguard_globalnet_advertise_problems_total",
			Help: "With --advertise-global-ip: changes to an unusable GlobalIngressIP state of this pod, by reason (not_allocated, wrong_target, invalid_ip, outside_global_cidr, changed)."},
			[]string{"reason"}),
	}
	return m, metricsreg.All(reg, m.allocated, m.problems)
}

// advertiseGlobalIP implements --advertise-global-ip (Options.AdvertiseGlobalIPOf):
// under Globalnet, pod IPs are neither routable nor unique across clusters,
// so the daemon advertises its pod's GlobalIngressIP (allocated because the
// chart exports the daemon's headless Service) instead. It waits, not ready
// and not joined, until that IP is allocated: it never joins with an
// address the other clusters cannot reach. Later changes stop the daemon
// (keepGlobalIP).
func (d *Daemon) advertiseGlobalIP(ctx context.Context) error {
	o := d.opts
	if o.AdvertiseGlobalIPOf == "" {
		return nil
	}
	m, err := newAdvertiseMetrics(o.Registry)
	if err != nil {
		return err
	}
	w, err := kube.NewPodGlobalIPWatcher(kube.PodGlobalIPConfig{Dynamic: o.Dynamic, Namespace: o.Namespace,
		Pod: o.AdvertiseGlobalIPOf, GlobalCIDRs: d.ownGlobalCIDRs(), Logger: d.log})
	if err != nil {
		return err
	}
	go w.Run(ctx)
	ip, err := d.waitGlobalIP(ctx, w, m)
	if err != nil {
		return err
	}
	d.opts.Gossip.AdvertiseAddr = ip.String()
	go d.keepGlobalIP(ctx, w, m, ip)
	return nil
}

// ownGlobalCIDRs are this cluster's Globalnet CIDRs as it knows them
// (Submariner's Cluster object, --cluster-cidrs <id>:global=).
func (d *Daemon) ownGlobalCIDRs() []netip.Prefix {
	own := enforce.MergeNetworks(d.opts.ClusterCIDRs)[d.opts.ClusterID].GlobalCIDRs
	for _, s := range d.opts.ClusterInfo.GlobalCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			own = append(own, p.Masked())
		}
	}
	if len(own) == 0 {
		d.log.Warn("--advertise-global-ip: this cluster's global CIDR is unknown (no Submariner Cluster object with global_cidr, no --cluster-cidrs <id>:global=); the allocated IP is not range-checked")
	}
	return own
}

// waitGlobalIP blocks until the watcher has a usable IP, reporting each new
// problem once (log, metric, readiness).
func (d *Daemon) waitGlobalIP(ctx context.Context, w *kube.PodGlobalIPWatcher, m *advertiseMetrics) (netip.Addr, error) {
	began, last := time.Now(), ""
	for {
		ip, err := w.Current()
		if err == nil {
			m.allocated.Set(1)
			d.opts.Ready(ReadyAdvertise, nil)
			d.log.Info("advertising this pod's Globalnet ingress IP for gossip", "global_ip", ip.String(),
				"waited", time.Since(began).Round(time.Millisecond).String())
			return ip, nil
		}
		if err.Error() != last {
			last = err.Error()
			reason := kube.GlobalIPNotAllocated
			var p *kube.GlobalIPProblem
			if errors.As(err, &p) {
				reason = p.Reason
			}
			m.problems.WithLabelValues(reason).Inc()
			d.opts.Ready(ReadyAdvertise, fmt.Errorf("not joining the mesh: %w", err))
			d.log.Warn("--advertise-global-ip: waiting for a usable global IP; not joining the mesh", "reason", reason, "err", err)
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, ctx.Err()
		case <-w.Changed():
		}
	}
}

// keepGlobalIP stops the daemon when the advertised global IP is released
// or replaced: memberlist cannot change a member's address, and the old one
// no longer reaches this pod. The process exits non-zero; after its
// restart it waits for the new IP and joins with it.
func (d *Daemon) keepGlobalIP(ctx context.Context, w *kube.PodGlobalIPWatcher, m *advertiseMetrics, advertised netip.Addr) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Changed():
		}
		ip, err := w.Current()
		if err == nil && ip == advertised {
			continue
		}
		if err == nil {
			err = fmt.Errorf("allocated IP changed from %s to %s", advertised, ip)
		}
		m.allocated.Set(0)
		m.problems.WithLabelValues("changed").Inc()
		d.opts.Ready(ReadyAdvertise, fmt.Errorf("advertised global IP %s no longer valid: %w", advertised, err))
		d.log.Error("--advertise-global-ip: the advertised global IP is no longer this pod's; exiting to rejoin with a valid address",
			"advertised", advertised.String(), "err", err)
		d.fatalMu.Lock()
		if d.fatalErr == nil {
			d.fatalErr = fmt.Errorf("advertised Globalnet ingress IP %s no longer valid: %w", advertised, err)
		}
		d.fatalMu.Unlock()
		if d.stop != nil {
			d.stop()
		}
		return
	}
}
