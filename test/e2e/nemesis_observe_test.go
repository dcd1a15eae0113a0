//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// What the nemesis observes besides packets, so that the checker can say
// who lagged when a probe leaks: each cluster's generated NetworkPolicy for
// the MCNP (present in that cluster's apiserver or not, since when), and
// the faults touching each cluster (active, and when the last one ended).

// engineAllowance is how long the policy engine may take to act on a
// generated NetworkPolicy that is in its apiserver (kube-router re-syncs;
// its watch breaks while the apiserver restarts).
const engineAllowance = 5 * time.Second

// npState is one cluster's generated policy for the nemesis MCNP.
type npState struct {
	present bool
	since   time.Time
}

// watchGeneratedNPs records, per cluster, when the NetworkPolicy generated
// from the MCNP of origin appears in and leaves that cluster's apiserver.
func (n *nemesis) watchGeneratedNPs(ctx context.Context, origin string) {
	for _, c := range n.env.Clusters {
		f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace("shop"))
		inf := f.Networking().V1().NetworkPolicies().Informer()
		name := c.Name
		count := 0
		note := func(obj any, delta int) {
			np, ok := obj.(*networkingv1.NetworkPolicy)
			if !ok {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					np, _ = d.Obj.(*networkingv1.NetworkPolicy)
				}
			}
			if np == nil || np.Labels[enforce.LabelOriginCluster] != origin {
				return
			}
			n.mu.Lock()
			count += delta
			st := n.nps[name]
			if present := count > 0; present != st.present {
				n.nps[name] = npState{present: present, since: time.Now()}
				n.history = append(n.history, fmt.Sprintf("%9.3fs  generated NetworkPolicy of %s's MCNP %s in %s's apiserver",
					time.Since(n.start).Seconds(), origin, map[bool]string{true: "appeared", false: "gone"}[present], name))
			}
			n.mu.Unlock()
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { note(obj, 1) },
			DeleteFunc: func(obj any) { note(obj, -1) },
		})
		f.Start(ctx.Done())
	}
}

// leaseRecovery is how long after a fault that can cost a cluster its
// leader (a daemon killed or restarted, its apiserver restarted: Lease
// renewals fail) the cluster may still be without one: the daemons'
// default Lease duration, after which the standby or the restarted daemon
// takes over.
const leaseRecovery = 15 * time.Second

// disturbLease is disturb for a fault that can cost the cluster its leader:
// the fault counts as ending leaseRecovery after it is healed.
func (n *nemesis) disturbLease(clusters ...string) func() {
	end := n.disturb(clusters...)
	return func() {
		end()
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, c := range clusters {
			n.lastFault[c] = time.Now().Add(leaseRecovery)
		}
	}
}

// disturb marks the start of a fault touching clusters; the returned
// function marks its end.
func (n *nemesis) disturb(clusters ...string) func() {
	n.mu.Lock()
	for _, c := range clusters {
		n.active[c]++
	}
	n.mu.Unlock()
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, c := range clusters {
			n.active[c]--
			n.lastFault[c] = time.Now()
		}
	}
}

// leakCause explains a probe from a never-web pod that reached dst's db
// while the MCNP had been in force for longer than the bound, or returns
// "" when nothing does (a coastguard leak). n.mu held.
func (n *nemesis) leakCause(origin, dst string, at time.Time) string {
	if st := n.nps[dst]; st.present && at.Sub(st.since) > engineAllowance {
		return fmt.Sprintf("engine: the generated NetworkPolicy was in %s's apiserver for %s", dst, at.Sub(st.since).Round(time.Millisecond))
	}
	for _, c := range []string{origin, dst} {
		if n.active[c] > 0 {
			return fmt.Sprintf("fault: a fault touching %s was active", c)
		}
		if ago := at.Sub(n.lastFault[c]); ago < nemesisBound {
			return fmt.Sprintf("fault: a fault touching %s ended %s before", c, ago.Round(time.Millisecond))
		}
	}
	return ""
}
