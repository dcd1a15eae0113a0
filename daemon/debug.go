package daemon

import (
	"sort"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
)

// State is the /debug/state document.
type State struct {
	Cluster    string                          `json:"cluster"`
	Node       string                          `json:"node"`
	Leader     bool                            `json:"leader"`
	Epoch      uint32                          `json:"epoch"`
	Members    []gossip.MemberInfo             `json:"members"`
	Clusters   map[string]gossip.ClusterStatus `json:"clusters"`
	Origins    map[string]string               `json:"origins"`
	Policies   int                             `json:"policies"`
	Generated  int                             `json:"generatedNetworkPolicies"`
	PendingInv int                             `json:"pendingInventory"`
	// Services are the exported Services replicated here, origin/ns/name.
	Services []string `json:"services"`
	// MCNPs are the live MultiClusterNetworkPolicies replicated here,
	// origin/ns/name (deleted ones are gone from this list).
	MCNPs []string `json:"mcnps"`
	// Unproven counts, per origin, the Service and MCNP entries held above its proven
	// watermark (received out of order, or in a stream whose origin-signed
	// state mark this replica did not reproduce).
	Unproven map[string]int `json:"unproven,omitempty"`
}

// DebugState summarises the daemon for operators and the demo.
func (d *Daemon) DebugState() any {
	s := State{Cluster: d.opts.ClusterID, Node: d.opts.NodeName, Leader: d.leader.Load(), Origins: map[string]string{}}
	if d.rep != nil {
		s.Epoch = d.rep.Epoch()
		dg := d.rep.Digest()
		for o, od := range dg {
			s.Origins[o] = od.Max.String()
		}
		s.Services, s.MCNPs, s.Unproven = d.liveEntries(dg)
	}
	if d.node != nil {
		s.Members = d.node.Members()
		sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Name < s.Members[j].Name })
		s.Clusters = d.node.Clusters()
	}
	d.mu.Lock()
	s.Policies = d.outputs.Len()
	s.Generated = len(d.outputs.Desired())
	d.mu.Unlock()
	if d.inv != nil {
		s.PendingInv = d.inv.Pending()
	}
	return s
}

// liveEntries lists the live Services and MCNPs of every origin, and the
// entries each origin has above its proven watermark.
func (d *Daemon) liveEntries(dg crdt.Digest) (services, mcnps []string, unproven map[string]int) {
	d.rep.View(func(st *crdt.State) {
		for o, od := range dg {
			for _, k := range []crdt.Kind{crdt.KindService, crdt.KindPolicy} {
				st.Range(o, k, func(e crdt.Entry) bool {
					if e.Version > od.Max {
						if unproven == nil {
							unproven = map[string]int{}
						}
						unproven[o]++
					}
					if e.Deleted {
						return true
					}
					if k == crdt.KindService {
						services = append(services, o+"/"+e.Name)
					} else {
						mcnps = append(mcnps, o+"/"+e.Name)
					}
					return true
				})
			}
		}
	})
	sort.Strings(services)
	sort.Strings(mcnps)
	return services, mcnps, unproven
}
