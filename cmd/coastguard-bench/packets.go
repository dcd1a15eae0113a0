package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// The packets section measures on the harness's real dataplane (network
// namespaces, kube-router enforcing on every node): cluster B protects its
// db pod with an MCNP admitting app=web pods of cluster A, and pods of A
// connect to it for real.
const packetsMCNP = `apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: db-from-web, namespace: bench}
spec:
  podSelector: {matchLabels: {role: db}}
  policyTypes: [Ingress]
  ingress:
  - from:
    - clusterSelector: {}
      podSelector: {matchLabels: {app: web}}
    ports: [{protocol: TCP, port: 5432}]
`

const dbIP = "10.2.0.10"

// ipTimes records when each IP first appeared in and disappeared from the
// generated NetworkPolicies of a cluster.
type ipTimes struct {
	mu      sync.Mutex
	present map[string]bool
	added   map[string]time.Time
	removed map[string]time.Time
}

func (w *ipTimes) observe(nps []*networkingv1.NetworkPolicy) {
	now := time.Now()
	cur := map[string]bool{}
	for _, np := range nps {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.From {
				if p.IPBlock != nil {
					cur[p.IPBlock.CIDR] = true
				}
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ip := range cur {
		if !w.present[ip] {
			w.added[ip] = now
		}
	}
	for ip := range w.present {
		if !cur[ip] {
			w.removed[ip] = now
		}
	}
	w.present = cur
}

func (w *ipTimes) reset(ip string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.added, ip+"/32")
	delete(w.removed, ip+"/32")
}

func (w *ipTimes) times(ip string) (added, removed time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.added[ip+"/32"], w.removed[ip+"/32"]
}

// watchIPs follows cluster c's generated NetworkPolicies in the bench
// namespace with an informer.
func watchIPs(ctx context.Context, c *harness.Cluster) (*ipTimes, error) {
	cl, err := fastClient(c)
	if err != nil {
		return nil, err
	}
	w := &ipTimes{present: map[string]bool{}, added: map[string]time.Time{}, removed: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(cl, 0, informers.WithNamespace(benchNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = harness.ManagedSelector }))
	inf := f.Networking().V1().NetworkPolicies().Informer()
	lister := f.Networking().V1().NetworkPolicies().Lister()
	resync := func(any) {
		nps, err := lister.List(labels.Everything())
		if err == nil {
			w.observe(nps)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: resync, UpdateFunc: func(_, o any) { resync(o) }, DeleteFunc: resync,
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, errors.New("packets: NetworkPolicy informer did not sync")
	}
	return w, nil
}

type packetsEnv struct {
	env   *harness.Env
	dp    *harness.Dataplane
	a, b  *harness.Cluster
	watch *ipTimes
	// dialTimeout bounds each attempt: a SYN the engine drops (rather than
	// rejects) while it reprograms would otherwise wait for the kernel's
	// 1 s retransmission and hide the moment the rule changed.
	dialTimeout time.Duration
}

func startPackets(ctx context.Context) (*packetsEnv, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	env, err := harness.New(ctx, harness.Options{Clusters: 2, Dataplane: true, Logf: func(f string, a ...any) { slog.Debug(fmt.Sprintf(f, a...)) }})
	if err != nil {
		return nil, err
	}
	p := &packetsEnv{env: env, dp: env.Dataplane(), a: env.Clusters[0], b: env.Clusters[1], dialTimeout: 100 * time.Millisecond}
	if err := p.setup(ctx, root); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *packetsEnv) setup(ctx context.Context, root string) error {
	if err := p.env.InstallCRDs(ctx, filepath.Join(root, "deploy", "crds")); err != nil {
		return err
	}
	bin, err := harness.Build("./cmd/coastguardd")
	if err != nil {
		return err
	}
	for _, c := range p.env.Clusters {
		if err := c.EnsureNamespace(ctx, benchNS, nil); err != nil {
			return err
		}
		d, err := p.env.StartDaemon(c, harness.DaemonOptions{Binary: bin})
		if err != nil {
			return err
		}
		if err := d.WaitReady(ctx, 90*time.Second); err != nil {
			return err
		}
	}
	port := corev1.ContainerPort{Name: "pg", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}
	if _, err := p.b.RunPod(ctx, benchNS, "db-0", dbIP, map[string]string{"role": "db"}, port); err != nil {
		return err
	}
	if out, errOut, err := p.b.KubectlInput(ctx, []byte(packetsMCNP), "apply", "-f", "-"); err != nil {
		return fmt.Errorf("apply MCNP: %v: %s %s", err, out, errOut)
	}
	if p.watch, err = watchIPs(ctx, p.b); err != nil {
		return err
	}
	return nil
}

func (p *packetsEnv) close() {
	if err := p.env.Close(); err != nil {
		slog.Warn("packets: closing the clusters", "err", err)
	}
}

// dialDB connects from pod name of cluster A to B's db.
func (p *packetsEnv) dialDB(ctx context.Context, name string) error {
	_, err := p.dp.DialWithin(ctx, p.a, benchNS, name, dbIP, 5432, corev1.ProtocolTCP, p.dialTimeout)
	return err
}

// until probes every 2 ms until ok(err) holds and returns when it first did.
func (p *packetsEnv) until(ctx context.Context, name string, ok func(error) bool) (time.Time, error) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		if ok(p.dialDB(ctx, name)) {
			return time.Now(), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("packets: %s: no change of verdict within 20s", name)
}

type splitLatency struct{ coastguard, engine, total []time.Duration }

func (s *splitLatency) add(t0, tNP, tPkt time.Time) {
	if tNP.IsZero() || tNP.Before(t0) {
		tNP = t0
	}
	if tPkt.Before(tNP) {
		tNP = tPkt // the engine's verdict changed before the informer saw the policy
	}
	s.coastguard = append(s.coastguard, tNP.Sub(t0))
	s.engine = append(s.engine, tPkt.Sub(tNP))
	s.total = append(s.total, tPkt.Sub(t0))
}

func runPackets(ctx context.Context, cfg *config, rec *recorder) error {
	if err := harness.CheckDataplaneSupport(); err != nil {
		slog.Warn("packets: section skipped: this machine cannot run the packet dataplane", "reason", err)
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := startPackets(ctx)
	if err != nil {
		return err
	}
	defer p.close()
	n := 100
	if cfg.quick {
		n = 10
	}
	if err := packetsLatency(ctx, rec, p, n); err != nil {
		return err
	}
	if err := packetsReuse(ctx, rec, p, max(n/5, 5)); err != nil {
		return err
	}
	churn := 60 * time.Second
	if cfg.quick {
		churn = 10 * time.Second
	}
	return packetsChurn(ctx, cfg, rec, p, churn)
}

// packetsLatency: n web pods, one after another, each measured from Running
// to its first allowed connection and, after its label is removed, to its
// first refused one.
func packetsLatency(ctx context.Context, rec *recorder, p *packetsEnv, n int) error {
	var allow, deny splitLatency
	for i := range n {
		if err := packetsAllowDeny(ctx, p, i, &allow, &deny); err != nil {
			return err
		}
	}
	params := map[string]any{"changes": n, "engine": "kube-router v2.1.0 netpol (event-driven sync; periodic full sync 5m)", "clusters": 2, "nodes_per_cluster": harness.NodesPerCluster}
	for _, m := range []struct {
		name   string
		d      []time.Duration
		target string
		limit  float64
	}{
		{"packets allow coastguard part p50", allow.coastguard, "", 0},
		{"packets allow coastguard part p99", allow.coastguard, "<= 50 ms", 50},
		{"packets allow engine part p50", allow.engine, "", 0},
		{"packets allow engine part p99", allow.engine, "", 0},
		{"packets allow end-to-end p50", allow.total, "", 0},
		{"packets allow end-to-end p99", allow.total, "<= 1000 ms", 1000},
		{"packets deny (label removed) coastguard part p99", deny.coastguard, "<= 50 ms", 50},
		{"packets deny (label removed) engine part p99", deny.engine, "", 0},
		{"packets deny (label removed) end-to-end p50", deny.total, "", 0},
		{"packets deny (label removed) end-to-end p99", deny.total, "<= 1000 ms", 1000},
	} {
		q := 0.5
		if m.name[len(m.name)-3:] == "p99" {
			q = 0.99
		}
		var met func(float64) bool
		if m.limit > 0 {
			met = le(m.limit)
		}
		rec.add(m.name, percentileMS(sortDurations(m.d), q), "ms", params, m.target, met)
	}
	return nil
}

// packetsAllowDeny measures web pod i of packetsLatency: from Running to
// its first allowed connection (into allow), then from its label's removal
// to its first refused one (into deny); it deletes the pod after.
func packetsAllowDeny(ctx context.Context, p *packetsEnv, i int, allow, deny *splitLatency) error {
	name, ip := fmt.Sprintf("web-%d", i), fmt.Sprintf("10.1.%d.%d", 1+i/200, 10+i%200)
	p.watch.reset(ip)
	if _, err := p.a.CreatePod(ctx, benchNS, name, map[string]string{"app": "web"}); err != nil {
		return err
	}
	if _, err := p.a.SetPodStatus(ctx, benchNS, name, ip, corev1.PodRunning); err != nil {
		return err
	}
	t0 := p.dp.AttachedAt(p.a, benchNS, name)
	tPkt, err := p.until(ctx, name, func(err error) bool { return err == nil })
	if err != nil {
		return err
	}
	added, _ := p.watch.times(ip)
	allow.add(t0, added, tPkt)

	t1 := time.Now()
	if _, err := p.a.Client.CoreV1().Pods(benchNS).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"batch"}}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	tRef, err := p.until(ctx, name, func(err error) bool { return err != nil })
	if err != nil {
		return err
	}
	_, removed := p.watch.times(ip)
	deny.add(t1, removed, tRef)
	return p.a.DeletePod(ctx, benchNS, name)
}

// churnPod is one holder of an IP in cluster A during the churn.
type churnPod struct {
	name    string
	web     bool
	prevWeb bool // the IP's previous holder was a web pod
}

// churnSlots is how many IPs of A the churn creates, deletes and re-uses.
const churnSlots = 16

// churnState is the churn's pods and what the probes saw, under mu.
type churnState struct {
	mu          sync.Mutex
	holders     map[string]*churnPod // ip -> current holder
	lastWeb     map[string]bool
	leaks       int
	probes      int
	staleAllows int
	reuseWindow time.Duration
}

// packetsChurn creates, deletes and re-uses IPs of pods in A for d while
// every live pod of A connects to B's db continuously. A success from a
// non-web pod whose IP's previous holder was not a web pod either is a
// leak: neither the state before nor the state after the last change of
// that IP admits it. A success from a non-web pod right after a web pod
// held its IP is the IP-reuse window, reported as its longest duration.
func packetsChurn(ctx context.Context, cfg *config, rec *recorder, p *packetsEnv, d time.Duration) error {
	rng := rand.New(rand.NewPCG(cfg.seed, 28))
	st := &churnState{holders: map[string]*churnPod{}, lastWeb: map[string]bool{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.probe(ctx, p, w, stop)
		}()
	}
	changes, churnErr := st.churn(ctx, p, rng, d)
	close(stop)
	wg.Wait()
	if churnErr != nil {
		return churnErr
	}
	params := map[string]any{"duration_s": d.Seconds(), "changes": changes, "probes": st.probes, "ip_slots": churnSlots, "stale_allows": st.staleAllows}
	rec.add("packets churn leaks", float64(st.leaks), "connections", params, "= 0", func(v float64) bool { return v == 0 })
	rec.add("packets churn longest stale allow after IP reuse", ms(st.reuseWindow), "ms", params, "", nil)
	return nil
}

// probe is prober w of 4: until stop closes, it connects from the holder of
// every fourth IP slot to B's db and counts leaks and stale allows.
func (st *churnState) probe(ctx context.Context, p *packetsEnv, w int, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		st.mu.Lock()
		ip := fmt.Sprintf("10.1.200.%d", 10+(w+4*i)%churnSlots)
		h := st.holders[ip]
		st.mu.Unlock()
		if h == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		started := p.dp.AttachedAt(p.a, benchNS, h.name)
		err := p.dialDB(ctx, h.name)
		st.mu.Lock()
		st.probes++
		if err == nil && !h.web {
			if h.prevWeb {
				st.staleAllows++
				st.reuseWindow = max(st.reuseWindow, time.Since(started))
			} else {
				st.leaks++
			}
		}
		st.mu.Unlock()
	}
}

// churn, for d, deletes the holder of a random IP slot or gives the free
// slot to a new pod (web or not, at random), 50-200ms apart; it returns how
// many changes it made.
func (st *churnState) churn(ctx context.Context, p *packetsEnv, rng *rand.Rand, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	changes := 0
	for seq := 0; time.Now().Before(deadline); seq++ {
		ip := fmt.Sprintf("10.1.200.%d", 10+rng.IntN(churnSlots))
		st.mu.Lock()
		h := st.holders[ip]
		if h != nil {
			delete(st.holders, ip)
		}
		st.mu.Unlock()
		if h != nil {
			if err := p.a.DeletePod(ctx, benchNS, h.name); err != nil {
				return changes + 1, err
			}
		} else {
			h = &churnPod{name: fmt.Sprintf("churn-%d", seq), web: rng.IntN(2) == 0, prevWeb: st.lastWeb[ip]}
			labels := map[string]string{"app": "batch"}
			if h.web {
				labels["app"] = "web"
			}
			if _, err := p.a.RunPod(ctx, benchNS, h.name, ip, labels); err != nil {
				return changes, err
			}
			st.mu.Lock()
			st.holders[ip], st.lastWeb[ip] = h, h.web
			st.mu.Unlock()
		}
		changes++
		time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
	}
	return changes, nil
}

// packetsReuse: a web pod is deleted and its IP given at once to a pod the
// policy must not admit; the window is how long B still admits the IP,
// from the new pod's Running to its first refused connection.
func packetsReuse(ctx context.Context, rec *recorder, p *packetsEnv, n int) error {
	var windows []time.Duration
	for i := range n {
		web, intruder, ip := fmt.Sprintf("reuse-web-%d", i), fmt.Sprintf("reuse-x-%d", i), fmt.Sprintf("10.1.250.%d", 10+i%200)
		if _, err := p.a.RunPod(ctx, benchNS, web, ip, map[string]string{"app": "web"}); err != nil {
			return err
		}
		if _, err := p.until(ctx, web, func(err error) bool { return err == nil }); err != nil {
			return err
		}
		if err := p.a.DeletePod(ctx, benchNS, web); err != nil {
			return err
		}
		if _, err := p.a.RunPod(ctx, benchNS, intruder, ip, map[string]string{"app": "intruder"}); err != nil {
			return err
		}
		t0 := p.dp.AttachedAt(p.a, benchNS, intruder)
		tRef, err := p.until(ctx, intruder, func(err error) bool { return err != nil })
		if err != nil {
			return err
		}
		windows = append(windows, max(tRef.Sub(t0), 0))
		if err := p.a.DeletePod(ctx, benchNS, intruder); err != nil {
			return err
		}
	}
	params := map[string]any{"reuses": n, "how": "web pod deleted, its IP given at once to a pod the policy does not admit"}
	sorted := sortDurations(windows)
	rec.add("packets IP-reuse window p50", percentileMS(sorted, 0.5), "ms", params, "", nil)
	rec.add("packets IP-reuse window p99", percentileMS(sorted, 0.99), "ms", params, "", nil)
	return nil
}
