package main

import (
	"context"
	"fmt"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
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

func runUntil(ctx context.Context, cfg Config, log *slog.Logger) error {
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	rc.UserAgent = "coastguardd"
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}

	var consent *enforce.Consent
	if cfg.ConsentFile != "" {
		if consent, err = daemon.LoadConsent(cfg.ConsentFile); err != nil {
			return err
		}
	}
	gp, err := enforce.ParseGlobalnetPolicy(cfg.GlobalnetPolicy)
	if err != nil {
		return err
	}
	clusterCIDRs, err := enforce.ParseClusterCIDRs(cfg.ClusterCIDRs)
	if err != nil {
		return fmt.Errorf("cluster-cidrs: %w", err)
	}
	subNS := envOr("COASTGUARD_SUBMARINER_NAMESPACE", defaultSubmarinerNamespace)
	idCtx, idCancel := context.WithTimeout(ctx, 30*time.Second)
	clusterID, sub, err := discoverIdentity(idCtx, dyn, cfg.ClusterID, subNS)
	idCancel()
	if err != nil {
		return err
	}
	var info kube.ClusterInfo
	if sub != nil {
		info.PodCIDRs, info.ServiceCIDRs, info.GlobalCIDRs = sub.PodCIDRs, sub.ServiceCIDRs, sub.GlobalCIDRs
		info.Globalnet = len(sub.GlobalCIDRs) > 0
	}
	log = log.With("cluster", clusterID)
	watcher, err := kube.NewSubmarinerWatcher(kube.SubmarinerConfig{ClusterID: clusterID, Dynamic: dyn,
		Discovery: client.Discovery(), Namespace: subNS, Base: info, Logger: log})
	if err != nil {
		return err
	}
	log.Info("cluster identity", "pod_cidrs", info.PodCIDRs, "globalnet", info.Globalnet,
		"globalnet_policy", gp.String(), "submariner_watching", watcher.Watching())

	gcfg, err := gossipConfig(cfg)
	if err != nil {
		return err
	}
	if cfg.InsecureGossip {
		log.Warn("INSECURE: --insecure-gossip is set; gossip may be unencrypted and origin signatures are not enforced without --signing-key-file (tests only, see docs/SECURITY.md)",
			"encrypted", len(gcfg.Keyring) > 0, "signing_key", cfg.SigningKeyFile != "")
	}

	gcfg.BuildVersion = version.Get()

	reg := prometheus.NewRegistry()
	if err := metricsreg.All(reg, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.BuildInfo()); err != nil {
		return err
	}
	wq, err := newWorkqueueMetrics(reg)
	if err != nil {
		return err
	}
	// Before any queue exists: the provider applies to queues created later.
	workqueue.SetProvider(wq)
	h := newHealth("state", "enforcement")

	signingKey, endorsement, bundle, err := loadTrust(ctx, cfg, client, log)
	if err != nil {
		return err
	}
	d, err := daemon.New(daemon.Options{
		SigningKey: signingKey, SigningKeyEndorsement: endorsement, TrustBundle: bundle,
		ClusterID: clusterID, NodeName: cfg.NodeName, Namespace: cfg.Namespace,
		Client: client, Dynamic: dyn, DataDir: cfg.DataDir, Gossip: gcfg,
		Debounce: cfg.Debounce, MaxDelay: cfg.MaxDelay, LeaseDuration: cfg.LeaseDuration,
		TombstoneGCAfter: cfg.TombstoneGCAfter, ClusterInfo: info,
		Submariner: watcher, GlobalnetPolicy: gp, ClusterCIDRs: clusterCIDRs, ClockOffset: cfg.FaultClockOffset,
		ReleaseLostOrigins: cfg.LostOriginPolicies == "release", Consent: consent,
		Registry: reg, Logger: log, Ready: h.set, GossipKeyFile: cfg.GossipKeyFile,
		EmptyViewTimeout: cfg.EmptyViewTimeout, Guards: guards(cfg, subNS),
	})
	if err != nil {
		return err
	}
	if cfg.MetricsAddr != "" {
		var guard func(http.Handler) http.Handler
		if cfg.MetricsAuth == "kubernetes" {
			ma, err := newMetricsAuth(client, log)
			if err != nil {
				return fmt.Errorf("metrics-auth: %w", err)
			}
			guard = ma.wrap
		}
		srv := newHTTPServer(cfg.MetricsAddr, reg, h, d.Healthy, guard)
		if err := serveHTTP(srv, log); err != nil {
			return fmt.Errorf("metrics-addr %s: %w", cfg.MetricsAddr, err)
		}
		defer shutdownHTTP(srv)
	}
	if cfg.AdminAddr != "" {
		admin := newAdminServer(cfg.AdminAddr, adminHandler{decommission: d.Decommission,
			status: func() any { return debugStateWithVersions(d.DebugState()) }}, log)
		if err := serveHTTP(admin, log); err != nil {
			return fmt.Errorf("admin-addr %s: %w", cfg.AdminAddr, err)
		}
		defer shutdownHTTP(admin)
	}
	log.Info("version", "version", version.Get(), "revision", version.GetRevision())
	log.Info("starting", "node", cfg.NodeName, "bind", cfg.BindAddr, "seeds", cfg.Seeds, "gossip_profile", cfg.GossipProfile, "pid", strconv.Itoa(os.Getpid()))
	return d.Run(ctx)
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
