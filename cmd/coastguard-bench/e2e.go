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
	c := &churnRun{e: e, pods: 1000, rate: 500, dur: 60 * time.Second, quick: cfg.quick}
	if cfg.quick {
		c.pods, c.dur = 200, 5*time.Second
	}
	if err := c.createPods(ctx); err != nil {
		return err
	}
	c.rssStart = daemonRSS(e.daemons)

	// Scrape the daemons every second.
	scr := &daemonScraper{maxPending: map[string]float64{}, maxQueue: map[string]float64{}}
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	var scrapeWG sync.WaitGroup
	scrapeWG.Add(1)
	go func() {
		defer scrapeWG.Done()
		scr.run(scrapeCtx, e.daemons)
	}()

	c.write(ctx)
	endAt := time.Now()
	catchErr := c.awaitCatchUp(ctx)
	c.catchUp = time.Since(endAt)
	stopScrape()
	scrapeWG.Wait()
	c.rssEnd = daemonRSS(e.daemons)
	c.record(rec, scr, catchErr == nil)
	if catchErr != nil {
		return fmt.Errorf("B/C did not catch up within 120s after the churn: %w", catchErr)
	}
	return nil
}

// churnRun is the churn's workload and what it measured.
type churnRun struct {
	e                 *e2eEnv
	pods, rate        int
	dur               time.Duration
	quick             bool
	names             []string
	sent, failed      atomic.Int64
	lastIP            []string // per pod, the last IP written
	writeDur, catchUp time.Duration
	rssStart, rssEnd  map[string]uint64
}

// createPods creates the churn pods (Running, IPs 10.50.x.y) with 8
// writers and waits until B has them.
func (c *churnRun) createPods(ctx context.Context) error {
	e := c.e
	c.names = make([]string, c.pods)
	work := make(chan int)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ip := fmt.Sprintf("10.50.%d.%d", i/250, i%250+2)
				err := createPod(ctx, e.a, c.names[i], map[string]string{"app": "web", "churn": "yes"})
				if err == nil {
					e.watchB.expect(ip, time.Now())
					err = setPodIP(ctx, e.a, c.names[i], ip)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for i := range c.names {
		c.names[i] = fmt.Sprintf("churn-%04d", i)
		work <- i
	}
	close(work)
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	if err := harness.Eventually(ctx, 120*time.Second, 100*time.Millisecond, func(context.Context) (bool, error) {
		return e.watchB.has(fmt.Sprintf("10.50.%d.%d", (c.pods-1)/250, (c.pods-1)%250+2)), nil
	}); err != nil {
		return fmt.Errorf("churn pods never reached B: %w", err)
	}
	time.Sleep(2 * time.Second)
	e.watchB.take()
	e.watchC.take()
	return nil
}

// write runs 32 paced writers: change k is due at t0 + k/rate. The run is
// time-boxed: when the apiserver cannot absorb the rate, changes past the
// window are not sent and the achieved rate says so.
func (c *churnRun) write(ctx context.Context) {
	e := c.e
	total := int(c.dur.Seconds()) * c.rate
	jobs := make(chan int, 64)
	c.lastIP = make([]string, c.pods)
	var lastMu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				i := k % c.pods
				ip := fmt.Sprintf("10.%d.%d.%d", 100+k/65536, (k/256)%256, k%256)
				at := time.Now()
				e.watchB.expect(ip, at)
				e.watchC.expect(ip, at)
				if err := setPodIP(ctx, e.a, c.names[i], ip); err != nil {
					c.failed.Add(1)
					continue
				}
				c.sent.Add(1)
				lastMu.Lock()
				c.lastIP[i] = ip
				lastMu.Unlock()
			}
		}()
	}
	t0 := time.Now()
	for k := 0; k < total && ctx.Err() == nil; k++ {
		due := t0.Add(time.Duration(k) * time.Second / time.Duration(c.rate))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if time.Since(t0) > c.dur {
			break
		}
		select {
		case jobs <- k:
		case <-time.After(time.Until(t0.Add(c.dur))):
		}
	}
	close(jobs)
	wg.Wait()
	c.writeDur = time.Since(t0)
}

// awaitCatchUp waits up to 120s until every pod's final IP reached B and C.
func (c *churnRun) awaitCatchUp(ctx context.Context) error {
	var finals []string
	for _, ip := range c.lastIP {
		if ip != "" {
			finals = append(finals, ip)
		}
	}
	caughtUp := func() bool {
		for _, ip := range finals {
			if !c.e.watchB.has(ip) || !c.e.watchC.has(ip) {
				return false
			}
		}
		return true
	}
	return harness.Eventually(ctx, 120*time.Second, 50*time.Millisecond, func(context.Context) (bool, error) { return caughtUp(), nil })
}

// record adds the churn's metrics: achieved rate, lag, catch-up, and per
// daemon its queue depths and memory.
func (c *churnRun) record(rec *recorder, scr *daemonScraper, keptUp bool) {
	latB, supersededB := c.e.watchB.take()
	latC, supersededC := c.e.watchC.take()
	sb, sc := sortDurations(latB), sortDurations(latC)

	achieved := float64(c.sent.Load()) / c.writeDur.Seconds()
	endPending, scrapes := scr.end()
	base := map[string]any{"target_rate_per_s": c.rate, "duration_s": c.dur.Seconds(), "pods": c.pods, "writers": 32,
		"quick_shorter": c.quick}
	rec.add("churn_500_per_s_achieved_rate", achieved, "changes/s", merge(base, map[string]any{"sent": c.sent.Load(), "failed": c.failed.Load(),
		"what": "pod status patches accepted by A's apiserver per second"}), "", nil)
	rec.add("churn_500_per_s_lag_p99_ms", percentileMS(sb, 0.99), "ms", merge(base, map[string]any{
		"lag": "status patch in A -> IP in B's NetworkPolicy", "p50_ms": round(percentileMS(sb, 0.5)), "observed": len(sb),
		"superseded_before_seen": supersededB, "c_p99_ms": round(percentileMS(sc, 0.99)), "c_superseded": supersededC}), "", nil)
	rec.add("churn_500_per_s_catch_up_ms", ms(c.catchUp), "ms", merge(base, map[string]any{
		"what": "end of writes until B and C hold every pod's final IP", "caught_up": keptUp}), "", nil)
	for _, d := range c.e.daemons {
		n := d.NodeName
		rec.add("churn_500_per_s_max_enforcer_pending", scr.maxPending[n], "policies", map[string]any{"daemon": n,
			"end": endPending[n], "max_broadcast_queue": scr.maxQueue[n], "scrapes": scrapes,
			"note": "inventory workqueue depth is not exported by coastguardd"}, "", nil)
	}
	for _, d := range c.e.daemons {
		n := d.NodeName
		rec.add("churn_daemon_rss_start_mib", float64(c.rssStart[n])/(1<<20), "MiB", map[string]any{"daemon": n}, "", nil)
		rec.add("churn_daemon_rss_end_mib", float64(c.rssEnd[n])/(1<<20), "MiB", map[string]any{"daemon": n,
			"growth_mib": round(float64(int64(c.rssEnd[n])-int64(c.rssStart[n])) / (1 << 20))}, "", nil)
	}
}

// daemonRSS is each daemon's resident memory, by node name (a daemon whose
// RSS cannot be read is left out).
func daemonRSS(daemons []*harness.Daemon) map[string]uint64 {
	out := map[string]uint64{}
	for _, d := range daemons {
		if r, err := d.RSS(); err == nil {
			out[d.NodeName] = r
		}
	}
	return out
}

// daemonScraper samples the daemons' enforcer pending and broadcast queue
// depths, keeping every sample and the maxima per daemon, under mu.
type daemonScraper struct {
	mu         sync.Mutex
	maxPending map[string]float64
	maxQueue   map[string]float64
	series     []map[string]daemonSample
}

// run scrapes the daemons every second until ctx ends.
func (s *daemonScraper) run(ctx context.Context, daemons []*harness.Daemon) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sample := map[string]daemonSample{}
		for _, d := range daemons {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			fam, err := d.Metrics(cctx)
			cancel()
			if err != nil {
				continue
			}
			p, _ := harness.MetricValue(fam, "coastguard_enforcer_pending", nil)
			q, _ := harness.MetricValue(fam, "coastguard_gossip_broadcast_queue", nil)
			sample[d.NodeName] = daemonSample{pending: p, queue: q}
		}
		s.mu.Lock()
		for n, smp := range sample {
			s.maxPending[n] = max(s.maxPending[n], smp.pending)
			s.maxQueue[n] = max(s.maxQueue[n], smp.queue)
		}
		s.series = append(s.series, sample)
		s.mu.Unlock()
	}
}

// end returns the last sample's enforcer pending per daemon and the number
// of samples.
func (s *daemonScraper) end() (map[string]float64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	endPending := map[string]float64{}
	if len(s.series) > 0 {
		for n, smp := range s.series[len(s.series)-1] {
			endPending[n] = smp.pending
		}
	}
	return endPending, len(s.series)
}
