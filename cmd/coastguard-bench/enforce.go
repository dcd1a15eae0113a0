package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
)

// enforceScale is one inventory shape.
type enforceScale struct {
	name     string
	clusters int
	pods     int // per cluster
	ns       int // namespaces per cluster
	policies int
	apps     int // selector diversity
}

// workload is a replicated inventory held as real crdt writer states (one
// per origin), so the daemon path sees genuine crdt.Changes.
type workload struct {
	sc      enforceScale
	writers []*crdt.State
	rng     *rand.Rand
	stamp   int64
}

func origin(c int) string { return fmt.Sprintf("c%03d", c) }

var peerTemplates = []string{
	"{podSelector: {matchLabels: {app: app%d}}}",
	"{clusterSelector: {matchLabels: {region: r1}}, podSelector: {matchLabels: {app: app%d}}}",
	"{clusterSelector: {}, podSelector: {matchLabels: {app: app%d, version: v1}}}",
	"{clusterSelector: {matchExpressions: [{key: region, operator: In, values: [r2]}]}, namespaceSelector: {matchLabels: {team: t1}}, podSelector: {matchLabels: {app: app%d}}}",
}

// newWorkload builds sc.clusters origins (4 regions), each with sc.ns
// namespaces and sc.pods pods over sc.apps apps, and sc.policies MCNPs
// originated round-robin, enforced everywhere, mixing local, region-wide,
// all-cluster, namespaceSelector and named-port peers (the same shape as
// enforce/bench_test.go). It returns every change in write order.
func newWorkload(sc enforceScale, seed uint64) (*workload, []crdt.Change, error) {
	w := &workload{sc: sc, rng: rand.New(rand.NewPCG(seed, 0xe4f)), stamp: 1}
	var all []crdt.Change
	write := func(s *crdt.State, kind crdt.Kind, name string, v any) error {
		b, err := crdt.EncodeValue(v)
		if err != nil {
			return err
		}
		w.stamp++
		_, ch, err := s.Write(kind, name, b, false, w.stamp)
		all = append(all, ch...)
		return err
	}
	for c := 0; c < sc.clusters; c++ {
		s := crdt.NewState(origin(c))
		if err := s.SetEpoch(1); err != nil {
			return nil, nil, err
		}
		w.writers = append(w.writers, s)
		if err := write(s, crdt.KindCluster, "", &crdt.ClusterValue{Labels: map[string]string{"region": fmt.Sprintf("r%d", c%4)}}); err != nil {
			return nil, nil, err
		}
		for n := 0; n < sc.ns; n++ {
			if err := write(s, crdt.KindNamespace, nsName(n), &crdt.NamespaceValue{Labels: map[string]string{"team": fmt.Sprintf("t%d", n%3)}}); err != nil {
				return nil, nil, err
			}
		}
		for i := 0; i < sc.pods; i++ {
			if err := write(s, crdt.KindPod, podName(sc, i), w.podValue(c, i, i%2, fmt.Sprintf("10.%d.%d.%d", c, i/250, i%250+1))); err != nil {
				return nil, nil, err
			}
		}
	}
	peerApp := func(i, k int) int { return (i%sc.ns + sc.ns*(i/sc.ns+k)) % sc.apps }
	for i := 0; i < sc.policies; i++ {
		s := fmt.Sprintf("clusterSelector: {}\npodSelector: {matchLabels: {app: app%d}}\n", peerApp(i, 0))
		s += "ingress:\n- from: [" + fmt.Sprintf(peerTemplates[(i/sc.ns)%len(peerTemplates)], peerApp(i, 1)) + "]\n  ports: [{port: http}]\n"
		s += "egress:\n- to: [" + fmt.Sprintf(peerTemplates[(i/sc.ns+1)%len(peerTemplates)], peerApp(i, 2)) + "]\n  ports: [{port: http}, {port: 53, protocol: UDP}]\n"
		var spec apiv1.MultiClusterNetworkPolicySpec
		if err := yaml.UnmarshalStrict([]byte(s), &spec); err != nil {
			return nil, nil, fmt.Errorf("policy %d: %w", i, err)
		}
		js, err := json.Marshal(spec)
		if err != nil {
			return nil, nil, err
		}
		name := fmt.Sprintf("%s/policy-%04d", nsName(i%sc.ns), i)
		if err := write(w.writers[i%sc.clusters], crdt.KindPolicy, name, &crdt.PolicyValue{UID: fmt.Sprintf("uid-%d", i), Generation: 1, Spec: js}); err != nil {
			return nil, nil, err
		}
	}
	return w, all, nil
}

func nsName(n int) string { return fmt.Sprintf("ns%02d", n) }

func podName(sc enforceScale, i int) string {
	return fmt.Sprintf("%s/pod%05d", nsName(i%sc.ns), i)
}

func (w *workload) podValue(c, i, version int, ip string) *crdt.PodValue {
	return &crdt.PodValue{
		Labels: map[string]string{"app": fmt.Sprintf("app%d", i%w.sc.apps), "version": fmt.Sprintf("v%d", version)},
		IPs:    []string{ip},
		Phase:  "Running",
		Ports:  []crdt.NamedPort{{Name: "http", Port: 8080 + int32(i%3)}, {Name: "metrics", Port: 9100}},
	}
}

// podChange re-labels (version flip) and re-IPs pod i of a remote cluster:
// the change the incremental path is built for.
func (w *workload) podChange(k int) ([]crdt.Change, error) {
	c := 1 + w.rng.IntN(w.sc.clusters-1)
	i := w.rng.IntN(w.sc.pods)
	ip := fmt.Sprintf("10.%d.%d.%d", c, 200+k%50, k%250+1)
	b, err := crdt.EncodeValue(w.podValue(c, i, (i+k+1)%2, ip))
	if err != nil {
		return nil, err
	}
	w.stamp++
	_, ch, err := w.writers[c].Write(crdt.KindPod, podName(w.sc, i), b, false, w.stamp)
	return ch, err
}

func timeIt(fn func()) time.Duration {
	t0 := time.Now()
	fn()
	return time.Since(t0)
}

func runEnforce(ctx context.Context, cfg *config, rec *recorder) error {
	small := enforceScale{name: "300mcnp_x_750pods", clusters: 3, pods: 250, ns: 10, policies: 300, apps: 50}
	large := enforceScale{name: "100clusters_x_1000pods_x_1000mcnp", clusters: 100, pods: 1000, ns: 20, policies: 1000, apps: 200}
	if cfg.quick {
		large = enforceScale{name: "20clusters_x_1000pods_x_200mcnp(quick)", clusters: 20, pods: 1000, ns: 20, policies: 200, apps: 200}
	}
	for _, sc := range []enforceScale{small, large} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := enforceOne(ctx, cfg, rec, sc, sc == small); err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		runtime.GC()
	}
	return nil
}

// enforceOne measures one inventory shape: full regeneration and one
// remote pod's change, raw enforce and the daemon's path (model.Mirror and
// model.Outputs). small selects the small shape's sizes and targets.
func enforceOne(ctx context.Context, cfg *config, rec *recorder, sc enforceScale, small bool) error {
	w, changes, err := newWorkload(sc, cfg.seed)
	if err != nil {
		return err
	}
	self := origin(0)
	// changes is dead after this call: the collector may free it.
	mirror, loadDur, err := enforceMirror(sc, self, changes)
	if err != nil {
		return err
	}
	inv := mirror.Inventory()
	res := enforceResult{sc: sc, self: self, small: small, loadDur: loadDur}

	// Full regeneration: raw enforce.Translate and the daemon's
	// Outputs.Recompute(all) on fresh outputs. Warm-up once, median of runs.
	res.runs = 5
	if !small {
		res.runs = 3
	}
	if cfg.quick {
		res.runs = 3
	}
	outs := res.full(inv)
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// Incremental: one remote pod changes label and IP.
	// raw: inventory update + Affected + EvaluateAll;
	// daemon: crdt change -> Mirror.Apply (decode, inventory, Affected) ->
	// Outputs.Recompute(affected).
	n := 200
	if !small {
		n = 50
	}
	if cfg.quick {
		n = 30
	}
	for k := 0; k < n; k++ {
		chs, err := w.podChange(k)
		if err != nil {
			return err
		}
		if err := res.incremental(chs, mirror, outs, inv); err != nil {
			return err
		}
	}
	res.record(rec)
	return nil
}

// enforceMirror builds the enforcing cluster's mirror (pod-IP ownership:
// cluster c's pods are in 10.c.0.0/16) and applies the workload's changes
// to it; it returns the mirror and how long the apply took.
func enforceMirror(sc enforceScale, self string, changes []crdt.Change) (*model.Mirror, time.Duration, error) {
	mirror := model.NewMirror(self)
	var cidrs []string
	for c := 0; c < sc.clusters; c++ {
		cidrs = append(cidrs, fmt.Sprintf("%s=10.%d.0.0/16", origin(c), c))
	}
	nets, err := enforce.ParseClusterCIDRs(cidrs)
	if err != nil {
		return nil, 0, err
	}
	mirror.SetNetworks(nets)
	return mirror, timeIt(func() { mirror.Apply(changes) }), nil
}

// enforceResult is one inventory shape's measurements.
type enforceResult struct {
	sc      enforceScale
	self    string
	small   bool
	loadDur time.Duration
	runs    int
	nps     int
	// full regenerations in ms: raw enforce.Translate, daemon Recompute(all)
	rawFull, dFull []float64
	// incremental changes: raw enforce, daemon path, affected MCNPs
	rawInc, dInc []time.Duration
	affected     []int
}

// full times res.runs full regenerations of inv, raw and through fresh
// daemon outputs (after one warm-up), and returns the last outputs.
func (res *enforceResult) full(inv *enforce.Inventory) *model.Outputs {
	_ = enforce.Translate(res.self, inv) // warm-up
	for i := 0; i < res.runs; i++ {
		res.rawFull = append(res.rawFull, ms(timeIt(func() { res.nps = len(enforce.Translate(res.self, inv)) })))
	}
	var outs *model.Outputs
	for i := 0; i < res.runs; i++ {
		o := model.NewOutputs(res.self)
		res.dFull = append(res.dFull, ms(timeIt(func() { o.Recompute(inv, nil, true) })))
		outs = o
	}
	return outs
}

// incremental times one pod change chs through the daemon's path (mirror
// and outputs), then raw enforce on the same inventory.
func (res *enforceResult) incremental(chs []crdt.Change, mirror *model.Mirror, outs *model.Outputs, inv *enforce.Inventory) error {
	ch := chs[0]
	var r model.Result
	d := timeIt(func() {
		r = mirror.Apply(chs)
		outs.Recompute(inv, r.Affected, r.All)
	})
	if len(r.Errors) > 0 {
		return fmt.Errorf("mirror: %v", r.Errors)
	}
	res.dInc = append(res.dInc, d)
	res.affected = append(res.affected, len(r.Affected))

	// raw enforce on the same inventory: re-apply the same pod's
	// previous labels is not needed; Affected is computed for the
	// change just made (labels before and after).
	var oldV, newV crdt.PodValue
	if ch.Old != nil {
		_ = crdt.DecodeValue(ch.Old.Value, &oldV)
	}
	_ = crdt.DecodeValue(ch.New.Value, &newV)
	ns, _, _ := cutNS(ch.Key.Name)
	res.rawInc = append(res.rawInc, timeIt(func() {
		refs := enforce.Affected(res.self, inv, enforce.Change{Kind: enforce.ChangePod, Cluster: ch.Key.Origin, Namespace: ns,
			Labels: []labels.Labels{labels.Set(oldV.Labels), labels.Set(newV.Labels)}})
		_ = enforce.EvaluateAll(res.self, inv, refs)
	}))
	return nil
}

// params are the shape's parameters with extra added.
func (res *enforceResult) params(extra map[string]any) map[string]any {
	sc := res.sc
	p := map[string]any{"clusters": sc.clusters, "pods": sc.clusters * sc.pods, "mcnps": sc.policies,
		"namespaces_per_cluster": sc.ns, "apps": sc.apps, "enforcing": res.self}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// record adds the shape's enforce metrics.
func (res *enforceResult) record(rec *recorder) {
	sc := res.sc
	rawIncS, dIncS := sortDurations(res.rawInc), sortDurations(res.dInc)
	avgAff := 0.0
	for _, a := range res.affected {
		avgAff += float64(a)
	}
	avgAff /= float64(len(res.affected))

	fullT, incT := "<= 100", "<= 20"
	fullOK, incOK := le(100), le(20)
	if !res.small {
		fullT, fullOK = "", nil
		incT, incOK = "<= 10", le(10)
	}
	common := map[string]any{"netpols": res.nps, "runs": res.runs, "mirror_load_ms": round(ms(res.loadDur))}
	rec.add("enforce_full_ms", median(res.rawFull), "ms", res.params(merge(common, map[string]any{"path": "enforce.Translate", "scale": sc.name})), fullT, fullOK)
	rec.add("enforce_full_daemon_ms", median(res.dFull), "ms", res.params(merge(common, map[string]any{"path": "model.Outputs.Recompute(all)", "scale": sc.name})), fullT, fullOK)
	incParams := map[string]any{"changes": len(res.dInc), "affected_avg": round(avgAff), "stat": "median"}
	rec.add("enforce_incremental_ms", percentileMS(rawIncS, 0.5), "ms", res.params(merge(incParams, map[string]any{"path": "enforce.Affected+EvaluateAll", "p99_ms": round(percentileMS(rawIncS, 0.99)), "scale": sc.name})), incT, incOK)
	rec.add("enforce_incremental_daemon_ms", percentileMS(dIncS, 0.5), "ms", res.params(merge(incParams, map[string]any{"path": "model.Mirror.Apply+Outputs.Recompute", "p99_ms": round(percentileMS(dIncS, 0.99)), "scale": sc.name})), incT, incOK)
	rec.add("enforce_full_over_incremental", median(res.dFull)/percentileMS(dIncS, 0.5), "ratio", res.params(map[string]any{"path": "daemon", "scale": sc.name}), "", nil)
}

func cutNS(name string) (string, string, bool) {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			return name[:i], name[i+1:], true
		}
	}
	return "", name, false
}

func merge(ms ...map[string]any) map[string]any {
	out := map[string]any{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
