package gossip

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"
)

func jitter(d time.Duration) time.Duration {
	// ±25%
	q := int64(d / 4)
	if q <= 0 {
		return d
	}
	return d - time.Duration(q) + time.Duration(rand.Int64N(2*q+1))
}

// everyJittered runs fn every interval (±25% jitter) until the node stops.
func (n *Node) everyJittered(interval time.Duration, fn func()) {
	n.everyJitteredUntil(func() time.Duration { return interval }, nil, fn)
}

// everyJitteredUntil runs fn after each jittered next() and at once when
// wake fires (nil: never), until the node stops.
func (n *Node) everyJitteredUntil(next func() time.Duration, wake <-chan struct{}, fn func()) {
	defer n.wg.Done()
	t := time.NewTimer(jitter(next()))
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-wake:
			t.Stop() // Reset below discards a pending tick (Go 1.23 timers)
		}
		fn()
		t.Reset(jitter(next()))
	}
}

// antiEntropyLoop runs an anti-entropy round every AntiEntropyInterval
// (±25% jitter), every AntiEntropyInterval/repairTickDivisor in repair mode
// (decide.go) or while the node asks for digests (Config.WantDigests), and
// one at once when repair mode begins or WakeAntiEntropy is called.
func (n *Node) antiEntropyLoop() {
	n.everyJitteredUntil(func() time.Duration {
		return n.syncs.tickEvery(n.cfg.AntiEntropyInterval, n.cfg.Now(), len(n.wantDigests()) > 0)
	}, n.syncs.wakeAE, n.antiEntropyRound)
}

// WakeAntiEntropy runs an anti-entropy round now (the daemon calls it when
// Config.WantDigests becomes non-empty).
func (n *Node) WakeAntiEntropy() { n.syncs.wake() }

// antiEntropyRound expires overdue syncs and sends our digest sum (or, in
// repair mode, our full digest) to one peer: a random one, or while the
// node asks for digests (Config.WantDigests) a random member of a wanted
// cluster, with the sum asking for the peer's.
func (n *Node) antiEntropyRound() {
	n.expireSyncs()
	peer, ask := n.tickPeer(n.wantDigests())
	if peer == "" {
		return
	}
	out := n.decideAsk(nil, false, peer, ask)
	n.trace("TR tick", "to", peer, "full", out.sendType == msgDigest, "ask", ask)
	n.reply(peer, out)
}

// tickPeer picks the anti-entropy peer: a random alive member of one of the
// wanted clusters (ask: true), or, when there is none, a random alive
// member ("" when there is no peer at all).
func (n *Node) tickPeer(wanted []string) (peer string, ask bool) {
	cand := n.alivePeers("")
	if len(cand) == 0 {
		return "", false
	}
	if len(wanted) > 0 {
		want := make(map[string]bool, len(wanted))
		for _, c := range wanted {
			want[c] = true
		}
		var in []string
		for _, p := range cand {
			if c, _, _ := n.members.lookup(p.Name); want[c] {
				in = append(in, p.Name)
			}
		}
		if len(in) > 0 {
			return in[rand.IntN(len(in))], true
		}
	}
	return cand[rand.IntN(len(cand))].Name, len(wanted) > 0
}

// wantDigests is Config.WantDigests (nil when unset).
func (n *Node) wantDigests() []string {
	if n.cfg.WantDigests == nil {
		return nil
	}
	return n.cfg.WantDigests()
}

func (n *Node) expireSyncs() {
	now := n.cfg.Now()
	pulls, failed := n.syncs.expire(now)
	if pulls > 0 {
		n.m.syncs.WithLabelValues("pull", "timeout").Add(float64(pulls))
	}
	for _, p := range failed {
		n.m.syncs.WithLabelValues("requester", "timeout").Inc()
		n.syncs.fail(p, now)
	}
	for _, m := range n.syncs.releaseStale(now) {
		n.m.syncs.WithLabelValues("requester", "chunk_gap").Inc()
		n.enqueue(inMsg{m: m})
	}
}

// maintenanceEvery is the period of the maintenance loop, and the shortest
// period of the retirement round (retireEvery): a second, or a quarter of a
// (test-short) ReconnectTimeout.
func maintenanceEvery(reconnectTimeout time.Duration) time.Duration {
	if reconnectTimeout/4 < time.Second {
		return max(reconnectTimeout/4, 10*time.Millisecond)
	}
	return time.Second
}

// retireEvery is the period of the retirement round (the reconnect-timeout
// policy and the per-cluster gauges): maintenanceEvery, but no more often
// than a 120th of the timeout, up to 5 s. The round reads every cluster's
// liveness, O(clusters) per node: once a second at the default 24 h
// timeout it was 7.5 % of the CPU of a 300-member simulated mesh, to
// retire a cluster at most a second sooner.
func retireEvery(reconnectTimeout time.Duration) time.Duration {
	return max(maintenanceEvery(reconnectTimeout), min(reconnectTimeout/120, 5*time.Second))
}

// every runs fn every interval (no jitter) until the node stops.
func (n *Node) every(interval time.Duration, fn func()) {
	defer n.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		fn()
	}
}

// maintain keeps the writer flag of our metadata in step with the Lease,
// reaps members dead for longer than ReconnectTimeout and publishes the
// member gauges. (The reconnect-timeout retirement runs in retire.go.)
func (n *Node) maintain() {
	if n.members.setWriter(n.cfg.IsWriter()) {
		if err := n.ml.UpdateNode(time.Second); err != nil {
			n.logRL(slog.LevelWarn, "update node meta", "err", err)
		}
	}
	c := n.members.reap(n.cfg.Now(), n.cfg.ReconnectTimeout)
	n.m.members.WithLabelValues("alive").Set(c.alive)
	n.m.members.WithLabelValues("dead").Set(c.dead)
	n.m.members.WithLabelValues("left").Set(c.left)
	n.m.setVersions(c.versions)
}

func (n *Node) rejoinLoop() {
	n.everyJittered(n.cfg.RejoinInterval, n.rejoin)
}

// rejoin contacts (concurrently, at most 8) the seeds, re-resolved now, and
// members we know of that are not alive (dead but not left), so that a
// healed partition merges again.
func (n *Node) rejoin() {
	uniq := n.rejoinCandidates()
	if len(uniq) == 0 {
		return
	}
	n.m.rejoins.Inc()
	var wg sync.WaitGroup
	for _, a := range uniq {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-n.stop:
				return
			default:
			}
			if _, err := n.ml.Join([]string{a}); err != nil {
				n.log.Debug("rejoin failed", "addr", a, "err", err)
			}
		}()
	}
	wg.Wait()
}

// rejoinDialers bounds how many nodes of the mesh dial dead members in one
// rejoin round, whatever the mesh size: a node takes part with probability
// min(1, rejoinDialers / alive members). Each rejoin is a memberlist
// push/pull over TCP carrying the whole member table, so when every node
// dialled up to 8 dead members per round, a mesh that flapped (members
// falsely declared dead on a starved machine) paid N·8 full-state
// exchanges per round, which can only starve it further: at N = 300 with
// LAN timings, up to 2400 per 10 s. A healed partition needs one exchange across to
// merge (gossip spreads the rest), and 16 dialers per round find one.
// Seeds that are not alive are always dialled (there are few).
const rejoinDialers = 16

// dialDeadMembers is the pure per-round draw: u is uniform in [0, 1).
func dialDeadMembers(alive int, u float64) bool {
	return alive <= rejoinDialers || u*float64(alive) < rejoinDialers
}

// rejoinCandidates returns up to 8 random addresses, without duplicates, of
// seeds that are not alive and (this round: dialDeadMembers) dead members.
func (n *Node) rejoinCandidates() []string {
	aliveAddrs := map[string]bool{n.Addr(): true}
	for _, m := range n.alivePeers("") {
		aliveAddrs[m.Address()] = true
	}
	var cand []string
	for _, a := range n.resolveSeeds() {
		if !aliveAddrs[a] {
			cand = append(cand, a)
		}
	}
	if len(aliveAddrs) == 1 { // alone: the seeds may not resolve
		cand = append(cand, n.knownPeers(aliveAddrs)...)
	}
	if dialDeadMembers(len(aliveAddrs), rand.Float64()) {
		cand = append(cand, n.members.rejoinAddrs(aliveAddrs)...)
	}
	seen := map[string]bool{}
	uniq := cand[:0]
	for _, a := range cand {
		if !seen[a] {
			seen[a] = true
			uniq = append(uniq, a)
		}
	}
	rand.Shuffle(len(uniq), func(i, j int) { uniq[i], uniq[j] = uniq[j], uniq[i] })
	if len(uniq) > 8 {
		uniq = uniq[:8]
	}
	return uniq
}

// knownPeers returns the remembered addresses (Config.KnownPeers) that
// are neither this node nor in skip.
func (n *Node) knownPeers(skip map[string]bool) []string {
	var out []string
	for _, a := range n.cfg.KnownPeers {
		if a != n.Addr() && !skip[a] {
			out = append(out, a)
		}
	}
	return out
}

// resolveSeeds turns Seeds into "ip:port" strings, resolving DNS names now.
func (n *Node) resolveSeeds() []string {
	defPort := n.cfg.AdvertisePort
	if defPort == 0 {
		defPort = n.cfg.BindPort
	}
	if defPort == 0 {
		defPort = 7946
	}
	self := n.Addr()
	var out []string
	for _, s := range n.cfg.Seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			host, port = s, strconv.Itoa(defPort)
		}
		var ips []string
		if net.ParseIP(host) != nil {
			ips = []string{host}
		} else {
			now := n.cfg.Now()
			if !n.seedBackoff.due(s, now) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ips, err = net.DefaultResolver.LookupHost(ctx, host)
			cancel()
			if err != nil {
				if log, failures := n.seedBackoff.failed(s, now); log {
					n.log.Warn("seed does not resolve; retrying with backoff (logged once a minute)",
						"seed", s, "failures", failures, "err", err)
				}
				continue
			}
			n.seedBackoff.succeeded(s)
		}
		for _, ip := range ips {
			a := net.JoinHostPort(ip, port)
			if a != self {
				out = append(out, a)
			}
		}
	}
	return out
}
