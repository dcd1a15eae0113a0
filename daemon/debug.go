package daemon

import (
	"errors"
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
	// Unproven counts, per other origin, the Service and MCNP entries held
	// above its proven watermark (received out of order, or in a stream
	// whose origin-signed state mark this replica did not reproduce); the
	// own cluster's entries are never held.
	Unproven map[string]int `json:"unproven,omitempty"`
	// Watermarks are, per origin, the replica's digest: the proven
	// watermark (max), the highest version held (top, above max only while
	// entries wait for a proof), and the GC and retirement watermarks. A
	// max that stays below top while the origin writes means its state
	// marks are not being reproduced here.
	Watermarks map[string]originWatermarks `json:"watermarks,omitempty"`
}

// originWatermarks is one origin's digest as /debug/state shows it.
type originWatermarks struct {
	Max     string `json:"max"`
	Top     string `json:"top"`
	GC      string `json:"gc"`
	Retired string `json:"retired"`
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
		s.Watermarks = watermarks(dg)
		s.Services, s.MCNPs, s.Unproven = liveEntries(d.opts.ClusterID, dg, d.rep.View)
	}
	if d.node != nil {
		s.Members = d.node.Members()
		sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Name < s.Members[j].Name })
		s.Clusters = d.node.Clusters()
	}
	d.mu.Lock()
	s.Policies = d.outputs.Len()
	s.Generated = d.outputs.Generated()
	d.mu.Unlock()
	if d.inv != nil {
		s.PendingInv = d.inv.Pending()
	}
	return s
}

// watermarks renders a digest's watermarks per origin.
func watermarks(dg crdt.Digest) map[string]originWatermarks {
	out := make(map[string]originWatermarks, len(dg))
	for o, od := range dg {
		out[o] = originWatermarks{Max: od.Max.String(), Top: od.Top.String(), GC: od.GC.String(), Retired: od.Retired.String()}
	}
	return out
}

// liveEntries lists the live Services and MCNPs of every origin, and the
// entries each other origin has above its proven watermark, counted as
// the daemon treats them: an MCNP (live or deleted) frozen by the applier
// (unprovenPolicies) and a live Service held from the mirror
// (inventoryHold). The own cluster's entries are never unproven.
func liveEntries(self string, dg crdt.Digest, view func(func(*crdt.State))) (services, mcnps []string, unproven map[string]int) {
	view(func(st *crdt.State) {
		for o, od := range dg {
			held := o != self && !allProven(od)
			for _, k := range []crdt.Kind{crdt.KindService, crdt.KindPolicy} {
				st.Range(o, k, func(e crdt.Entry) bool {
					if held && e.Version > od.Max && (k == crdt.KindPolicy || !e.Deleted) {
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

// ScanStore reads the replica's bbolt mirror by path prefix
// (store.Store.Scan) for `coastguardd store get --daemon`; it fails before
// the state is open and on a backend without a file.
func (d *Daemon) ScanStore(prefix string, limit int, fn func(path string, e crdt.Entry) error) error {
	d.mu.Lock()
	rep := d.rep
	d.mu.Unlock()
	if rep == nil || rep.Store() == nil {
		return errors.New("the state is not open yet")
	}
	return rep.Store().Scan(prefix, limit, fn)
}
