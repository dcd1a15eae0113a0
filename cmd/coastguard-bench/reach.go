package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/coastguard-mcnp/coastguard/reach"
)

// runReach measures the reachability/conflict engine behind
// `kubectl coastguard conflicts` at seed 003's Table 4.1 setup 5 (750 pods,
// 300 policies), and at 3 clusters x 750 pods. Seed 003 measured ~466 ms
// full, ~182 ms incremental pod add, <= 474 ms conflict detection; the goal
// is 10x faster.
func runReach(ctx context.Context, cfg *config, rec *recorder) error {
	for _, clusters := range []int{1, 3} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sc := reach.Table41Setup5(clusters)
		sc.Seed = cfg.seed
		pods, pols := reach.Synthesize(sc)
		params := map[string]any{"clusters": clusters, "pods_per_cluster": sc.Pods, "policies_per_cluster": sc.Policies}
		median := func(n int, f func()) time.Duration {
			var ds []time.Duration
			for i := 0; i < n; i++ {
				t := time.Now()
				f()
				ds = append(ds, time.Since(t))
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return ds[len(ds)/2]
		}
		var e *reach.Engine
		var loadErr error
		full := median(5, func() { e = reach.New(); loadErr = e.Load(pods, pols) })
		if loadErr != nil {
			return loadErr
		}
		before := heapAlloc()
		inc := time.Duration(0)
		const adds = 200
		for i := 0; i < adds; i++ {
			p := reach.SynthPod(sc, i%clusters, i, cfg.seed)
			t := time.Now()
			e.SetPod(p)
			inc += time.Since(t)
			e.RemovePod(p.Cluster, p.Namespace, p.Name)
		}
		conf := median(3, func() { _ = e.Conflicts() })
		tag := fmt.Sprintf("%dx%d", clusters, sc.Pods)
		rec.add("reach_full_ms_"+tag, float64(full.Microseconds())/1000, "ms", params, "<= 46.6 (466/10)", le(46.6))
		rec.add("reach_incremental_pod_add_ms_"+tag, float64(inc.Microseconds())/1000/adds, "ms", params, "<= 18.2 (182/10)", le(18.2))
		rec.add("reach_conflicts_ms_"+tag, float64(conf.Microseconds())/1000, "ms", params, "<= 47.4 (474/10)", le(47.4))
		rec.add("reach_matrix_mib_"+tag, float64(e.Bytes())/(1<<20), "MiB", params, "", nil)
		rec.add("reach_heap_mib_"+tag, float64(before)/(1<<20), "MiB", params, "", nil)
	}
	return nil
}
