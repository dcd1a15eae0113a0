package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

const benchNS = "bench"

const benchMCNP = `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata:
  name: db-from-web
  namespace: bench
spec:
  clusterSelector: {}
  podSelector:
    matchLabels: {role: db}
  ingress:
  - from:
    - clusterSelector: {}
      podSelector:
        matchLabels: {app: web}
    ports:
    - {protocol: TCP, port: 5432}
`

// npWatch follows the generated NetworkPolicies of one cluster and records
// when each awaited ipBlock first appears.
type npWatch struct {
	name string
	mu   sync.Mutex
	// pending: ip -> time the pod status carrying it was written in A.
	pending map[string]time.Time
	// lat: observed latencies, in observation order.
	lat []time.Duration
	// ips: current ipBlock set per NetworkPolicy.
	ips    map[string]map[string]bool
	notify chan struct{}
}

func newNPWatch(name string) *npWatch {
	return &npWatch{name: name, pending: map[string]time.Time{}, ips: map[string]map[string]bool{}, notify: make(chan struct{}, 1)}
}

func (w *npWatch) expect(ip string, at time.Time) {
	w.mu.Lock()
	w.pending[ip] = at
	w.mu.Unlock()
}

func (w *npWatch) observe(np *networkingv1.NetworkPolicy) {
	now := time.Now()
	set := map[string]bool{}
	add := func(peers []networkingv1.NetworkPolicyPeer) {
		for _, p := range peers {
			if p.IPBlock == nil {
				continue
			}
			if pfx, err := netip.ParsePrefix(p.IPBlock.CIDR); err == nil {
				set[pfx.Addr().String()] = true
			}
		}
	}
	for _, r := range np.Spec.Ingress {
		add(r.From)
	}
	for _, r := range np.Spec.Egress {
		add(r.To)
	}
	w.mu.Lock()
	w.ips[np.Name] = set
	hit := false
	for ip := range set {
		if at, ok := w.pending[ip]; ok {
			w.lat = append(w.lat, now.Sub(at))
			delete(w.pending, ip)
			hit = true
		}
	}
	w.mu.Unlock()
	if hit {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
}

func (w *npWatch) forget(np *networkingv1.NetworkPolicy) {
	w.mu.Lock()
	delete(w.ips, np.Name)
	w.mu.Unlock()
}

func (w *npWatch) isPending(ip string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.pending[ip]
	return ok
}

func (w *npWatch) has(ip string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.ips {
		if s[ip] {
			return true
		}
	}
	return false
}

// take returns the latencies recorded so far and resets them and the
// pending set.
func (w *npWatch) take() ([]time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out, left := w.lat, len(w.pending)
	w.lat, w.pending = nil, map[string]time.Time{}
	return out, left
}

func (w *npWatch) start(ctx context.Context, client kubernetes.Interface) error {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(benchNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = harness.ManagedSelector }))
	inf := f.Networking().V1().NetworkPolicies().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if np, ok := o.(*networkingv1.NetworkPolicy); ok {
				w.observe(np)
			}
		},
		UpdateFunc: func(_, o any) {
			if np, ok := o.(*networkingv1.NetworkPolicy); ok {
				w.observe(np)
			}
		},
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if np, ok := o.(*networkingv1.NetworkPolicy); ok {
				w.forget(np)
			}
		},
	})
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("%s: NetworkPolicy informer did not sync", w.name)
	}
	return nil
}

// fastClient is a client for the bench's own writes with a rate limit high
// enough for 500 changes/s.
func fastClient(c *harness.Cluster) (kubernetes.Interface, error) {
	rc := rest.CopyConfig(c.Config)
	rc.QPS, rc.Burst = 5000, 5000
	rc.UserAgent = "coastguard-bench"
	return kubernetes.NewForConfig(rc)
}

func setPodIP(ctx context.Context, cl kubernetes.Interface, name, ip string) error {
	now := metav1.NewTime(time.Now())
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"phase":      corev1.PodRunning,
		"podIP":      ip,
		"podIPs":     []map[string]string{{"ip": ip}},
		"startTime":  now,
		"conditions": []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
	}})
	if err != nil {
		return err
	}
	_, err = cl.CoreV1().Pods(benchNS).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func createPod(ctx context.Context, cl kubernetes.Interface, name string, labels map[string]string) error {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNS, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: harness.PodImage}}},
	}
	_, err := cl.CoreV1().Pods(benchNS).Create(ctx, p, metav1.CreateOptions{})
	return err
}

// e2eEnv is a 3-cluster mesh on real apiservers with one coastguardd each.
type e2eEnv struct {
	env     *harness.Env
	daemons []*harness.Daemon
	a       kubernetes.Interface
	watchB  *npWatch
	watchC  *npWatch
}

func startE2E(ctx context.Context) (*e2eEnv, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	env, err := harness.New(ctx, harness.Options{Clusters: 3, Logf: func(f string, a ...any) { slog.Debug(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return nil, err
	}
	e := &e2eEnv{env: env}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	slog.Info("e2e: control planes ready", "took", env.StartupTime.Round(time.Millisecond))
	if err := env.InstallCRDs(ctx, filepath.Join(root, "deploy", "crds")); err != nil {
		return nil, err
	}
	if err := e.startDaemons(ctx); err != nil {
		return nil, err
	}
	for _, c := range env.Clusters {
		if err := c.EnsureNamespace(ctx, benchNS, nil); err != nil {
			return nil, err
		}
	}
	a := env.Clusters[0]
	if out, errOut, err := a.KubectlInput(ctx, []byte(benchMCNP), "apply", "-f", "-"); err != nil {
		return nil, fmt.Errorf("apply MCNP: %v: %s %s", err, out, errOut)
	}
	if e.a, err = fastClient(a); err != nil {
		return nil, err
	}
	if err := e.watchNetworkPolicies(ctx); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

// startDaemons builds coastguardd, starts one daemon per cluster and waits
// until every daemon is ready.
func (e *e2eEnv) startDaemons(ctx context.Context) error {
	env := e.env
	bin, err := harness.Build("./cmd/coastguardd")
	if err != nil {
		return err
	}
	// Pod-IP ownership: the workload gives cluster A's pods IPs from all of
	// 10.1.x, 10.50.x and 10.100.x, so A's trusted pod CIDRs say so.
	cidrs := append(env.ClusterCIDRs(), env.Clusters[0].Name+"=10.50.0.0/16", env.Clusters[0].Name+"=10.100.0.0/16") // no overlap with B and C: overlapping trusted ranges are refused
	for _, c := range env.Clusters {
		d, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin, ClusterCIDRs: cidrs})
		if err != nil {
			return err
		}
		e.daemons = append(e.daemons, d)
	}
	for _, d := range e.daemons {
		if err := d.WaitReady(ctx, 90*time.Second); err != nil {
			return fmt.Errorf("daemon %s: %w", d.NodeName, err)
		}
	}
	return nil
}

// watchNetworkPolicies starts watching the generated NetworkPolicies of B
// and C.
func (e *e2eEnv) watchNetworkPolicies(ctx context.Context) error {
	e.watchB, e.watchC = newNPWatch(e.env.Clusters[1].Name), newNPWatch(e.env.Clusters[2].Name)
	for i, w := range []*npWatch{e.watchB, e.watchC} {
		cl, err := fastClient(e.env.Clusters[1+i])
		if err != nil {
			return err
		}
		if err := w.start(ctx, cl); err != nil {
			return err
		}
	}
	return nil
}

func (e *e2eEnv) close() {
	if err := e.env.Close(); err != nil {
		slog.Warn("e2e: closing the clusters", "err", err)
	}
	harness.RemoveBuilds()
}

func runE2E(ctx context.Context, cfg *config, rec *recorder) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e, err := startE2E(ctx)
	if err != nil {
		return err
	}
	defer e.close()
	if err := e2ePropagation(ctx, cfg, rec, e); err != nil {
		return fmt.Errorf("propagation: %w", err)
	}
	if err := e2eChurn(ctx, cfg, rec, e); err != nil {
		return fmt.Errorf("churn: %w", err)
	}
	return nil
}

// e2ePropagation changes the IP of one pod in A, one change at a time with
// jittered spacing, and measures from just before the status write in A
// until B's generated NetworkPolicy carries the new IP (seen by a watch).
func e2ePropagation(ctx context.Context, cfg *config, rec *recorder, e *e2eEnv) error {
	changes, warm := 120, 5
	if cfg.quick {
		changes, warm = 15, 3
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x9a9))
	if err := createPod(ctx, e.a, "probe", map[string]string{"app": "web"}); err != nil {
		return err
	}
	timeouts := 0
	for k := 0; k < warm+changes; k++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ip := fmt.Sprintf("10.1.%d.%d", k/250, k%250+2)
		t0 := time.Now()
		e.watchB.expect(ip, t0)
		e.watchC.expect(ip, t0)
		if err := setPodIP(ctx, e.a, "probe", ip); err != nil {
			return err
		}
		deadline := time.Now().Add(15 * time.Second)
		for (e.watchB.isPending(ip) || e.watchC.isPending(ip)) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-e.watchB.notify:
			case <-e.watchC.notify:
			case <-time.After(20 * time.Millisecond):
			}
		}
		if e.watchB.isPending(ip) {
			timeouts++
		}
		if k == warm-1 {
			e.watchB.take()
			e.watchC.take()
		}
		// jittered spacing so changes do not phase-lock with the debouncer
		time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
	}
	latB, leftB := e.watchB.take()
	latC, _ := e.watchC.take()
	sb, sc := sortDurations(latB), sortDurations(latC)
	rec.e2eLatencies = append(rec.e2eLatencies, latB...)
	params := map[string]any{"changes": changes, "warmup": warm, "observed": len(latB), "timeouts_15s": timeouts + leftB,
		"clusters": 3, "from": "pod status patch in A", "to": "B's generated NetworkPolicy (watch) contains the IP",
		"daemon":   "coastguardd defaults (debounce 50ms, max-delay 500ms), gossip profile local",
		"c_p50_ms": round(percentileMS(sc, 0.5)), "c_p99_ms": round(percentileMS(sc, 0.99))}
	rec.add("propagation_p50_ms", percentileMS(sb, 0.5), "ms", params, "<= 50", le(50))
	rec.add("propagation_p99_ms", percentileMS(sb, 0.99), "ms", params, "<= 150", le(150))
	return nil
}

type daemonSample struct {
	pending, queue float64
}

// e2eChurn writes pod IP changes in A at a fixed rate and measures how far
// B and C lag behind, the daemons' queue depths and their memory.
func e2eChurn(ctx context.Context, cfg *config, rec *recorder, e *e2eEnv) error {
	pods, rate, dur := 1000, 500, 60*time.Second
	if cfg.quick {
		pods, dur = 200, 5*time.Second
	}
	// Create the churn pods (Running, IPs 10.50.x.y) and wait until B has them.
	names := make([]string, pods)
	work := make(chan int)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ip := fmt.Sprintf("10.50.%d.%d", i/250, i%250+2)
				err := createPod(ctx, e.a, names[i], map[string]string{"app": "web", "churn": "yes"})
				if err == nil {
					e.watchB.expect(ip, time.Now())
					err = setPodIP(ctx, e.a, names[i], ip)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for i := range names {
		names[i] = fmt.Sprintf("churn-%04d", i)
		work <- i
	}
	close(work)
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	if err := harness.Eventually(ctx, 120*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		return e.watchB.has(fmt.Sprintf("10.50.%d.%d", (pods-1)/250, (pods-1)%250+2)), nil
	}); err != nil {
		return fmt.Errorf("churn pods never reached B: %w", err)
	}
	time.Sleep(2 * time.Second)
	e.watchB.take()
	e.watchC.take()

	rssStart := map[string]uint64{}
	for _, d := range e.daemons {
		if r, err := d.RSS(); err == nil {
			rssStart[d.NodeName] = r
		}
	}

	// Scrape the daemons every second.
	var mu sync.Mutex
	maxPending := map[string]float64{}
	maxQueue := map[string]float64{}
	var series []map[string]daemonSample
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	var scrapeWG sync.WaitGroup
	scrapeWG.Add(1)
	go func() {
		defer scrapeWG.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-scrapeCtx.Done():
				return
			case <-t.C:
			}
			sample := map[string]daemonSample{}
			for _, d := range e.daemons {
				cctx, cancel := context.WithTimeout(scrapeCtx, 2*time.Second)
				fam, err := d.Metrics(cctx)
				cancel()
				if err != nil {
					continue
				}
				p, _ := harness.MetricValue(fam, "coastguard_enforcer_pending", nil)
				q, _ := harness.MetricValue(fam, "coastguard_gossip_broadcast_queue", nil)
				sample[d.NodeName] = daemonSample{pending: p, queue: q}
			}
			mu.Lock()
			for n, s := range sample {
				maxPending[n] = max(maxPending[n], s.pending)
				maxQueue[n] = max(maxQueue[n], s.queue)
			}
			series = append(series, sample)
			mu.Unlock()
		}
	}()

	// Paced writers: change k is due at t0 + k/rate.
	total := int(dur.Seconds()) * rate
	jobs := make(chan int, 64)
	var sent, failed atomic.Int64
	lastIP := make([]string, pods)
	var lastMu sync.Mutex
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				i := k % pods
				ip := fmt.Sprintf("10.%d.%d.%d", 100+k/65536, (k/256)%256, k%256)
				at := time.Now()
				e.watchB.expect(ip, at)
				e.watchC.expect(ip, at)
				if err := setPodIP(ctx, e.a, names[i], ip); err != nil {
					failed.Add(1)
					continue
				}
				sent.Add(1)
				lastMu.Lock()
				lastIP[i] = ip
				lastMu.Unlock()
			}
		}()
	}
	// The run is time-boxed: when the apiserver cannot absorb the rate,
	// changes past the window are not sent and the achieved rate says so.
	t0 := time.Now()
	for k := 0; k < total && ctx.Err() == nil; k++ {
		due := t0.Add(time.Duration(k) * time.Second / time.Duration(rate))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if time.Since(t0) > dur {
			break
		}
		select {
		case jobs <- k:
		case <-time.After(time.Until(t0.Add(dur))):
		}
	}
	close(jobs)
	wg.Wait()
	writeDur := time.Since(t0)
	endAt := time.Now()

	// Catch-up: every pod's final IP must reach B and C.
	var finals []string
	for _, ip := range lastIP {
		if ip != "" {
			finals = append(finals, ip)
		}
	}
	caughtUp := func() bool {
		for _, ip := range finals {
			if !e.watchB.has(ip) || !e.watchC.has(ip) {
				return false
			}
		}
		return true
	}
	catchErr := harness.Eventually(ctx, 120*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) { return caughtUp(), nil })
	catchUp := time.Since(endAt)
	stopScrape()
	scrapeWG.Wait()
	rssEnd := map[string]uint64{}
	for _, d := range e.daemons {
		if r, err := d.RSS(); err == nil {
			rssEnd[d.NodeName] = r
		}
	}
	latB, supersededB := e.watchB.take()
	latC, supersededC := e.watchC.take()
	sb, sc := sortDurations(latB), sortDurations(latC)

	achieved := float64(sent.Load()) / writeDur.Seconds()
	mu.Lock()
	endPending := map[string]float64{}
	if len(series) > 0 {
		for n, s := range series[len(series)-1] {
			endPending[n] = s.pending
		}
	}
	mu.Unlock()
	nodes := make([]string, 0, len(e.daemons))
	for _, d := range e.daemons {
		nodes = append(nodes, d.NodeName)
	}
	base := map[string]any{"target_rate_per_s": rate, "duration_s": dur.Seconds(), "pods": pods, "writers": 32,
		"quick_shorter": cfg.quick}
	rec.add("churn_500_per_s_achieved_rate", achieved, "changes/s", merge(base, map[string]any{"sent": sent.Load(), "failed": failed.Load(),
		"what": "pod status patches accepted by A's apiserver per second"}), "", nil)
	keptUp := catchErr == nil
	rec.add("churn_500_per_s_lag_p99_ms", percentileMS(sb, 0.99), "ms", merge(base, map[string]any{
		"lag": "status patch in A -> IP in B's NetworkPolicy", "p50_ms": round(percentileMS(sb, 0.5)), "observed": len(sb),
		"superseded_before_seen": supersededB, "c_p99_ms": round(percentileMS(sc, 0.99)), "c_superseded": supersededC}), "", nil)
	rec.add("churn_500_per_s_catch_up_ms", ms(catchUp), "ms", merge(base, map[string]any{
		"what": "end of writes until B and C hold every pod's final IP", "caught_up": keptUp}), "", nil)
	for _, n := range nodes {
		rec.add("churn_500_per_s_max_enforcer_pending", maxPending[n], "policies", map[string]any{"daemon": n,
			"end": endPending[n], "max_broadcast_queue": maxQueue[n], "scrapes": len(series),
			"note": "inventory workqueue depth is not exported by coastguardd"}, "", nil)
	}
	for _, n := range nodes {
		rec.add("churn_daemon_rss_start_mib", float64(rssStart[n])/(1<<20), "MiB", map[string]any{"daemon": n}, "", nil)
		rec.add("churn_daemon_rss_end_mib", float64(rssEnd[n])/(1<<20), "MiB", map[string]any{"daemon": n,
			"growth_mib": round(float64(int64(rssEnd[n])-int64(rssStart[n])) / (1 << 20))}, "", nil)
	}
	if catchErr != nil {
		return fmt.Errorf("B/C did not catch up within 120s after the churn: %w", catchErr)
	}
	return nil
}
