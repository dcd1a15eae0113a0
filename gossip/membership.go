package gossip

import (
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// members is the membership concern of a Node: the member table as seen
// through memberlist's events, when each cluster was last seen alive, and
// this node's own metadata flags (writer, leaving). It has its own lock and
// never calls out while holding it.
type members struct {
	self string

	mu          sync.Mutex
	table       map[string]*memberState
	clusterSeen map[string]time.Time // cluster -> last time a member was alive (or first noticed)
	metaWriter  bool
	leaving     bool

	aliveCount atomic.Int64
}

func newMembers(self string, writer bool) *members {
	return &members{self: self, table: map[string]*memberState{},
		clusterSeen: map[string]time.Time{}, metaWriter: writer}
}

// observe records a memberlist event for mn (alive: join/update; not alive:
// leave or death) at now.
func (ms *members) observe(mn *memberlist.Node, cluster, build string, flags byte, alive bool, now time.Time) {
	writer, left := flags&metaWriter != 0, flags&metaLeaving != 0 && !alive
	ms.mu.Lock()
	defer ms.mu.Unlock()
	st, ok := ms.table[mn.Name]
	if !ok {
		st = &memberState{}
		ms.table[mn.Name] = st
	}
	if cluster == "" && st.Cluster != "" {
		cluster = st.Cluster
	}
	prevCluster := st.Cluster
	st.MemberInfo = MemberInfo{
		Name: mn.Name, Cluster: cluster, Writer: writer && alive,
		Addr: mn.Address(), Alive: alive, Left: left, Version: build,
	}
	st.since = now
	cp := *mn
	cp.Addr = append(net.IP(nil), mn.Addr...)
	cp.Meta = append([]byte(nil), mn.Meta...)
	st.node = &cp
	if cluster != "" {
		// the cluster was alive until now in either case
		ms.clusterSeen[cluster] = now
	}
	if prevCluster != "" && prevCluster != cluster {
		ms.clusterSeen[prevCluster] = now
	}
	ms.recountLocked()
}

// knownIP reports whether ip is the address of a member in the table that
// has not left (alive, or suspected dead and still rejoinable): the
// sources whose inbound streams get the reserved slots (guard.go).
func (ms *members) knownIP(ip string) bool {
	a := net.ParseIP(ip)
	if a == nil {
		return false
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for name, m := range ms.table {
		if name != ms.self && !m.Left && m.node != nil && m.node.Addr.Equal(a) {
			return true
		}
	}
	return false
}

func (ms *members) recountLocked() {
	var cnt int64
	for _, m := range ms.table {
		if m.Alive {
			cnt++
		}
	}
	ms.aliveCount.Store(cnt)
}

// numAlive is the alive member count as seen through events, at least 1
// (safe to call from memberlist goroutines before Create returned).
func (ms *members) numAlive() int {
	if v := ms.aliveCount.Load(); v > 0 {
		return int(v)
	}
	return 1
}

// list returns every member ever seen (alive or not), sorted by name.
func (ms *members) list() []MemberInfo {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := make([]MemberInfo, 0, len(ms.table))
	for _, m := range ms.table {
		out = append(out, m.MemberInfo)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// clusters returns the liveness of every known cluster at now.
func (ms *members) clusters(now time.Time) map[string]ClusterStatus {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.clustersLocked(now)
}

func (ms *members) clustersLocked(now time.Time) map[string]ClusterStatus {
	out := map[string]ClusterStatus{}
	for c, t := range ms.clusterSeen {
		out[c] = ClusterStatus{LastAlive: t}
	}
	for _, m := range ms.table {
		if m.Cluster == "" {
			continue
		}
		st := out[m.Cluster]
		if m.Alive {
			st.Alive = true
			st.AliveMembers++
			st.LastAlive = now
		}
		out[m.Cluster] = st
	}
	return out
}

// noticeOrigins starts the clock of every origin of the digest not yet known
// from membership (a cluster known only from state counts from now), and
// returns the cluster liveness at now.
func (ms *members) noticeOrigins(d crdt.Digest, now time.Time) map[string]ClusterStatus {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for o := range d {
		if _, ok := ms.clusterSeen[o]; !ok {
			ms.clusterSeen[o] = now
		}
	}
	return ms.clustersLocked(now)
}

// memberCounts are the member table's sizes by state, and the alive members
// by announced build version.
type memberCounts struct {
	alive, dead, left float64
	versions          map[string]float64
}

// reap forgets members dead for longer than timeout (no more rejoins) and
// counts the rest.
func (ms *members) reap(now time.Time, timeout time.Duration) memberCounts {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	c := memberCounts{versions: map[string]float64{}}
	for name, m := range ms.table {
		switch {
		case m.Alive:
			c.alive++
			c.versions[m.Version]++
		case m.Left:
			c.left++
		default:
			if now.Sub(m.since) > timeout {
				delete(ms.table, name)
				continue
			}
			c.dead++
		}
	}
	ms.recountLocked()
	return c
}

// alivePeers returns copies of the alive members other than self and
// exclude (never memberlist's own node pointers, see memberState.node).
func (ms *members) alivePeers(exclude string) []*memberlist.Node {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	cand := make([]*memberlist.Node, 0, len(ms.table))
	for name, m := range ms.table {
		if name == ms.self || name == exclude || !m.Alive || m.node == nil {
			continue
		}
		cand = append(cand, m.node)
	}
	return cand
}

// node returns the alive member's node copy, or nil.
func (ms *members) node(name string) *memberlist.Node {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if m := ms.table[name]; m != nil && m.Alive {
		return m.node
	}
	return nil
}

// lookup returns a member's cluster and liveness (known=false for a name
// never seen).
func (ms *members) lookup(name string) (cluster string, alive, known bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m := ms.table[name]
	if m == nil {
		return "", false, false
	}
	return m.Cluster, m.Alive, true
}

// rejoinAddrs returns the addresses of members that are neither alive nor
// left (dead), except those in skip.
func (ms *members) rejoinAddrs(skip map[string]bool) []string {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var out []string
	for _, m := range ms.table {
		if !m.Alive && !m.Left && m.Addr != "" && !skip[m.Addr] {
			out = append(out, m.Addr)
		}
	}
	return out
}

// setWriter records the own writer flag and reports whether it changed.
func (ms *members) setWriter(w bool) bool {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	changed := w != ms.metaWriter
	ms.metaWriter = w
	return changed
}

// setLeaving marks this node as leaving in its metadata.
func (ms *members) setLeaving() {
	ms.mu.Lock()
	ms.leaving = true
	ms.mu.Unlock()
}

// selfFlags returns the own metadata flags.
func (ms *members) selfFlags() (writer, leaving bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.metaWriter, ms.leaving
}
