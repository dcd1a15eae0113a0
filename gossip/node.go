package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"golang.org/x/time/rate"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// ErrNotWriter is returned by Publish on a standby (not the Lease holder).
var ErrNotWriter = errors.New("gossip: this daemon is not its cluster's writer")

// ErrForeignOrigin is returned by Publish for a delta of another cluster.
var ErrForeignOrigin = errors.New("gossip: can only publish deltas of the own cluster")

// MemberInfo describes one gossip member as seen locally.
type MemberInfo struct {
	Name    string
	Cluster string
	Writer  bool
	Addr    string
	Alive   bool
	Left    bool
	// Version is the member's coastguardd build version from its gossip
	// metadata; empty for daemons that do not announce it.
	Version string
}

// ClusterStatus is the local view of one cluster's liveness.
type ClusterStatus struct {
	Alive        bool
	AliveMembers int
	// LastAlive is when a member of the cluster was last seen alive.
	LastAlive time.Time
	// LastBeat is when the cluster's last fresh origin-signed heartbeat
	// was received (zero: none since this node started, beat.go).
	LastBeat time.Time
	// Beating: a heartbeat of the cluster arrived within three heartbeat
	// periods. Unlike Alive (memberlist's view, which a gossip key holder
	// can forge), only the cluster itself can make it true.
	Beating bool
}

type memberState struct {
	MemberInfo
	since time.Time
	// node is our own copy of memberlist's node, taken in the event
	// callback (which memberlist calls with its node lock held). The
	// pointers memberlist.Members() returns alias memberlist's internal
	// state, which its packet handler rewrites on every alive message: a
	// data race (seen under -race) when we read Addr/Port to send.
	node *memberlist.Node
}

type inMsg struct {
	m     *message
	size  int
	state bool // from memberlist push/pull (MergeRemoteState)
}

// Node is one member of the coastguard gossip mesh. It composes parts that
// each guard their own state: members (membership), syncs (pulls in flight,
// backoff, anti-entropy pacing), limits (per-sender rate limits), forwarded
// (push-tree dedupe) and the reconnect-timeout retirer.
type Node struct {
	cfg     Config
	rep     Replica
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring
	queue   *memberlist.TransmitLimitedQueue
	// lazy holds the heads of deltas that arrived by the push tree: sent
	// once, to one peer (tree.go)
	lazy *memberlist.TransmitLimitedQueue
	// fault is Config.Transport when it is a FaultTransport (tests and the
	// simulator); nil in production.
	fault *FaultTransport
	// guard is the inbound stream guard in front of the transport.
	guard  *guardTransport
	m      *metrics
	log    *slog.Logger
	logLim *rate.Limiter
	// seedBackoff spaces out lookups of unresolvable seeds.
	seedBackoff *seedBackoff

	members *members
	auth    *memberAuth // alive message checks (alive.go)
	beats   *beats      // origin-signed heartbeats (beat.go)
	// quiet stops this node's heartbeats (tests: a cluster that stopped
	// beating while its members stay alive).
	quiet     atomic.Bool
	syncs     *syncer
	limits    *senderLimits
	forwarded *forwardLog
	retirer   *retirer
	cps       *checkpoints // fast-join checkpoints (checkpoint.go)

	inbox    chan inMsg
	serveSem chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	started  time.Time
	addr     string

	statBytesOut, statBytesIn, statMsgsOut atomic.Int64
}

// Stats are cumulative counters of coastguard gossip messages (the
// application layer: without memberlist's own probes, headers and crypto).
type Stats struct {
	BytesOut, BytesIn, MessagesOut int64
}

// Stats returns cumulative message counters.
func (n *Node) Stats() Stats {
	return Stats{BytesOut: n.statBytesOut.Load(), BytesIn: n.statBytesIn.Load(), MessagesOut: n.statMsgsOut.Load()}
}

// New creates the memberlist, starts the node's loops and tries to join the
// seeds once (failures are retried by the rejoin loop).
func New(cfg Config, rep Replica) (*Node, error) {
	if rep == nil {
		return nil, errors.New("gossip: nil Replica")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	n, err := newNode(cfg, rep)
	if err != nil {
		return nil, err
	}
	if cfg.Authority != nil {
		cfg.Authority.n.Store(n)
	}
	mc := cfg.memberlistConfig()
	if err := n.setupKeyring(mc); err != nil {
		return nil, err
	}
	if err := n.setupTransport(mc); err != nil {
		return nil, err
	}
	mc.Logger = log.New(&mlLogWriter{n: n}, "", 0)
	mc.Delegate = (*delegate)(n)
	mc.Events = (*events)(n)
	mc.Alive = (*aliveDelegate)(n)
	if cfg.MemberlistHook != nil {
		cfg.MemberlistHook(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = mc.Transport.Shutdown()
		return nil, fmt.Errorf("gossip: memberlist: %w", err)
	}
	n.ml = ml
	ln := ml.LocalNode()
	n.addr = net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))
	n.start()
	return n, nil
}

// newNode builds the node and its parts (no I/O yet).
func newNode(cfg Config, rep Replica) (*Node, error) {
	n := &Node{
		cfg:         cfg,
		rep:         rep,
		log:         cfg.Logger.With("component", "gossip", "node", cfg.NodeName),
		logLim:      rate.NewLimiter(2, 20),
		seedBackoff: newSeedBackoff(cfg.RejoinInterval, 5*time.Minute),
		members:     newMembers(cfg.NodeName, cfg.IsWriter()),
		auth:        newMemberAuth(cfg.Trust, cfg.AllowUnsignedMeta),
		beats:       newBeats(cfg.ClusterID),
		syncs:       newSyncer(cfg.MaxConcurrentSyncs),
		limits:      newSenderLimits(cfg.PeerRateLimit, cfg.PeerRateBurst),
		forwarded:   newForwardLog(),
		inbox:       make(chan inMsg, 4096),
		serveSem:    make(chan struct{}, cfg.MaxConcurrentSyncs+16),
		stop:        make(chan struct{}),
		started:     cfg.Now(),
	}
	n.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       n.members.numAlive,
		RetransmitMult: HeadRetransmitMult,
	}
	n.lazy = &memberlist.TransmitLimitedQueue{RetransmitMult: LazyHeadRetransmitMult,
		NumNodes: func() int { return min(n.members.numAlive(), lazyHeadNodeCap) }}
	m, err := newMetrics(cfg.Registerer, func() float64 { return float64(n.queue.NumQueued() + n.lazy.NumQueued()) })
	if err != nil {
		return nil, err
	}
	n.m = m
	if n.cps, err = newCheckpoints(cfg.Registerer, rep); err != nil {
		return nil, err
	}
	n.retirer = &retirer{
		self: cfg.ClusterID, timeout: cfg.ReconnectTimeout, now: cfg.Now,
		digest: rep.Digest,
		status: func(d crdt.Digest, now time.Time) map[string]ClusterStatus {
			return n.beats.overlay(n.members.noticeOrigins(d, now), now, beatStale(cfg.ReconnectTimeout))
		},
		retire: func(r crdt.Retire) bool { return n.applyRetire(r, true) },
		m:      n.m, log: n.log,
	}
	return n, nil
}

// setupKeyring turns Config.Keyring into memberlist's encryption.
func (n *Node) setupKeyring(mc *memberlist.Config) error {
	if len(n.cfg.Keyring) == 0 {
		return nil
	}
	kr, err := memberlist.NewKeyring(n.cfg.Keyring[1:], n.cfg.Keyring[0])
	if err != nil {
		return fmt.Errorf("gossip: keyring: %w", err)
	}
	n.keyring = kr
	mc.Keyring = kr
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	return nil
}

// setupTransport binds the transport (netTransport, memberlist's UDP/TCP
// transport without its per-packet garbage, unless Config.Transport
// overrides it) behind the inbound stream guard.
func (n *Node) setupTransport(mc *memberlist.Config) error {
	inner := n.cfg.Transport
	if inner == nil {
		nt, err := newNetTransport(mc.BindAddr, mc.BindPort, log.New(&mlLogWriter{n: n}, "", 0))
		if err != nil {
			return fmt.Errorf("gossip: bind %s:%d: %w", mc.BindAddr, mc.BindPort, err)
		}
		inner = nt
	}
	if ft, ok := inner.(*FaultTransport); ok {
		n.fault = ft
	}
	check := frameCheck{label: mc.Label, inc: newIncarnations(n.cfg.Now)}
	if n.keyring != nil {
		check.keys = n.keyring.GetKeys
	}
	guard := newGuardTransport(nodeAware(inner), check, func(reason, from string, err error) {
		n.drop(reason, "inbound message refused", "from", from, "err", err)
	})
	guard.limitLoopback = n.cfg.LimitLoopbackStreams
	guard.known = n.members.knownIP
	guard.rate = newSenderLimits(n.cfg.PeerRateLimit, n.cfg.PeerRateBurst)
	n.guard = guard
	mc.Transport = guard
	return nil
}

// start runs the node's loops and joins the seeds once.
func (n *Node) start() {
	n.wg.Add(6)
	go n.worker()
	go n.every(beatEvery(n.cfg.ReconnectTimeout), n.beatRound)
	go n.antiEntropyLoop()
	go n.every(maintenanceEvery(n.cfg.ReconnectTimeout), n.maintain)
	go n.every(retireEvery(n.cfg.ReconnectTimeout), n.retirer.round)
	go n.rejoinLoop()
	if addrs := append(n.resolveSeeds(), n.knownPeers(nil)...); len(addrs) > 0 {
		if _, err := n.joinAddrs(addrs); err != nil {
			n.log.Warn("initial join failed; will retry", "err", err)
		}
	}
}

// Addr returns this node's advertised "ip:port" (read once at start:
// memberlist rewrites its own node record on every meta update).
func (n *Node) Addr() string { return n.addr }

// Name returns the node name.
func (n *Node) Name() string { return n.cfg.NodeName }

// Transport returns the FaultTransport given as Config.Transport (tests and
// the simulator inject faults and count wire bytes through it), or nil: a
// production node runs on a plain transport.
func (n *Node) Transport() *FaultTransport { return n.fault }

// Join contacts the given addresses ("host:port"); DNS names are resolved now.
func (n *Node) Join(addrs ...string) (int, error) { return n.joinAddrs(addrs) }

func (n *Node) joinAddrs(addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, nil
	}
	return n.ml.Join(addrs)
}

// NumAlive returns memberlist's count of alive members (including self).
func (n *Node) NumAlive() int { return n.ml.NumMembers() }

// Members returns every member ever seen (alive or not), sorted by name.
func (n *Node) Members() []MemberInfo { return n.members.list() }

// Clusters returns the liveness of every cluster known from membership or
// state.
func (n *Node) Clusters() map[string]ClusterStatus {
	now := n.cfg.Now()
	return n.beats.overlay(n.members.clusters(now), now, beatStale(n.cfg.ReconnectTimeout))
}

// Publish disseminates fresh local deltas (already applied to the Replica)
// of the own cluster: pushed down the origin's push tree (tree.go: the root
// and our own children) when they fit one UDP packet, and announced by a
// head broadcast so a node the tree missed pulls them from a holder.
func (n *Node) Publish(deltas ...crdt.Delta) error {
	if !n.cfg.IsWriter() {
		return ErrNotWriter
	}
	for _, d := range deltas {
		if d.Origin != n.cfg.ClusterID {
			return ErrForeignOrigin
		}
	}
	if len(deltas) == 0 {
		return nil
	}
	var encoded [][]byte
	size := 0
	for _, d := range deltas {
		chunks, err := encodeDeltaChunks(d, udpBudget)
		if err != nil {
			return fmt.Errorf("gossip: publish: %w", err)
		}
		for _, c := range chunks {
			encoded = append(encoded, c)
			size += len(c) + 3
		}
	}
	if size+len(n.cfg.NodeName)+8 <= udpBudget {
		msg := encodeDeltaMsg(msgPush, n.cfg.NodeName, 0, false, encoded)
		for _, peer := range n.treePeers(n.cfg.ClusterID, "", true) {
			n.sendBestEffort(peer, msg, msgPush)
			n.m.deltas.WithLabelValues("out", "push").Add(float64(len(deltas)))
		}
	}
	n.syncs.applied(n.cfg.Now())
	n.announce(n.cfg.ClusterID, false)
	return nil
}

// announce queues a head broadcast for origin with the local watermark:
// sent HeadRetransmitMult·⌈log10(N+1)⌉ times, or, lazy (a node that got
// the delta by the push tree: its neighbours almost surely got it too, and
// its heads only repair where the tree broke), LazyHeadRetransmitMult·….
func (n *Node) announce(origin string, lazy bool) {
	od, ok := n.rep.Digest()[origin]
	if !ok || od.Max == 0 {
		return
	}
	msg := encodeHeads(n.cfg.NodeName, []Head{{Origin: origin, Max: od.Max}})
	q := n.queue
	if lazy {
		q = n.lazy
	}
	q.QueueBroadcast(&namedBroadcast{name: "h/" + origin, msg: msg})
	q.Prune(maxQueued)
}

const maxQueued = 8192

// PublishRetire disseminates a retirement the local replica has already
// applied (for example the writer's seal of its prior epochs after a
// takeover). Anti-entropy carries the watermark to anyone who misses it.
func (n *Node) PublishRetire(r crdt.Retire) {
	if r.UpTo == 0 {
		return
	}
	n.broadcastRetire(r)
}

func (n *Node) broadcastRetire(r crdt.Retire) {
	msg := encodeRetires(n.cfg.NodeName, []crdt.Retire{r})
	n.queue.QueueBroadcast(&namedBroadcast{name: "r/" + r.Origin, msg: msg})
	n.queue.Prune(maxQueued)
}

// Decommission disseminates the retirement of the own cluster, which the
// caller has already built, signed and applied to the local replica (a
// zero r: nothing to retire), and leaves the mesh: r is sent reliably to up
// to 8 peers and queued for gossip, and then the node leaves and shuts
// down. Anti-entropy carries the Retired watermark to anyone who missed it.
func (n *Node) Decommission(ctx context.Context, r crdt.Retire) error {
	if r.UpTo > 0 {
		if r.Origin != n.cfg.ClusterID {
			return fmt.Errorf("gossip: decommission: a retirement of %q, not of the own cluster %q", r.Origin, n.cfg.ClusterID)
		}
		n.m.retirements.WithLabelValues("decommission").Inc()
		msg := encodeRetires(n.cfg.NodeName, []crdt.Retire{r})
		for _, p := range n.randomPeers(8, "") {
			n.sendReliable(p, msg, msgRetire)
		}
		n.broadcastRetire(r)
		// Let the queue drain (bounded by ctx).
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
	wait:
		for n.queue.NumQueued()+n.lazy.NumQueued() > 0 {
			select {
			case <-ctx.Done():
				break wait
			case <-t.C:
			}
		}
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d > 0 && d < timeout {
			timeout = d
		}
	}
	n.leave(timeout)
	return n.Shutdown()
}

// leave marks this node as leaving in its meta (so peers do not try to
// rejoin it) and then leaves memberlist gracefully.
func (n *Node) leave(timeout time.Duration) {
	n.members.setLeaving()
	if err := n.ml.UpdateNode(timeout / 2); err != nil {
		n.log.Debug("leave: update meta", "err", err)
	}
	if err := n.ml.Leave(timeout); err != nil {
		n.log.Warn("leave", "err", err)
	}
}

// Leave announces a graceful departure of this daemon (a pod stop: NOT a
// cluster departure) and shuts down.
func (n *Node) Leave(timeout time.Duration) error {
	n.leave(timeout)
	return n.Shutdown()
}

// Shutdown stops the node without a leave message (like a crash/restart).
func (n *Node) Shutdown() error {
	var err error
	n.stopOnce.Do(func() {
		n.syncs.close()
		close(n.stop)
		err = n.ml.Shutdown()
		n.wg.Wait()
	})
	return err
}

// InstallKey adds a key to the keyring (rotation step 1, on every node).
func (n *Node) InstallKey(k []byte) error {
	if n.keyring == nil {
		return errors.New("gossip: encryption is disabled")
	}
	return n.keyring.AddKey(k)
}

// UseKey makes an installed key primary (step 2, after all nodes installed it).
func (n *Node) UseKey(k []byte) error {
	if n.keyring == nil {
		return errors.New("gossip: encryption is disabled")
	}
	return n.keyring.UseKey(k)
}

// RemoveKey removes a non-primary key (step 3, after all nodes use the new one).
func (n *Node) RemoveKey(k []byte) error {
	if n.keyring == nil {
		return errors.New("gossip: encryption is disabled")
	}
	return n.keyring.RemoveKey(k)
}

// Keys returns the installed keys, primary first.
func (n *Node) Keys() [][]byte {
	if n.keyring == nil {
		return nil
	}
	p := n.keyring.GetPrimaryKey()
	out := [][]byte{p}
	for _, k := range n.keyring.GetKeys() {
		if string(k) != string(p) {
			out = append(out, k)
		}
	}
	return out
}

// ---- peers and sending ----

// randomPeers picks up to k alive members other than self (and other than
// exclude), uniformly.
func (n *Node) randomPeers(k int, exclude string) []*memberlist.Node {
	cand := n.alivePeers(exclude)
	rand.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	if len(cand) > k {
		cand = cand[:k]
	}
	return cand
}

// alivePeers returns copies of the alive members other than self and
// exclude.
func (n *Node) alivePeers(exclude string) []*memberlist.Node { return n.members.alivePeers(exclude) }

// memberNode returns the alive member name's node, or nil.
func (n *Node) memberNode(name string) *memberlist.Node { return n.members.node(name) }

func (n *Node) sendBestEffort(to *memberlist.Node, msg []byte, t msgType) bool {
	if err := n.ml.SendBestEffort(to, msg); err != nil {
		n.logRL(slog.LevelDebug, "send failed", "to", to.Name, "type", t.String(), "err", err)
		return false
	}
	n.countOut(len(msg), t)
	return true
}

func (n *Node) sendReliable(to *memberlist.Node, msg []byte, t msgType) bool {
	if err := n.ml.SendReliable(to, msg); err != nil {
		n.logRL(slog.LevelDebug, "reliable send failed", "to", to.Name, "type", t.String(), "err", err)
		return false
	}
	n.countOut(len(msg), t)
	return true
}

// send picks UDP for small messages and TCP otherwise.
func (n *Node) send(to *memberlist.Node, msg []byte, t msgType) bool {
	if len(msg) <= udpBudget {
		return n.sendBestEffort(to, msg, t)
	}
	return n.sendReliable(to, msg, t)
}

func (n *Node) countOut(size int, t msgType) {
	n.statBytesOut.Add(int64(size))
	n.statMsgsOut.Add(1)
	n.m.bytes.WithLabelValues("out").Add(float64(size))
	n.m.messages.WithLabelValues("out", t.String()).Inc()
}

// dropErr counts a rejection by the Replica under its trust reason
// (bad_signature, key_mismatch, retire_refused, ...) or as invalid.
func (n *Node) dropErr(err error, msg string, args ...any) {
	reason := crdt.TrustReason(err)
	if reason == "" {
		reason = dropInvalid
	}
	n.drop(reason, msg, append(args, "err", err)...)
}

func (n *Node) drop(reason string, msg string, args ...any) {
	n.m.dropped.WithLabelValues(reason).Inc()
	n.logRL(slog.LevelWarn, msg, append(args, "reason", reason)...)
}

// logRL logs at most ~2 lines/s (burst 20) at Warn and above.
func (n *Node) logRL(level slog.Level, msg string, args ...any) {
	if level >= slog.LevelWarn && !n.logLim.Allow() {
		return
	}
	n.log.Log(context.Background(), level, msg, args...)
}

// ---- named broadcast ----

type namedBroadcast struct {
	name string
	msg  []byte
}

func (b *namedBroadcast) Invalidates(o memberlist.Broadcast) bool {
	nb, ok := o.(memberlist.NamedBroadcast)
	return ok && nb.Name() == b.name
}
func (b *namedBroadcast) Name() string    { return b.name }
func (b *namedBroadcast) Message() []byte { return b.msg }
func (b *namedBroadcast) Finished()       {}

// ---- helpers ----

// encodeDeltaChunks encodes d, splitting it at entry boundaries so that each
// piece encodes to at most maxBytes when possible. Each piece is a valid
// contiguous delta (From, To] and the pieces in order are a valid stream.
func encodeDeltaChunks(d crdt.Delta, maxBytes int) ([][]byte, error) {
	b, err := crdt.EncodeDelta(d)
	if err != nil {
		return nil, err
	}
	// Reset streams are cut by the crdt itself (Final marks their end):
	// never re-split them.
	if len(b) <= maxBytes || len(d.Entries) <= 1 || d.Reset || d.Final {
		if len(b) > MaxMessageBytes-1024 {
			return nil, fmt.Errorf("delta of %s too large (%d bytes)", d.Origin, len(b))
		}
		return [][]byte{b}, nil
	}
	mid := len(d.Entries) / 2
	left := d
	left.Entries = d.Entries[:mid]
	left.To = d.Entries[mid-1].Version
	right := d
	right.Entries = d.Entries[mid:]
	right.From = left.To
	right.Reset = false
	l, err := encodeDeltaChunks(left, maxBytes)
	if err != nil {
		return nil, err
	}
	r, err := encodeDeltaChunks(right, maxBytes)
	if err != nil {
		return nil, err
	}
	return append(l, r...), nil
}

// ---- memberlist log adapter: counts drops by reason ----

type mlLogWriter struct{ n *Node }

func (w *mlLogWriter) Write(p []byte) (int, error) {
	line := string(p)
	level := slog.LevelDebug
	switch {
	case contains(line, "[ERR]"), contains(line, "[ERROR]"):
		level = slog.LevelError
	case contains(line, "[WARN]"):
		level = slog.LevelWarn
	case contains(line, "[INFO]"):
		level = slog.LevelInfo
	}
	reason := ""
	switch {
	case containsFold(line, "decrypt"), containsFold(line, "no installed keys"):
		reason = dropDecrypt
	case contains(line, "label"):
		reason = dropLabel
	case contains(line, "invalid checksum"):
		reason = dropChecksum
	case contains(line, "handler queue full"):
		reason = dropQueueFull
	case contains(line, "Remote node state size"):
		reason = dropStateTooLarge
	case contains(line, "Failed to decode"), contains(line, "missing message type"),
		contains(line, "not supported"), contains(line, "invalid msgType"),
		contains(line, "Failed to receive user message"):
		reason = dropMemberlist
	}
	if w.n.m != nil && reason != "" {
		w.n.m.dropped.WithLabelValues(reason).Inc()
	}
	if level == slog.LevelDebug && !w.n.log.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	w.n.logRL(level, "memberlist", "msg", trimNL(line))
	return len(p), nil
}

var _ io.Writer = (*mlLogWriter)(nil)
