//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// ---- run-wide bookkeeping for the summary line ----

var stats struct {
	mu        sync.Mutex
	clusters  int
	passed    int
	failed    []string
	latencies []time.Duration
}

// scenario counts t towards the summary: passed if it did not fail.
func scenario(t *testing.T, clusters int) {
	t.Helper()
	stats.mu.Lock()
	stats.clusters = max(stats.clusters, clusters)
	stats.mu.Unlock()
	t.Cleanup(func() {
		stats.mu.Lock()
		defer stats.mu.Unlock()
		if t.Failed() {
			stats.failed = append(stats.failed, t.Name())
		} else {
			stats.passed++
		}
	})
}

func recordLatencies(ds []time.Duration) {
	stats.mu.Lock()
	stats.latencies = append(stats.latencies, ds...)
	stats.mu.Unlock()
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(float64(len(s))*p/100+0.999999) - 1
	rank = min(max(rank, 0), len(s)-1)
	return s[rank]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// ---- mesh with options ----

type meshOpts struct {
	// Args are appended to every daemon's flags.
	Args []string
	// Deferred lists cluster indices whose daemon is not started.
	Deferred []int
}

// startMesh is mesh with options; it returns the coastguardd binary too. The
// daemons slice has nil for deferred clusters.
func startMesh(t *testing.T, n int, o meshOpts) (*harness.Env, string, []*harness.Daemon) {
	t.Helper()
	scenario(t, n)
	env := harness.Start(t, harness.Options{Clusters: n})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, env.InstallCRDs(ctx, crdDir(t)))
	bin, err := harness.Build("./cmd/coastguardd")
	require.NoError(t, err)
	if os.Getenv("COASTGUARD_E2E_DEBUG") == "1" {
		o.Args = append(slices.Clone(o.Args), "--log-level=debug")
	}
	ds := make([]*harness.Daemon, n)
	for i, c := range env.Clusters {
		if slices.Contains(o.Deferred, i) {
			continue
		}
		ds[i], err = env.StartDaemon(c, harness.DaemonOptions{Binary: bin, Args: o.Args})
		require.NoError(t, err)
	}
	for _, d := range ds {
		if d != nil {
			require.NoError(t, d.WaitReady(ctx, 60*time.Second), "daemon %s not ready", d.NodeName)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			env.DumpLogs(t.Logf, 150)
		}
	})
	return env, bin, ds
}

// webPolicy is an MCNP (in namespace shop) that protects role=db pods where
// clusterSelector matches and admits app=web pods of every cluster.
func webPolicy(name, clusterSelector string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata:
  name: %s
  namespace: shop
spec:
  clusterSelector: %s
  podSelector:
    matchLabels: {role: db}
  ingress:
  - from:
    - clusterSelector: {}
      podSelector:
        matchLabels: {app: web}
    ports:
    - {protocol: TCP, port: 5432}
`, name, clusterSelector))
}

func applyYAML(t *testing.T, ctx context.Context, c *harness.Cluster, y []byte) {
	t.Helper()
	out, errOut, err := c.KubectlInput(ctx, y, "apply", "-f", "-")
	require.NoError(t, err, "%s %s", out, errOut)
}

var web = map[string]string{"app": "web"}

func runPod(t *testing.T, ctx context.Context, c *harness.Cluster, name, ip string, labels map[string]string) {
	t.Helper()
	_, err := c.RunPod(ctx, "shop", name, ip, labels)
	require.NoError(t, err, "pod %s in %s", name, c.Name)
}

func originSel(origin string) string {
	return harness.ManagedSelector + ",coastguard.submariner.io/origin-cluster=" + origin
}

// blocksOf returns the sorted ipBlock CIDRs of nps.
func blocksOf(nps ...networkingv1.NetworkPolicy) []string {
	out := []string{}
	for _, np := range nps {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.From {
				if p.IPBlock != nil {
					out = append(out, p.IPBlock.CIDR)
				}
			}
		}
		for _, r := range np.Spec.Egress {
			for _, p := range r.To {
				if p.IPBlock != nil {
					out = append(out, p.IPBlock.CIDR)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// cidrs turns IPs into /32 CIDRs, sorted.
func cidrs(ips ...string) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip+"/32")
	}
	slices.Sort(out)
	return out
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func containsNone(have []string, unwanted ...string) bool {
	for _, w := range unwanted {
		if slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// waitNPs polls the NetworkPolicies in shop matching sel on c until cond
// holds.
func waitNPs(t *testing.T, ctx context.Context, c *harness.Cluster, sel string, timeout time.Duration, cond func([]string, []networkingv1.NetworkPolicy) bool, what string) {
	t.Helper()
	var last []string
	var n int
	err := harness.Eventually(ctx, timeout, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		nps, err := c.ListNetworkPolicies(ctx, "shop", sel)
		if err != nil {
			return false, err
		}
		last, n = blocksOf(nps...), len(nps)
		return cond(last, nps), nil
	})
	require.NoError(t, err, "%s in %s: last %d policies with ipBlocks %v", what, c.Name, n, last)
}

// ---- /debug/state ----

type daemonState struct {
	Cluster  string `json:"cluster"`
	Node     string `json:"node"`
	Leader   bool   `json:"leader"`
	Epoch    uint32 `json:"epoch"`
	Clusters map[string]struct {
		Alive        bool
		AliveMembers int
		LastAlive    time.Time
	} `json:"clusters"`
	Origins  map[string]string `json:"origins"`
	Policies int               `json:"policies"`
	Services []string          `json:"services"`
	MCNPs    []string          `json:"mcnps"`
	Unproven map[string]int    `json:"unproven"`
}

func debugState(ctx context.Context, d *harness.Daemon) (daemonState, error) {
	var s daemonState
	err := getJSON(ctx, "http://"+d.AdminAddr+"/debug/state", &s)
	if err != nil {
		err = fmt.Errorf("%s: %w", d.NodeName, err)
	}
	return s, err
}

// getJSON decodes the JSON answer of a GET (within 5 s) into v.
func getJSON(ctx context.Context, u string, v any) error {
	b, err := getBody(ctx, u)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// getBody returns the body of a GET answered 200 OK within 5 s.
func getBody(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, b)
	}
	return b, nil
}

// version parses "<epoch>.<seq>" from /debug/state origins.
type version struct{ epoch, seq uint64 }

func parseVersion(s string) (version, error) {
	e, q, ok := strings.Cut(s, ".")
	if !ok {
		return version{}, fmt.Errorf("version %q: want <epoch>.<seq>", s)
	}
	ev, err := strconv.ParseUint(e, 10, 32)
	if err != nil {
		return version{}, fmt.Errorf("version %q: %w", s, err)
	}
	sv, err := strconv.ParseUint(q, 10, 64)
	if err != nil {
		return version{}, fmt.Errorf("version %q: %w", s, err)
	}
	return version{ev, sv}, nil
}

func (v version) less(o version) bool {
	return v.epoch < o.epoch || (v.epoch == o.epoch && v.seq < o.seq)
}

// ---- NetworkPolicy watch ----

type npEvent struct {
	at     time.Time
	typ    string // ADD, UPDATE, DELETE
	name   string
	blocks []string
	prev   []string
}

// npWatch records every change of the generated NetworkPolicies in one
// namespace of one cluster, through an informer (list+watch).
type npWatch struct {
	c      *harness.Cluster
	mu     sync.Mutex
	events []npEvent
	cur    map[string][]string
	notify chan struct{}
}

func watchNPs(t *testing.T, c *harness.Cluster, ns string) *npWatch {
	t.Helper()
	w := &npWatch{c: c, cur: map[string][]string{}, notify: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = harness.ManagedSelector }))
	inf := f.Networking().V1().NetworkPolicies().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
				w.record("ADD", np.Name, blocksOf(*np))
			}
		},
		UpdateFunc: func(_, obj any) {
			if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
				w.record("UPDATE", np.Name, blocksOf(*np))
			}
		},
		DeleteFunc: func(obj any) {
			name := ""
			switch o := obj.(type) {
			case *networkingv1.NetworkPolicy:
				name = o.Name
			case cache.DeletedFinalStateUnknown:
				if np, ok := o.Obj.(*networkingv1.NetworkPolicy); ok {
					name = np.Name
				}
			}
			w.record("DELETE", name, nil)
		},
	})
	require.NoError(t, err)
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced), "NetworkPolicy informer of %s did not sync", c.Name)
	return w
}

func (w *npWatch) record(typ, name string, blocks []string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.cur[name]
	if typ == "DELETE" {
		delete(w.cur, name)
	} else {
		w.cur[name] = blocks
	}
	w.events = append(w.events, npEvent{at: now, typ: typ, name: name, blocks: blocks, prev: prev})
	close(w.notify)
	w.notify = make(chan struct{})
}

func (w *npWatch) allLocked() []string {
	var out []string
	for _, b := range w.cur {
		out = append(out, b...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// waitFor waits until cond holds on the union of ipBlocks and returns when
// the informer received the event that made it hold.
func (w *npWatch) waitFor(ctx context.Context, timeout time.Duration, cond func([]string) bool) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		b := w.allLocked()
		var at time.Time
		if len(w.events) > 0 {
			at = w.events[len(w.events)-1].at
		}
		ch := w.notify
		w.mu.Unlock()
		if cond(b) {
			return at, nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("%s: condition not met within %s; ipBlocks now %v", w.c.Name, timeout, b)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

func (w *npWatch) eventsSince(i int) []npEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events[min(i, len(w.events)):])
}

func (w *npWatch) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

// flaps lists deletions and ipBlock removals among events, ignoring removals
// of CIDRs in allowedGone.
func flaps(evs []npEvent, allowedGone ...string) []string {
	var out []string
	for _, e := range evs {
		switch e.typ {
		case "DELETE":
			out = append(out, fmt.Sprintf("%s DELETE %s", e.at.Format("15:04:05.000"), e.name))
		case "UPDATE":
			var lost []string
			for _, p := range e.prev {
				if !slices.Contains(e.blocks, p) && !slices.Contains(allowedGone, p) {
					lost = append(lost, p)
				}
			}
			if len(lost) > 0 {
				out = append(out, fmt.Sprintf("%s UPDATE %s lost %v", e.at.Format("15:04:05.000"), e.name, lost))
			}
		}
	}
	sort.Strings(out)
	return out
}

// startGrowthChurn creates pods in cluster a's namespace shop, one every
// 100 ms with IPs 10.1.10.1, 10.1.10.2, ..., until the returned stop is
// called. Only new pods: every ipBlock change it causes elsewhere is a
// growth. stop waits for the loop and returns the IPs created and the
// first error other than the stop itself.
func startGrowthChurn(ctx context.Context, a *harness.Cluster, labels map[string]string) (stop func() ([]string, error)) {
	churnCtx, cancel := context.WithCancel(ctx)
	var churned []string
	var churnErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; churnCtx.Err() == nil; i++ {
			ip := fmt.Sprintf("10.1.%d.%d", 10+i/200, 1+i%200)
			if _, err := a.RunPod(churnCtx, "shop", fmt.Sprintf("churn-%d", i), ip, labels); err != nil {
				if churnCtx.Err() == nil {
					churnErr = err
				}
				return
			}
			churned = append(churned, ip)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return func() ([]string, error) {
		cancel()
		<-done
		return churned, churnErr
	}
}
