package gossip

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

const (
	fastPullTimeout = 400 * time.Millisecond
	bulkSyncTimeout = 10 * time.Second
	maxBackoff      = 15 * time.Second
	// syncEntryBudget bounds the entries of one sync answer (the maxEntries
	// passed to Replica.DeltaSince, which chunks and round-robins itself).
	syncEntryBudget = 16384
	maxFastPulls    = 256
	quietPeriod     = 1500 * time.Millisecond
	maxQuietSkip    = 1500 * time.Millisecond
)

func (n *Node) worker() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case im := <-n.inbox:
			n.handle(im)
		}
	}
}

func (n *Node) handle(im inMsg) {
	m := im.m
	if m.Sender == n.cfg.NodeName {
		return
	}
	switch m.Type {
	case msgHeads:
		n.onHeads(m)
	case msgPush:
		n.onPush(m)
	case msgForward:
		n.onForward(m)
	case msgSyncReq:
		n.onSyncReq(m)
	case msgSyncData:
		n.onSyncData(m)
	case msgDigest:
		n.onDigest(m, im.state)
	case msgRetire:
		n.onRetire(m)
	case msgDigestSum:
		// Equal sums: nothing to do (the idle steady state costs one small
		// UDP packet per node per interval). Otherwise send the full digest;
		// the sender pulls what it lacks and answers with its own digest if
		// we lack something.
		// While fresh deltas are still spreading (we applied one in the last
		// quietPeriod) a mismatch is expected and the fast path will close
		// it; skip the O(clusters) digest then, but never for longer than
		// maxQuietSkip.
		local := n.rep.Digest()
		if digestSum(local) == m.Sum {
			// Equal sums: the sender holds exactly what we hold, which is
			// an anti-entropy round as complete as a full digest would be.
			n.observeDigest(m.Sender, local)
		}
		if digestSum(local) != m.Sum {
			now := n.cfg.Now()
			n.mu.Lock()
			skip := now.Sub(n.lastApply) < quietPeriod && now.Sub(n.lastFullDigest) < maxQuietSkip
			if !skip {
				n.lastFullDigest = now
			}
			n.mu.Unlock()
			if to := n.memberNode(m.Sender); to != nil && !skip {
				n.sendFullDigest(to, false, local)
			}
		}
	}
}

// applyDeltas applies deltas (one store transaction when all are valid;
// one by one otherwise so a poison delta cannot block good ones), records
// metrics, and announces every origin whose watermark advanced.
// isLocalStoreFailure reports whether err is the replica's own storage
// failing (store.CommitError), which is never a peer's fault.
func isLocalStoreFailure(err error) bool {
	var lf interface{ LocalStoreFailure() bool }
	return errors.As(err, &lf) && lf.LocalStoreFailure()
}

func (n *Node) applyDeltas(ds []crdt.Delta, path string) {
	if len(ds) == 0 {
		return
	}
	before := n.rep.Digest()
	changes, err := n.rep.Apply(ds...)
	applied := len(ds)
	if isLocalStoreFailure(err) {
		// our own disk failed, not the peer: nothing is dropped as invalid;
		// the daemon hands over and anti-entropy re-sends after restart.
		n.logRL(slog.LevelError, "local store refuses writes; deltas not applied", "from", "sync", "path", path, "err", err)
		return
	}
	if err != nil {
		applied = 0
		changes = nil
		for _, d := range ds {
			ch, err := n.rep.Apply(d)
			if isLocalStoreFailure(err) {
				n.logRL(slog.LevelError, "local store refuses writes; deltas not applied", "path", path, "err", err)
				return
			}
			if err != nil {
				n.dropErr(err, "rejected delta", "origin", d.Origin, "from", d.From.String(), "to", d.To.String())
				continue
			}
			applied++
			changes = append(changes, ch...)
		}
	}
	n.m.deltas.WithLabelValues("in", path).Add(float64(applied))
	if len(changes) > 0 {
		n.mu.Lock()
		n.lastApply = n.cfg.Now()
		n.mu.Unlock()
	}
	now := n.cfg.Now().UnixNano()
	for _, ch := range changes {
		if ch.New != nil && ch.New.Stamp > 0 && ch.Key.Origin != n.cfg.ClusterID {
			if lag := now - ch.New.Stamp; lag >= 0 {
				n.m.lag.Observe(float64(lag) / 1e9)
			}
		}
	}
	after := n.rep.Digest()
	seen := map[string]bool{}
	for _, d := range ds {
		if seen[d.Origin] {
			continue
		}
		seen[d.Origin] = true
		if a, b := after[d.Origin], before[d.Origin]; a.Max != b.Max || a.Retired != b.Retired || a.Hash != b.Hash {
			n.announce(d.Origin)
		}
	}
}

func (n *Node) onHeads(m *message) {
	local := n.rep.Digest()
	now := n.cfg.Now()
	for _, h := range m.Heads {
		od := local[h.Origin]
		if h.Max <= od.Max || h.Max <= od.Retired {
			continue
		}
		n.mu.Lock()
		if id, ok := n.pulls[h.Origin]; ok {
			if s := n.syncs[id]; s != nil && s.target >= h.Max && now.Before(s.deadline) {
				n.mu.Unlock()
				continue
			}
		}
		if len(n.pulls) >= maxFastPulls || n.shutdown {
			n.mu.Unlock()
			continue
		}
		n.nextID++
		s := &syncState{id: n.nextID, peer: m.Sender, fast: true, origins: []string{h.Origin},
			target: h.Max, deadline: now.Add(fastPullTimeout)}
		n.syncs[s.id] = s
		n.pulls[h.Origin] = s.id
		n.mu.Unlock()
		to := n.memberNode(m.Sender)
		if to == nil || !n.sendBestEffort(to, encodeSyncReq(n.cfg.NodeName, s.id, crdt.Digest{h.Origin: od}), msgSyncReq) {
			n.finishSync(s.id)
		}
	}
}

func (n *Node) onPush(m *message) {
	n.mu.Lock()
	ms := n.members[m.Sender]
	var cluster string
	alive := false
	if ms != nil {
		cluster, alive = ms.Cluster, ms.Alive
	}
	n.mu.Unlock()
	if ms == nil || !alive {
		n.drop(dropUnknownSender, "push from unknown or dead member", "sender", m.Sender)
		return
	}
	ok := make([]crdt.Delta, 0, len(m.Deltas))
	for _, d := range m.Deltas {
		if d.Origin != cluster {
			n.drop(dropOriginMismatch, "pushed delta origin is not the sender's cluster",
				"sender", m.Sender, "sender_cluster", cluster, "origin", d.Origin)
			continue
		}
		ok = append(ok, d)
	}
	before := n.rep.Digest()
	n.applyDeltas(ok, "push")
	n.forwardFresh(m.Sender, ok, before)
}

func (n *Node) finishSync(id uint64) *syncState {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.syncs[id]
	if s == nil {
		return nil
	}
	delete(n.syncs, id)
	if s.fast {
		for _, o := range s.origins {
			if n.pulls[o] == id {
				delete(n.pulls, o)
			}
		}
	} else if n.bulkByPeer[s.peer] == id {
		delete(n.bulkByPeer, s.peer)
	}
	return s
}

func (n *Node) onSyncData(m *message) {
	n.mu.Lock()
	s := n.syncs[m.ID]
	if s == nil || s.peer != m.Sender {
		n.mu.Unlock()
		n.drop(dropUnsolicited, "sync data we did not ask for", "sender", m.Sender, "id", m.ID)
		return
	}
	s.deadline = n.cfg.Now().Add(bulkSyncTimeout)
	allowed := map[string]bool{}
	for _, o := range s.origins {
		allowed[o] = true
	}
	fast := s.fast
	n.mu.Unlock()
	if m.Final {
		n.finishSync(m.ID)
	}
	ok := make([]crdt.Delta, 0, len(m.Deltas))
	for _, d := range m.Deltas {
		if !allowed[d.Origin] {
			n.drop(dropUnsolicited, "sync data for an origin we did not ask for", "sender", m.Sender, "origin", d.Origin)
			continue
		}
		ok = append(ok, d)
	}
	path := "sync"
	if fast {
		path = "pull"
	}
	before := n.rep.Digest()
	n.applyDeltas(ok, path)
	if fast {
		n.forwardFresh(m.Sender, ok, before)
	}
	if m.Final {
		role := "requester"
		if fast {
			role = "pull"
		}
		n.m.syncs.WithLabelValues(role, "ok").Inc()
		n.mu.Lock()
		delete(n.backoffs, m.Sender)
		n.mu.Unlock()
		if m.More && !fast {
			n.startSync(m.Sender, s.origins, n.rep.Digest(), true)
		}
	}
}

// needs reports whether a peer whose digest of an origin is rd holds
// something we (ld; present=false when we know nothing of the origin) lack.
func needs(ld crdt.OriginDigest, present bool, rd crdt.OriginDigest) bool {
	return crdt.OriginBehind(ld, present, rd)
}

// observeDigest hands a digest that a member holds to Config.OnDigest,
// naming the member's cluster.
func (n *Node) observeDigest(sender string, d crdt.Digest) {
	if n.cfg.OnDigest == nil {
		return
	}
	n.mu.Lock()
	ms := n.members[sender]
	n.mu.Unlock()
	if ms != nil {
		n.cfg.OnDigest(ms.Cluster, d)
	}
}

func (n *Node) onDigest(m *message, state bool) {
	local := n.rep.Digest()
	// Retirement watermarks travel in digests too: anti-entropy for Retire.
	for o, rd := range m.Digest {
		if rd.Retired > local[o].Retired && (n.cfg.Trust == nil || n.mayRetire(o)) {
			// With signatures on, a signed retirement arrives by pull
			// (Behind sees the higher Retired); an unsigned one only
			// where our own membership view agrees.
			n.applyRetire(crdt.Retire{Origin: o, UpTo: rd.Retired}, false)
		}
	}
	local = n.rep.Digest()
	var need []string
	for o, rd := range m.Digest {
		ld, ok := local[o]
		if needs(ld, ok, rd) {
			need = append(need, o)
		}
	}
	if len(need) > 0 {
		n.startSync(m.Sender, need, local, false)
	}
	n.observeDigest(m.Sender, m.Digest)
	if m.Reply || state {
		return
	}
	// If the sender lacks something we hold, answer with our digest so it
	// pulls from us.
	for o, ld := range local {
		rd, ok := m.Digest[o]
		if needs(rd, ok, ld) {
			if to := n.memberNode(m.Sender); to != nil {
				n.sendFullDigest(to, true, local)
			}
			return
		}
	}
}

// startSync asks peer for what we lack of origins (bulk anti-entropy pull).
func (n *Node) startSync(peer string, origins []string, local crdt.Digest, resume bool) {
	now := n.cfg.Now()
	n.mu.Lock()
	if n.shutdown {
		n.mu.Unlock()
		return
	}
	if _, busy := n.bulkByPeer[peer]; busy {
		n.mu.Unlock()
		return
	}
	if len(n.bulkByPeer) >= n.cfg.MaxConcurrentSyncs {
		n.mu.Unlock()
		n.m.syncs.WithLabelValues("requester", "throttled").Inc()
		return
	}
	if b := n.backoffs[peer]; b != nil && now.Before(b.until) && !resume {
		n.mu.Unlock()
		return
	}
	n.nextID++
	s := &syncState{id: n.nextID, peer: peer, origins: origins, deadline: now.Add(bulkSyncTimeout)}
	n.syncs[s.id] = s
	n.bulkByPeer[peer] = s.id
	n.mu.Unlock()
	want := make(crdt.Digest, len(origins))
	for _, o := range origins {
		want[o] = local[o]
	}
	to := n.memberNode(peer)
	if to == nil || !n.send(to, encodeSyncReq(n.cfg.NodeName, s.id, want), msgSyncReq) {
		n.finishSync(s.id)
		n.fail(peer)
		return
	}
	n.m.syncs.WithLabelValues("requester", "started").Inc()
}

func (n *Node) fail(peer string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.backoffs[peer]
	if b == nil {
		b = &backoff{}
		n.backoffs[peer] = b
	}
	b.failures++
	d := time.Second << min(b.failures-1, 4)
	if d > maxBackoff {
		d = maxBackoff
	}
	// full jitter in [d/2, d)
	d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
	b.until = n.cfg.Now().Add(d)
}

func (n *Node) onSyncReq(m *message) {
	select {
	case n.serveSem <- struct{}{}:
	default:
		n.m.syncs.WithLabelValues("server", "busy").Inc()
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-n.serveSem }()
		n.serve(m)
	}()
}

// serve answers a sync request with what the requester lacks of the
// requested origins: round-robin across origins (Replica.DeltaSince order),
// chunked into messages of at most SyncChunkBytes, at most SyncMaxBytes in
// total (then More is set and the requester resumes from its new digest).
// Every prefix of the answer is valid to apply.
func (n *Node) serve(m *message) {
	to := n.memberNode(m.Sender)
	if to == nil {
		n.m.syncs.WithLabelValues("server", "unknown_peer").Inc()
		return
	}
	local := n.rep.Digest()
	remote := make(crdt.Digest, len(local))
	for o, od := range local {
		remote[o] = od
	}
	wanted := 0
	for o, od := range m.Digest {
		if _, ok := local[o]; ok {
			remote[o] = od
			wanted++
		}
	}
	var deltas []crdt.Delta
	if wanted > 0 {
		deltas = n.rep.DeltaSince(remote, syncEntryBudget)
	}
	var (
		buf      [][]byte
		bufBytes int
		total    int
		sent     int
		more     bool
		broken   = map[string]bool{}
	)
	flush := func(final bool) bool {
		msg := encodeDeltaMsgFlags(msgSyncData, n.cfg.NodeName, m.ID, final, final && more, buf)
		buf, bufBytes = nil, 0
		sent++
		if final && sent == 1 && len(msg) <= udpBudget {
			return n.sendBestEffort(to, msg, msgSyncData)
		}
		return n.sendReliable(to, msg, msgSyncData)
	}
	chunkMax := n.cfg.SyncChunkBytes - 1024
outer:
	for _, d := range deltas {
		if _, ok := m.Digest[d.Origin]; !ok || broken[d.Origin] {
			continue
		}
		chunks, err := encodeDeltaChunks(d, chunkMax)
		if err != nil {
			// Skipping a delta would leave a gap: stop this origin here.
			broken[d.Origin] = true
			n.logRL(slog.LevelError, "cannot encode delta for sync", "origin", d.Origin, "err", err)
			continue
		}
		for _, c := range chunks {
			if total > 0 && total+len(c) > n.cfg.SyncMaxBytes {
				more = true
				break outer
			}
			if len(buf) > 0 && (bufBytes+len(c)+16 > n.cfg.SyncChunkBytes || len(buf) >= maxDeltasPerMsg) {
				if !flush(false) {
					n.m.syncs.WithLabelValues("server", "send_failed").Inc()
					return
				}
			}
			buf = append(buf, c)
			bufBytes += len(c) + 4
			total += len(c)
		}
		n.m.deltas.WithLabelValues("out", "sync").Inc()
	}
	if !flush(true) {
		n.m.syncs.WithLabelValues("server", "send_failed").Inc()
		return
	}
	n.m.syncs.WithLabelValues("server", "ok").Inc()
}

func (n *Node) onRetire(m *message) {
	for _, r := range m.Retires {
		n.applyRetire(r, true)
	}
}

// applyRetire applies a retirement if it is news and re-gossips it.
func (n *Node) applyRetire(r crdt.Retire, rebroadcast bool) bool {
	if r.UpTo == 0 {
		return false
	}
	if n.rep.Digest()[r.Origin].Retired >= r.UpTo {
		return false
	}
	if _, err := n.rep.ApplyRetire(r); err != nil {
		n.dropErr(err, "rejected retire", "origin", r.Origin, "upto", r.UpTo.String())
		return false
	}
	if r.Origin == n.cfg.ClusterID {
		n.log.Error("own cluster was retired by the mesh; the writer must continue at a higher epoch",
			"upto", r.UpTo.String())
	} else {
		n.log.Info("cluster retired", "cluster", r.Origin, "upto", r.UpTo.String())
	}
	if rebroadcast {
		n.broadcastRetire(r)
	}
	return true
}

// ---- loops ----

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
	defer n.wg.Done()
	t := time.NewTimer(jitter(interval))
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		fn()
		t.Reset(jitter(interval))
	}
}

func (n *Node) antiEntropyLoop() {
	n.everyJittered(n.cfg.AntiEntropyInterval, func() {
		n.expireSyncs()
		if peers := n.randomPeers(1, ""); len(peers) == 1 {
			n.send(peers[0], encodeDigestSum(n.cfg.NodeName, digestSum(n.rep.Digest())), msgDigestSum)
		}
	})
}

func (n *Node) expireSyncs() {
	now := n.cfg.Now()
	var failed []string
	n.mu.Lock()
	for id, s := range n.syncs {
		if now.Before(s.deadline) {
			continue
		}
		delete(n.syncs, id)
		if s.fast {
			for _, o := range s.origins {
				if n.pulls[o] == id {
					delete(n.pulls, o)
				}
			}
			n.m.syncs.WithLabelValues("pull", "timeout").Inc()
		} else {
			if n.bulkByPeer[s.peer] == id {
				delete(n.bulkByPeer, s.peer)
			}
			failed = append(failed, s.peer)
			n.m.syncs.WithLabelValues("requester", "timeout").Inc()
		}
	}
	n.mu.Unlock()
	for _, p := range failed {
		n.fail(p)
	}
}

func (n *Node) maintenanceLoop() {
	defer n.wg.Done()
	every := time.Second
	if n.cfg.ReconnectTimeout/4 < every {
		every = max(n.cfg.ReconnectTimeout/4, 10*time.Millisecond)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.maintain()
	}
}

func (n *Node) maintain() {
	// Writer flag in node meta follows the Lease.
	w := n.cfg.IsWriter()
	n.mu.Lock()
	changed := w != n.metaWriter
	n.metaWriter = w
	n.mu.Unlock()
	if changed {
		if err := n.ml.UpdateNode(time.Second); err != nil {
			n.logRL(slog.LevelWarn, "update node meta", "err", err)
		}
	}

	digest := n.rep.Digest()
	now := n.cfg.Now()
	n.mu.Lock()
	for o := range digest {
		if _, ok := n.clusterSeen[o]; !ok {
			n.clusterSeen[o] = now
		}
	}
	// Reap members dead for longer than ReconnectTimeout (no more rejoins).
	var alive, dead, left float64
	versions := map[string]float64{}
	for name, ms := range n.members {
		switch {
		case ms.Alive:
			alive++
			versions[ms.Version]++
		case ms.Left:
			left++
		default:
			if now.Sub(ms.since) > n.cfg.ReconnectTimeout {
				delete(n.members, name)
				continue
			}
			dead++
		}
	}
	status := n.clusterStatusLocked()
	n.mu.Unlock()
	n.m.members.WithLabelValues("alive").Set(alive)
	n.m.members.WithLabelValues("dead").Set(dead)
	n.m.members.WithLabelValues("left").Set(left)
	n.m.setVersions(versions)

	var cAlive, cStale float64
	for c, st := range status {
		if c == n.cfg.ClusterID {
			st.Alive = true
		}
		od, inState := digest[c]
		live := inState && od.Max > od.Retired
		switch {
		case st.Alive:
			cAlive++
			n.m.clusterStale.WithLabelValues(c).Set(0)
		case !live:
			n.m.clusterStale.DeleteLabelValues(c)
		default:
			cStale++
			n.m.clusterStale.WithLabelValues(c).Set(1)
			if now.Sub(st.LastAlive) >= n.cfg.ReconnectTimeout {
				r := crdt.Retire{Origin: c, UpTo: od.Max}
				if n.applyRetire(r, true) {
					n.m.retirements.WithLabelValues("reconnect_timeout").Inc()
					n.log.Warn("cluster retired after reconnect timeout", "cluster", c,
						"last_alive", st.LastAlive, "timeout", n.cfg.ReconnectTimeout)
				}
			}
		}
	}
	n.m.clusters.WithLabelValues("alive").Set(cAlive)
	n.m.clusters.WithLabelValues("stale").Set(cStale)
}

func (n *Node) rejoinLoop() {
	n.everyJittered(n.cfg.RejoinInterval, n.rejoin)
}

// rejoin contacts (concurrently, at most 8) the seeds, re-resolved now, and
// members we know of that are not alive (dead but not left), so that a
// healed partition merges again.
func (n *Node) rejoin() {
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
	n.mu.Lock()
	for _, ms := range n.members {
		if !ms.Alive && !ms.Left && ms.Addr != "" && !aliveAddrs[ms.Addr] {
			cand = append(cand, ms.Addr)
		}
	}
	n.mu.Unlock()
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
