//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

// Issue 13: enforcement that cannot be left open, frozen or wiped.

// allNPs follows every NetworkPolicy of one namespace (labelled or not).
type allNPs struct {
	mu     sync.Mutex
	cur    map[string]*networkingv1.NetworkPolicy
	events []npEvent
	notify chan struct{}
}

func watchAllNPs(t *testing.T, c *harness.Cluster, ns string) *allNPs {
	t.Helper()
	w := &allNPs{cur: map[string]*networkingv1.NetworkPolicy{}, notify: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns))
	inf := f.Networking().V1().NetworkPolicies().Informer()
	rec := func(typ string, obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		np, ok := obj.(*networkingv1.NetworkPolicy)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		prev := w.cur[np.Name]
		var prevBlocks []string
		if prev != nil {
			prevBlocks = blocksOf(*prev)
		}
		if typ == "DELETE" {
			delete(w.cur, np.Name)
		} else {
			w.cur[np.Name] = np
		}
		w.events = append(w.events, npEvent{at: time.Now(), typ: typ, name: np.Name, blocks: blocksOf(*np), prev: prevBlocks})
		close(w.notify)
		w.notify = make(chan struct{})
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { rec("ADD", o) },
		UpdateFunc: func(_, o any) { rec("UPDATE", o) },
		DeleteFunc: func(o any) { rec("DELETE", o) },
	})
	require.NoError(t, err)
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	return w
}

// waitFor waits until cond holds for the named policy (nil when absent) and
// returns the arrival time of the event that made it hold.
func (w *allNPs) waitFor(timeout time.Duration, name string, cond func(*networkingv1.NetworkPolicy) bool) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		np := w.cur[name]
		var at time.Time
		if len(w.events) > 0 {
			at = w.events[len(w.events)-1].at
		}
		ch := w.notify
		w.mu.Unlock()
		if cond(np) {
			return at, nil
		}
		select {
		case <-ch:
		case <-deadline:
			return time.Time{}, fmt.Errorf("policy %s: condition not met within %s (now %v)", name, timeout, np != nil)
		}
	}
}

func (w *allNPs) since(i int) []npEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]npEvent(nil), w.events[min(i, len(w.events)):]...)
}

func (w *allNPs) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

// onlyGenerated returns the one generated policy of origin in shop.
func onlyGenerated(t *testing.T, ctx context.Context, c *harness.Cluster, origin, mcnp string) networkingv1.NetworkPolicy {
	t.Helper()
	var out networkingv1.NetworkPolicy
	err := harness.Eventually(ctx, 60*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		nps, err := c.ListNetworkPolicies(ctx, "shop", originSel(origin)+",coastguard.submariner.io/origin-name="+mcnp)
		if err != nil || len(nps) != 1 {
			return false, err
		}
		out = nps[0]
		return true, nil
	})
	require.NoError(t, err, "generated policy of %s/%s in %s", origin, mcnp, c.Name)
	return out
}

func sameSpec(a, b *networkingv1.NetworkPolicy) bool {
	return a != nil && b != nil && apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
}

func metric(t *testing.T, ctx context.Context, d *harness.Daemon, name string) float64 {
	t.Helper()
	fams, err := d.Metrics(ctx)
	require.NoError(t, err)
	v, _ := harness.MetricValue(fams, name, nil)
	return v
}

// Hand edits (spec replaced by allow-all, hash annotation kept), a removed
// managed-by label and a deleted policy are repaired through the watch; a
// policy carrying the label that coastguard never wrote is left alone.
func TestEnforcementDriftRepair(t *testing.T) {
	env, _, ds := startMesh(t, 1, meshOpts{})
	a := env.Clusters[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	require.NoError(t, a.EnsureNamespace(ctx, "shop", nil))
	runPod(t, ctx, a, "web-1", "10.1.0.11", web)
	applyYAML(t, ctx, a, webPolicy("db-from-web", "{}"))
	good := onlyGenerated(t, ctx, a, a.Name, "db-from-web")
	w := watchAllNPs(t, a, "shop")
	nps := a.Client.NetworkingV1().NetworkPolicies("shop")

	t.Run("hand edits reverted (p50/p99 over 20 edits)", func(t *testing.T) {
		var repair []time.Duration
		for i := 0; i < 20; i++ {
			var start time.Time
			var edited *networkingv1.NetworkPolicy
			require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := nps.Get(ctx, good.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}} // allow all ingress
				start = time.Now()
				edited, err = nps.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
				return err
			}))
			editRV, err := strconv.ParseUint(edited.ResourceVersion, 10, 64)
			require.NoError(t, err)
			// the repair is the first version after the edit with the generated spec
			at, err := w.waitFor(30*time.Second, good.Name, func(np *networkingv1.NetworkPolicy) bool {
				if np == nil {
					return false
				}
				rv, err := strconv.ParseUint(np.ResourceVersion, 10, 64)
				return err == nil && rv > editRV && sameSpec(np, &good)
			})
			require.NoError(t, err, "edit %d not reverted", i)
			repair = append(repair, at.Sub(start))
		}
		t.Logf("drift repair after a hand edit (API update to restored spec seen by a watch), n=%d: p50 %s ms, p99 %s ms, max %s ms",
			len(repair), ms(percentile(repair, 50)), ms(percentile(repair, 99)), ms(percentile(repair, 100)))
		require.Less(t, percentile(repair, 50), 5*time.Second, "repair is event-driven, not a periodic resync")
		require.GreaterOrEqual(t, metric(t, ctx, ds[0], "coastguard_networkpolicy_drift_repairs_total"), 20.0)
	})

	t.Run("label removed and re-adopted", func(t *testing.T) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := nps.Get(ctx, good.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			delete(cur.Labels, "app.kubernetes.io/managed-by")
			_, err = nps.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "kubectl-label"})
			return err
		}))
		_, err := w.waitFor(30*time.Second, good.Name, func(np *networkingv1.NetworkPolicy) bool {
			return np != nil && np.Labels["app.kubernetes.io/managed-by"] == "coastguard" && sameSpec(np, &good)
		})
		require.NoError(t, err)
	})

	t.Run("deleted generated policy recreated", func(t *testing.T) {
		require.NoError(t, nps.Delete(ctx, good.Name, metav1.DeleteOptions{}))
		_, err := w.waitFor(30*time.Second, good.Name, func(np *networkingv1.NetworkPolicy) bool { return sameSpec(np, &good) })
		require.NoError(t, err)
	})

	t.Run("foreign policy carrying the label left alone", func(t *testing.T) {
		foreign := []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: looks-generated
  namespace: shop
  labels: {app.kubernetes.io/managed-by: coastguard, coastguard.submariner.io/origin-cluster: ` + a.Name + `}
  annotations: {coastguard.submariner.io/origin: ` + a.Name + `/shop/gone}
spec:
  podSelector: {matchLabels: {app: legacy}}
  policyTypes: [Ingress]
`)
		applyYAML(t, ctx, a, foreign)
		require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			return metric(t, ctx, ds[0], "coastguard_networkpolicy_foreign") == 1, nil
		}), "foreign metric")
		require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			out, _, err := a.Kubectl(ctx, "-n", "shop", "get", "events", "--field-selector", "involvedObject.name=looks-generated", "-o", "jsonpath={.items[*].reason}")
			return err == nil && strings.Contains(out, "ForeignNetworkPolicy"), nil
		}), "Warning Event on the foreign policy")
		for _, e := range w.since(0) {
			require.False(t, e.name == "looks-generated" && e.typ != "ADD", "foreign policy touched: %s", e.typ)
		}
		_, err := nps.Get(ctx, "looks-generated", metav1.GetOptions{})
		require.NoError(t, err, "never deleted")
	})
}

// An MCNP whose name looks like another MCNP's part suffix gets its own
// name; both are enforced.
func TestEnforcementCollidingNames(t *testing.T) {
	env, _, _ := startMesh(t, 1, meshOpts{})
	a := env.Clusters[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, a.EnsureNamespace(ctx, "shop", nil))
	applyYAML(t, ctx, a, webPolicy("big", "{}"))
	applyYAML(t, ctx, a, webPolicy("big.p2-3675f42a7e", "{}"))
	applyYAML(t, ctx, a, webPolicy("big-p2", "{}"))
	n1 := onlyGenerated(t, ctx, a, a.Name, "big")
	n2 := onlyGenerated(t, ctx, a, a.Name, "big.p2-3675f42a7e")
	n3 := onlyGenerated(t, ctx, a, a.Name, "big-p2")
	require.NotEqual(t, n1.Name, n2.Name)
	require.NotEqual(t, n1.Name, n3.Name)
	require.NotEqual(t, n2.Name, n3.Name)
	for _, mcnp := range []string{"big", "big.p2-3675f42a7e", "big-p2"} {
		waitCondition(t, ctx, a, mcnp, "Enforced", "True", "AllClustersEnforced")
	}

	// a hand-written policy squatting on a generated name fails only the
	// MCNP that needs that name; its status names the cluster and why
	squat := enforce.GeneratedName(a.Name, "squatted", 0)
	applyYAML(t, ctx, a, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: `+squat+`, namespace: shop}
spec: {podSelector: {matchLabels: {app: other}}}
`))
	applyYAML(t, ctx, a, webPolicy("squatted", "{}"))
	msg := waitCondition(t, ctx, a, "squatted", "Enforced", "False", "EnforcementFailed")
	require.Contains(t, msg, a.Name+": not applied")
	require.Contains(t, msg, "was not written by coastguard")
	applyYAML(t, ctx, a, webPolicy("after-squat", "{}"))
	waitCondition(t, ctx, a, "after-squat", "Enforced", "True", "AllClustersEnforced")
	waitCondition(t, ctx, a, "big", "Enforced", "True", "AllClustersEnforced")
	np, err := a.Client.NetworkingV1().NetworkPolicies("shop").Get(ctx, squat, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "other", np.Spec.PodSelector.MatchLabels["app"], "the hand-written policy is untouched")
}

// A deny-all MCNP created in one cluster's kube-system for every cluster is
// enforced only in its own cluster; the others report ProtectedNamespace.
func TestEnforcementProtectedNamespaces(t *testing.T) {
	env, _, _ := startMesh(t, 2, meshOpts{})
	a, b := env.Clusters[0], env.Clusters[1]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "kube-system", nil))
	}
	applyYAML(t, ctx, a, []byte(`apiVersion: networking.submariner.io/v1
kind: MultiClusterNetworkPolicy
metadata: {name: deny-all, namespace: kube-system}
spec:
  clusterSelector: {}
  podSelector: {}
  policyTypes: [Ingress, Egress]
`))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		nps, err := a.ListNetworkPolicies(ctx, "kube-system", harness.ManagedSelector)
		return err == nil && len(nps) == 1, err
	}), "own cluster enforces its own MCNP in kube-system")
	var msg string
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		out, _, _ := a.Kubectl(ctx, "-n", "kube-system", "get", "mcnp", "deny-all", "-o", `jsonpath={.status.conditions[?(@.type=="Degraded")].reason} {.status.conditions[?(@.type=="Degraded")].message}`)
		msg = out
		return strings.HasPrefix(out, "ProtectedNamespace ") && strings.Contains(out, b.Name+": ProtectedNamespace"), nil
	}), "status: %q", msg)
	nps, err := b.ListNetworkPolicies(ctx, "kube-system", harness.ManagedSelector)
	require.NoError(t, err)
	require.Empty(t, nps, "no deny-all in the other cluster's kube-system")
}

// A daemon restarted with an empty store (file moved aside) never deletes
// or shrinks a generated policy while it refills from its peers.
func TestEnforcementEmptyStoreRestart(t *testing.T) {
	env, _, ds := startMesh(t, 2, meshOpts{Args: []string{"--empty-view-timeout=2m"}})
	a, b := env.Clusters[0], env.Clusters[1]
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	runPod(t, ctx, a, "db-1", "10.1.0.5", map[string]string{"role": "db"})
	var want []string
	for i := 0; i < 5; i++ {
		ip := fmt.Sprintf("10.2.0.%d", 10+i)
		runPod(t, ctx, b, fmt.Sprint("web-", i), ip, web)
		want = append(want, ip)
	}
	applyYAML(t, ctx, b, webPolicy("db-from-web", "{}"))
	waitNPs(t, ctx, a, originSel(b.Name), 90*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return containsAll(bl, cidrs(want...)...)
	}, "remote policy enforced")

	w := watchAllNPs(t, a, "shop")
	start := w.mark()
	require.NoError(t, ds[0].Stop())
	state := filepath.Join(ds[0].DataDir, "state.db")
	require.NoError(t, os.Rename(state, state+".aside"))
	require.NoError(t, ds[0].Restart())
	require.NoError(t, ds[0].WaitReady(ctx, 90*time.Second))
	require.NoError(t, harness.Eventually(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		log, err := ds[0].TailLog(2000)
		if i := strings.LastIndex(log, "=== harness: starting"); i >= 0 {
			log = log[i:] // this run only
		}
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "empty-view gate closed") && strings.Contains(l, b.Name) {
				return true, nil
			}
		}
		return false, err
	}), "the restarted leader's gate waited for %s, whose policies are live here", b.Name)
	// the daemon is back with a complete view: gate open, state refilled
	require.NoError(t, harness.Eventually(ctx, 120*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		return metric(t, ctx, ds[0], "coastguard_empty_view_gate_closed") == 0, nil
	}), "gate opens once anti-entropy covered %s", b.Name)
	waitNPs(t, ctx, a, originSel(b.Name), 60*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return containsAll(bl, cidrs(want...)...)
	}, "still enforced")
	// a change after the restart still goes through
	runPod(t, ctx, b, "web-new", "10.2.0.99", web)
	waitNPs(t, ctx, a, originSel(b.Name), 60*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return containsAll(bl, cidrs("10.2.0.99")...)
	}, "new peer enforced")
	evs := w.since(start)
	var bad []string
	for _, e := range evs {
		switch {
		case e.typ == "DELETE":
			bad = append(bad, "DELETE "+e.name)
		case e.typ == "UPDATE" && !containsAll(e.blocks, e.prev...):
			bad = append(bad, fmt.Sprintf("UPDATE %s shrank %v -> %v", e.name, e.prev, e.blocks))
		}
	}
	t.Logf("%d NetworkPolicy events in %s during the empty-store restart", len(evs), a.Name)
	require.Empty(t, bad, "no generated policy deleted or shrunk")
}

// A failed commit (file size limit standing in for a full disk: CI has no
// CAP_SYS_ADMIN for a tmpfs) makes the leader not ready, counts the error,
// hands the Lease to the standby and loses no entry.
func TestEnforcementDiskFull(t *testing.T) {
	env, bin, _ := startMesh(t, 2, meshOpts{Deferred: []int{0}})
	a, b := env.Clusters[0], env.Clusters[1]
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Start a's first daemon with RLIMIT_FSIZE = 512 KiB (inherited from
	// this process across fork/exec; our own soft limit is restored at
	// once): bbolt grows state.db 256K -> 512K -> 1M, so the commit that
	// needs the file past 512 KiB fails with EFBIG.
	var old unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_FSIZE, &old))
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 512 << 10, Max: old.Max}))
	leader, err := env.StartDaemon(a, harness.DaemonOptions{Binary: bin})
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_FSIZE, &old))
	require.NoError(t, err)
	require.NoError(t, leader.WaitReady(ctx, 60*time.Second))
	standby, err := env.StartDaemon(a, harness.DaemonOptions{Binary: bin})
	require.NoError(t, err)
	require.NoError(t, standby.WaitReady(ctx, 60*time.Second))
	st, err := debugState(ctx, leader)
	require.NoError(t, err)
	require.True(t, st.Leader, "the first daemon leads %s", a.Name)
	for _, c := range env.Clusters {
		require.NoError(t, c.EnsureNamespace(ctx, "shop", nil))
	}
	applyYAML(t, ctx, b, webPolicy("db-from-web", "{}"))

	// watch /readyz and /healthz of the leader while its disk fills
	type probe struct{ ready, healthy error }
	probes := make(chan probe, 1)
	go func() {
		var seen probe
		for leader.Running() {
			pctx, pc := context.WithTimeout(ctx, time.Second)
			r, h := leader.Probe(pctx, "/readyz"), leader.Probe(pctx, "/healthz")
			pc()
			if r != nil && strings.Contains(r.Error(), "store commit failed") && seen.ready == nil {
				seen.ready = r
			}
			if h != nil && strings.Contains(h.Error(), "commit failed") && seen.healthy == nil {
				seen.healthy = h
			}
			time.Sleep(10 * time.Millisecond)
		}
		probes <- seen
	}()

	// write until the store fails: pods with large labels
	var ips []string
	big := strings.Repeat("x", 60)
	for i := 0; i < 2000 && leader.Running(); i++ {
		ip := fmt.Sprintf("10.1.%d.%d", i/200, 10+i%200)
		lbl := map[string]string{"app": "web"}
		for j := 0; j < 16; j++ {
			lbl[fmt.Sprintf("k%d", j)] = big
		}
		_, err := a.RunPod(ctx, "shop", fmt.Sprint("web-", i), ip, lbl)
		require.NoError(t, err)
		ips = append(ips, ip)
	}
	select {
	case <-leader.Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("the leader did not stop after its store failed")
	}
	t.Logf("leader exited after its store failed: %v (after %d pods)", leader.ExitErr(), len(ips))
	seen := <-probes
	require.Error(t, seen.ready, "/readyz failed with the store error before the process exited")
	require.Error(t, seen.healthy, "/healthz failed with the store error before the process exited")
	t.Logf("while stopping: %v; %v", seen.ready, seen.healthy)
	log, _ := leader.TailLog(400)
	require.Contains(t, log, "state store commit failed")
	require.NotContains(t, log, `"reason":"invalid"`)

	// the standby takes over and enforces every pod (no entry lost)
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		s, err := debugState(ctx, standby)
		return err == nil && s.Leader, nil
	}), "standby takes the Lease")
	waitNPs(t, ctx, b, originSel(b.Name), 120*time.Second, func(bl []string, _ []networkingv1.NetworkPolicy) bool {
		return containsAll(bl, cidrs(ips...)...)
	}, "every pod of "+a.Name+" enforced in "+b.Name)

	// space returns: the old leader restarts and recovers every entry
	require.NoError(t, leader.Restart())
	require.NoError(t, leader.WaitReady(ctx, 90*time.Second))
	require.NoError(t, harness.Eventually(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		s1, err1 := debugState(ctx, leader)
		s2, err2 := debugState(ctx, standby)
		if err1 != nil || err2 != nil {
			return false, nil
		}
		j1, _ := json.Marshal(s1.Origins)
		j2, _ := json.Marshal(s2.Origins)
		return string(j1) == string(j2), nil
	}), "restarted daemon's store caught up with the standby's")
	fams, err := standby.Metrics(ctx)
	require.NoError(t, err)
	if v, ok := harness.MetricValue(fams, "coastguard_gossip_dropped_total", map[string]string{"reason": "invalid"}); ok {
		require.Zero(t, v, "a local store failure is never a peer's fault")
	}
	_ = apierrors.IsNotFound
}
