package daemon

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/store"
)

// The gossip addresses this daemon last saw alive are remembered in the
// store, and a restart dials them with the seeds (gossip
// Config.KnownPeers): a daemon whose seeds do not resolve (Lighthouse or
// DNS down, or a wrong --seeds) still finds the mesh instead of staying
// alone (RELIABILITY.md, finding 9).

// peersEvery is how often the alive members are compared with the
// remembered addresses; the store is written only when they differ.
const peersEvery = 5 * time.Second

// knownPeers returns the addresses a previous run remembered (none on a
// backend without a file; a damaged record is logged and ignored).
func (d *Daemon) knownPeers() []string {
	st := d.rep.Store()
	if st == nil {
		return nil
	}
	addrs, err := st.Peers()
	if err != nil {
		d.log.Warn("cannot read the remembered gossip peers; joining through the seeds alone", "err", err)
		return nil
	}
	return addrs
}

// peerLoop remembers the alive members' addresses while the daemon runs.
func (d *Daemon) peerLoop(ctx context.Context) {
	st := d.rep.Store()
	if st == nil {
		return
	}
	var last []string
	every(ctx, peersEvery, func(time.Time) {
		addrs := peersToRemember(d.opts.NodeName, d.node.Members(), store.MaxPeers)
		if len(addrs) == 0 || slices.Equal(addrs, last) {
			return // alone: keep what the last view remembered
		}
		if err := st.PutPeers(addrs); err != nil {
			d.log.Warn("cannot remember the gossip peers", "err", err)
			return
		}
		level := slog.LevelDebug
		if last == nil {
			level = slog.LevelInfo
		}
		d.log.Log(ctx, level, "gossip peers remembered for a restart", "peers", len(addrs))
		last = addrs
	})
}

// peersToRemember picks up to max addresses of alive members other than
// self, spread over clusters (one of each cluster in turn), sorted.
func peersToRemember(self string, ms []gossip.MemberInfo, max int) []string {
	byCluster := map[string][]string{}
	for _, m := range ms {
		if m.Alive && !m.Left && m.Name != self && m.Addr != "" {
			byCluster[m.Cluster] = append(byCluster[m.Cluster], m.Addr)
		}
	}
	clusters := make([]string, 0, len(byCluster))
	for c, addrs := range byCluster {
		sort.Strings(addrs)
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	seen := map[string]bool{}
	var out []string
	for round := 0; len(out) < max; round++ {
		took := false
		for _, c := range clusters {
			if round < len(byCluster[c]) && len(out) < max {
				took = true
				if a := byCluster[c][round]; !seen[a] {
					seen[a] = true
					out = append(out, a)
				}
			}
		}
		if !took {
			break
		}
	}
	sort.Strings(out)
	return out
}
