package daemon

import (
	"context"
	"sort"
	"time"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/internal/version"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// ClusterSetInterval is how often the leader refreshes the CoastguardCluster
// objects; ClusterStaleAfter is how long a cluster may go unseen before it
// is reported Stale.
var (
	ClusterSetInterval = 5 * time.Second
	ClusterStaleAfter  = 60 * time.Second
)

// SoftwareVersion is this build's version (internal/version, stamped at
// link time), reported for the local cluster in its CoastguardCluster
// status: the SOFTWARE column and the version-skew check of `kubectl
// coastguard status` read it.
var SoftwareVersion = version.Get()

// clusterSetLoop writes one CoastguardCluster per known cluster while this
// daemon leads.
func (d *Daemon) clusterSetLoop(ctx context.Context) {
	rec, stop := kube.NewEventRecorder(d.opts.Client, "coastguard")
	defer stop()
	w := kube.NewClusterSetWriter(d.opts.Dynamic, rec, d.opts.ClusterID, ClusterStaleAfter, d.log)
	streak := map[string]int{}
	round := func(now time.Time) {
		if !d.leader.Load() || d.decommissioned.Load() || d.node == nil {
			return
		}
		obs := d.observeClusters(streak)
		if err := w.Sync(ctx, obs, now); err != nil && ctx.Err() == nil {
			d.log.Warn("updating CoastguardCluster objects failed; retrying", "err", err)
		}
	}
	round(time.Now())
	every(ctx, ClusterSetInterval, round)
}

// observeClusters gathers the local view of every cluster: gossip members
// and liveness, the replicated digest (versions, retirement) and each
// cluster's replicated cluster entry (CIDRs, labels).
func (d *Daemon) observeClusters(dupStreak map[string]int) []kube.ClusterObservation {
	members := d.node.Members()
	live := d.node.Clusters()
	digest := d.rep.Digest()
	ids := map[string]bool{d.opts.ClusterID: true}
	for id := range digest {
		ids[id] = true
	}
	for id := range live {
		ids[id] = true
	}
	lost := d.lostNames()
	for id := range lost {
		ids[id] = true
	}
	values := d.clusterValues(ids)
	problems := d.clusterProblems(members, dupStreak)
	byCluster := map[string][]gossip.MemberInfo{}
	for _, m := range members {
		byCluster[m.Cluster] = append(byCluster[m.Cluster], m)
	}
	out := make([]kube.ClusterObservation, 0, len(ids))
	for id := range ids {
		o := kube.ClusterObservation{ID: id, Local: id == d.opts.ClusterID, SanityProblems: problems[id],
			SigningKeyFingerprint: d.keyFingerprint(id), LostPolicies: lost[id]}
		if cs, ok := live[id]; ok {
			o.Alive, o.AliveMembers, o.LastSeen = cs.Alive, cs.AliveMembers, cs.LastAlive
		}
		observeMembers(&o, byCluster[id])
		if od, ok := digest[id]; ok {
			o.Epoch, o.Seq = od.Max.Epoch(), od.Max.Seq()
			// retired: nothing of it remains above the retirement (a
			// takeover's seal of prior epochs is not a retirement)
			o.Retired = od.Retired != 0 && od.Retired >= od.Max
		}
		if v, ok := values[id]; ok {
			o.PodCIDRs, o.GlobalCIDRs, o.Labels = v.PodCIDRs, v.GlobalCIDRs, v.Labels
		}
		if o.Local {
			o.SoftwareVersion = SoftwareVersion
			o.Alive, o.LastSeen = true, d.now()
			if o.AliveMembers == 0 {
				o.AliveMembers = 1
			}
			if o.Leader == "" {
				o.Leader = d.opts.NodeName
			}
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// observeMembers fills in a cluster's members that have not left and its
// leader (the alive writer).
func observeMembers(o *kube.ClusterObservation, members []gossip.MemberInfo) {
	for _, m := range members {
		if m.Left {
			continue
		}
		o.Members = append(o.Members, v1.CoastguardClusterMember{Name: m.Name, Address: m.Addr, Alive: m.Alive, Writer: m.Writer})
		if m.Alive && m.Writer {
			o.Leader = m.Name
		}
	}
}

// clusterValues decodes the replicated cluster entry of each cluster.
func (d *Daemon) clusterValues(ids map[string]bool) map[string]crdt.ClusterValue {
	values := map[string]crdt.ClusterValue{}
	d.rep.View(func(st *crdt.State) {
		for id := range ids {
			e, ok := st.Get(crdt.Key{Origin: id, Kind: crdt.KindCluster})
			if !ok || e.Deleted {
				continue
			}
			var v crdt.ClusterValue
			if crdt.DecodeValue(e.Value, &v) == nil {
				values[id] = v
			}
		}
	})
	return values
}

// clusterProblems lists each cluster's sanity problems: inventory findings
// and a cluster ID claimed by more than one writer for
// duplicateConfirmRounds rounds in a row (dupStreak counts them).
func (d *Daemon) clusterProblems(members []gossip.MemberInfo, dupStreak map[string]int) map[string][]string {
	problems := map[string][]string{}
	d.mu.Lock()
	for _, f := range enforce.Findings(d.mirror.Inventory()) {
		for _, c := range f.Clusters {
			problems[c] = append(problems[c], f.Message)
		}
	}
	d.mu.Unlock()
	writers := map[string][]string{}
	for _, m := range members {
		if m.Alive && m.Writer {
			writers[m.Cluster] = append(writers[m.Cluster], m.Name)
		}
	}
	for c := range dupStreak {
		if len(writers[c]) < 2 {
			delete(dupStreak, c)
		}
	}
	for c, ws := range writers {
		if len(ws) < 2 {
			continue
		}
		if dupStreak[c]++; dupStreak[c] >= duplicateConfirmRounds {
			sort.Strings(ws)
			problems[c] = append(problems[c], "cluster ID claimed by more than one writer: "+joinNames(ws))
		}
	}
	return problems
}

func joinNames(ns []string) string {
	s := ""
	for i, n := range ns {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}
