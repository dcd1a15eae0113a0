package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"

	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
	"github.com/coastguard-mcnp/coastguard/internal/version"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// runConfig runs the daemon with a resolved configuration (the run command,
// main.go) and returns the exit code.
func runConfig(cfg Config) int {
	log := newLogger(cfg.LogLevel)
	routeKlog(log)
	if err := run(cfg, log); err != nil {
		log.Error("coastguardd failed", "err", err)
		fmt.Fprintf(os.Stderr, "coastguardd: %v\n", err)
		return 1
	}
	return 0
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return newLoggerTo(os.Stderr, l)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not running in a cluster: %w", err)
	}
	return c, nil
}

func gossipConfig(cfg Config) (gossip.Config, error) {
	var g gossip.Config
	host, port, err := splitHostPort(cfg.BindAddr, true)
	if err != nil {
		return g, fmt.Errorf("bind-addr: %w", err)
	}
	g.BindAddr, g.BindPort = host, port
	if cfg.AdvertiseAddr != "" {
		ah, ap, err := splitHostPort(cfg.AdvertiseAddr, false)
		if err != nil {
			return g, fmt.Errorf("advertise-addr: %w", err)
		}
		if ap == 0 {
			ap = port
		}
		g.AdvertiseAddr, g.AdvertisePort = ah, ap
	}
	g.Seeds = effectiveSeeds(cfg.Seeds, cfg.Namespace)
	g.Profile = gossip.Profile(cfg.GossipProfile)
	g.ReconnectTimeout = cfg.ReconnectTimeout
	g.AllowUnsignedMeta = cfg.AllowUnsignedMeta
	if off := cfg.FaultClockOffset; off != 0 {
		g.Now = func() time.Time { return time.Now().Add(off) }
	}
	if cfg.GossipKeyFile != "" {
		keys, err := gossip.LoadKeyringFile(cfg.GossipKeyFile)
		if err != nil {
			return g, fmt.Errorf("gossip-key-file: %w", err)
		}
		g.Keyring = keys
	}
	return g, nil
}

// NoSeeds as the only --seeds entry disables the default seed.
const NoSeeds = "none"

// DefaultSeed is the Lighthouse clusterset DNS name of the coastguard
// Service exported (ServiceExport) from every cluster's namespace ns: it
// resolves to the gossip endpoints of every cluster that exports it.
func DefaultSeed(ns string) string { return "coastguard." + ns + ".svc.clusterset.local" }

// effectiveSeeds: the configured seeds, else the Lighthouse default;
// "none" means no seeds at all (a first, lone cluster).
func effectiveSeeds(seeds []string, ns string) []string {
	switch {
	case len(seeds) == 1 && seeds[0] == NoSeeds:
		return nil
	case len(seeds) == 0:
		return []string{DefaultSeed(ns)}
	}
	return seeds
}

// run runs the daemon until SIGINT or SIGTERM. A signal is a clean stop at
// any point, start-up included: what it interrupts is logged, not failed.
func run(cfg Config, log *slog.Logger) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	err := runUntil(ctx, cfg, log)
	if err != nil && ctx.Err() != nil {
		log.Info("stopped by a signal", "interrupted", err.Error())
		return nil
	}
	return err
}

// runUntil starts the daemon and runs it until ctx ends.
func runUntil(ctx context.Context, cfg Config, log *slog.Logger) error {
	client, dyn, err := kubeClients(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	in, err := policyInputs(cfg)
	if err != nil {
		return err
	}
	// before the first API call: a start that hangs on the API server says so
	log.Info("identifying the cluster through its API server", "flag_cluster_id", cfg.ClusterID, "node", cfg.NodeName)
	id, err := identify(ctx, cfg, client, dyn)
	if err != nil {
		return err
	}
	log = log.With("cluster", id.clusterID)
	watcher, err := submarinerWatcher(id, client, dyn, in.gp, log)
	if err != nil {
		return err
	}

	gcfg, err := runGossipConfig(cfg, log)
	if err != nil {
		return err
	}
	reg, err := newRegistry()
	if err != nil {
		return err
	}
	h := newHealth("state", "enforcement")

	signingKey, endorsement, bundle, err := loadTrust(ctx, cfg, client, log)
	if err != nil {
		return err
	}
	d, err := daemon.New(daemon.Options{
		SigningKey: signingKey, SigningKeyEndorsement: endorsement, TrustBundle: bundle,
		ClusterID: id.clusterID, NodeName: cfg.NodeName, Namespace: cfg.Namespace,
		Client: client, Dynamic: dyn, DataDir: cfg.DataDir, Gossip: gcfg,
		Debounce: cfg.Debounce, MaxDelay: cfg.MaxDelay, LeaseDuration: cfg.LeaseDuration,
		TombstoneGCAfter: cfg.TombstoneGCAfter, ClusterInfo: id.info,
		Submariner: watcher, GlobalnetPolicy: in.gp, ClusterCIDRs: in.clusterCIDRs, ClockOffset: cfg.FaultClockOffset,
		ReleaseLostOrigins: cfg.LostOriginPolicies == "release", Consent: in.consent,
		Registry: reg, Logger: log, Ready: h.set, GossipKeyFile: cfg.GossipKeyFile,
		EmptyViewTimeout: cfg.EmptyViewTimeout, Guards: guards(cfg, id.subNS),
		AdvertiseGlobalIPOf: advertiseGlobalIPOf(cfg, log),
	})
	if err != nil {
		return err
	}
	stop, err := serveEndpoints(cfg, reg, h, d, client, log)
	defer stop()
	if err != nil {
		return err
	}
	log.Info("version", "version", version.Get(), "revision", version.GetRevision())
	log.Info("starting", "node", cfg.NodeName, "bind", cfg.BindAddr, "seeds", cfg.Seeds, "gossip_profile", cfg.GossipProfile, "pid", strconv.Itoa(os.Getpid()))
	return d.Run(ctx)
}

// runGossipConfig is gossipConfig stamped with the build version; it
// warns loudly when gossip runs insecure.
func runGossipConfig(cfg Config, log *slog.Logger) (gossip.Config, error) {
	gcfg, err := gossipConfig(cfg)
	if err != nil {
		return gcfg, err
	}
	if cfg.InsecureGossip {
		log.Warn("INSECURE: --insecure-gossip is set; gossip may be unencrypted and origin signatures are not enforced without --signing-key-file (tests only, see docs/SECURITY.md)",
			"encrypted", len(gcfg.Keyring) > 0, "signing_key", cfg.SigningKeyFile != "")
	}
	gcfg.BuildVersion = version.Get()
	return gcfg, nil
}

// kubeClients connects to the cluster's apiserver.
func kubeClients(kubeconfig string) (*kubernetes.Clientset, dynamic.Interface, error) {
	rc, err := restConfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	rc.UserAgent = "coastguardd"
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return client, dyn, nil
}

// runInputs are the translator's inputs the flags set.
type runInputs struct {
	consent      *enforce.Consent
	gp           enforce.GlobalnetPolicy
	clusterCIDRs map[string]enforce.ClusterNetworks
}

// policyInputs reads the consent file, the Globalnet policy and the
// cluster CIDRs.
func policyInputs(cfg Config) (runInputs, error) {
	var in runInputs
	var err error
	if cfg.ConsentFile != "" {
		if in.consent, err = daemon.LoadConsent(cfg.ConsentFile); err != nil {
			return in, err
		}
	}
	if in.gp, err = enforce.ParseGlobalnetPolicy(cfg.GlobalnetPolicy); err != nil {
		return in, err
	}
	if in.clusterCIDRs, err = enforce.ParseClusterCIDRs(cfg.ClusterCIDRs); err != nil {
		return in, fmt.Errorf("cluster-cidrs: %w", err)
	}
	return in, nil
}

// identity is who this cluster is, and what Submariner says of it.
type identity struct {
	clusterID string
	subNS     string
	info      kube.ClusterInfo
}

// identify discovers the cluster ID (bounded to 30 s) and its Submariner
// networks.
func identify(ctx context.Context, cfg Config, client kubernetes.Interface, dyn dynamic.Interface) (identity, error) {
	id := identity{subNS: envOr("COASTGUARD_SUBMARINER_NAMESPACE", defaultSubmarinerNamespace)}
	idCtx, idCancel := context.WithTimeout(ctx, 30*time.Second)
	clusterID, sub, err := discoverIdentity(idCtx, dyn, cfg.ClusterID, id.subNS)
	idCancel()
	if err != nil {
		return id, err
	}
	id.clusterID = clusterID
	if sub != nil {
		id.info.PodCIDRs, id.info.ServiceCIDRs, id.info.GlobalCIDRs = sub.PodCIDRs, sub.ServiceCIDRs, sub.GlobalCIDRs
		id.info.Globalnet = len(sub.GlobalCIDRs) > 0
	}
	return id, nil
}

// submarinerWatcher watches Submariner's objects of the cluster, and logs
// the identity it starts from.
func submarinerWatcher(id identity, client kubernetes.Interface, dyn dynamic.Interface, gp enforce.GlobalnetPolicy, log *slog.Logger) (*kube.SubmarinerWatcher, error) {
	watcher, err := kube.NewSubmarinerWatcher(kube.SubmarinerConfig{ClusterID: id.clusterID, Dynamic: dyn,
		Discovery: client.Discovery(), Namespace: id.subNS, Base: id.info, Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("cluster identity", "pod_cidrs", id.info.PodCIDRs, "globalnet", id.info.Globalnet,
		"globalnet_policy", gp.String(), "submariner_watching", watcher.Watching())
	return watcher, nil
}

// newRegistry is the daemon's Prometheus registry with the Go, process and
// build collectors, and the workqueue metrics provider installed (before
// any queue exists: the provider applies to queues created later).
func newRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := metricsreg.All(reg, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.BuildInfo()); err != nil {
		return nil, err
	}
	wq, err := newWorkqueueMetrics(reg)
	if err != nil {
		return nil, err
	}
	workqueue.SetProvider(wq)
	return reg, nil
}

// serveEndpoints starts the metrics and admin servers that are configured;
// stop shuts down those that started (also after an error).
func serveEndpoints(cfg Config, reg *prometheus.Registry, h *health, d *daemon.Daemon, client kubernetes.Interface, log *slog.Logger) (stop func(), err error) {
	var started []*http.Server
	stop = func() {
		for i := len(started) - 1; i >= 0; i-- {
			shutdownHTTP(started[i])
		}
	}
	if cfg.MetricsAddr != "" {
		var guard func(http.Handler) http.Handler
		if cfg.MetricsAuth == "kubernetes" {
			ma, err := newMetricsAuth(client, log)
			if err != nil {
				return stop, fmt.Errorf("metrics-auth: %w", err)
			}
			guard = ma.wrap
		}
		srv := newHTTPServer(cfg.MetricsAddr, reg, h, d.Healthy, guard)
		if err := serveHTTP(srv, log); err != nil {
			return stop, fmt.Errorf("metrics-addr %s: %w", cfg.MetricsAddr, err)
		}
		started = append(started, srv)
	}
	if cfg.AdminAddr != "" {
		admin := newAdminServer(cfg.AdminAddr, adminHandler{decommission: d.Decommission,
			status: func() any { return debugStateWithVersions(d.DebugState()) }, scan: d.ScanStore}, log)
		if err := serveHTTP(admin, log); err != nil {
			return stop, fmt.Errorf("admin-addr %s: %w", cfg.AdminAddr, err)
		}
		started = append(started, admin)
	}
	return stop, nil
}

// advertiseGlobalIPOf is the pod whose GlobalIngressIP --advertise-global-ip
// advertises: POD_NAME (the downward API, as the chart sets it), else the
// node name (which defaults to POD_NAME). Empty when the flag is off.
func advertiseGlobalIPOf(cfg Config, log *slog.Logger) string {
	if !cfg.AdvertiseGlobalIP {
		return ""
	}
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		pod = cfg.NodeName
	}
	log.Info("--advertise-global-ip: gossip will advertise this pod's Globalnet ingress IP, not --advertise-addr",
		"pod", pod, "namespace", cfg.Namespace, "advertise_addr_ignored", cfg.AdvertiseAddr)
	return pod
}

func shutdownHTTP(srv *http.Server) {
	sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
	defer c()
	_ = srv.Shutdown(sctx)
}

// defaultSubmarinerNamespace is where Submariner runs unless
// COASTGUARD_SUBMARINER_NAMESPACE says otherwise.
const defaultSubmarinerNamespace = "submariner-operator"

// guards are the guard rails of the flags; protected namespaces default to
// enforce.DefaultProtectedNamespaces.
func guards(cfg Config, submarinerNS string) enforce.Guards {
	ns := cfg.ProtectedNamespaces
	if len(ns) == 0 {
		ns = enforce.DefaultProtectedNamespaces(cfg.Namespace, submarinerNS)
	}
	return enforce.Guards{ProtectedNamespaces: ns, EnforceRemoteInProtected: cfg.EnforceRemoteInProtected,
		MaxNetworkPoliciesPerMCNP: cfg.MaxNetworkPoliciesPerMCNP, MaxIPBlocksPerNetworkPolicy: cfg.MaxIPBlocksPerNetworkPolicy,
		MaxBytesPerMCNP: cfg.MaxBytesPerMCNP}
}
