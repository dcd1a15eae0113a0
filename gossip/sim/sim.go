// Package sim runs in-process gossip meshes over real loopback UDP/TCP and
// measures what the design promises: propagation latency of one update,
// bytes sent per update per node, and idle bytes per second per node as a
// function of the number of stored entries. It also runs a naive baseline
// (plain memberlist TransmitLimitedQueue broadcast of the same payload,
// every receiver re-broadcasting once) for ratio reporting.
//
// Used by `go run ./gossip/sim/cmd/gossipsim` (make bench).
package sim

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/store"
)

// Options configures one simulation run.
type Options struct {
	N       int
	Profile gossip.Profile
	// Naive runs the baseline instead of coastguard's gossip.
	Naive bool
	// Updates is how many single-entry updates node 0 publishes (0: only the
	// idle measurement).
	Updates int
	// PayloadBytes is the size of the updated pod value (default 200).
	PayloadBytes int
	// Spacing between updates (default 400ms).
	Spacing time.Duration
	// Entries preloaded identically into every replica before start
	// (coastguard mode only), spread over all N origins.
	Entries int
	// IdleWindow is the idle measurement window (default 5s).
	IdleWindow time.Duration
	// NoEncryption disables the AES keyring (default: encrypted, as deployed).
	NoEncryption bool
	// Unsigned runs coastguard members without signing keys (default:
	// signed, as deployed: every entry, state mark and membership record
	// origin-signed and verified with trust on first use).
	Unsigned bool
	// Timeout per update for the last node to receive it (default 5s).
	Timeout time.Duration
	// JoinRate paces the members' joins, per second (default 30; negative:
	// unpaced). All members share the machine's cores (2 on the bench
	// machine); 300 unpaced joins within a second set off a suspicion storm that the mesh may never leave (see
	// docs/PERFORMANCE.md), for the naive baseline as for coastguard. Real
	// daemons do not share their cores.
	JoinRate float64
	// SettleTimeout bounds the wait, after every member sees all N, for a
	// quiet failure detector (default 60s); the run proceeds after it and
	// reports Unsettled.
	SettleTimeout time.Duration
}

// Result of a run. Byte figures are per update per node (sum over all nodes
// of what they sent during the update phase, minus the idle rate over the
// same time, divided by Updates*N).
type Result struct {
	Mode string
	N    int
	// MinMembersSeen is the smallest alive-member count any member saw
	// before measuring (N when membership fully converged).
	MinMembersSeen int
	// TailMembers is how many distinct members the slowest 1 % of
	// deliveries went to; ShortViews how many members saw fewer than N
	// alive members after the updates (a tail on a few members with
	// short views is membership, not dissemination).
	TailMembers, ShortViews int
	Profile                 gossip.Profile
	Entries                 int
	Updates                 int
	Expected                int // Updates*(N-1)
	Received                int
	P50, P99                time.Duration
	Max                     time.Duration
	// PayloadBytes is the encoded size of one update as gossiped (the
	// encoded crdt.Delta in coastguard mode, the same bytes in naive mode).
	PayloadBytes int
	// AppBytesPerUpdatePerNode counts message bytes handed to memberlist.
	AppBytesPerUpdatePerNode float64
	// WireBytesPerUpdatePerNode counts UDP+TCP bytes on the wire (with
	// memberlist headers, labels and AES-GCM overhead), minus the idle rate
	// over the same time, clamped at 0.
	WireBytesPerUpdatePerNode float64
	// GrossWireBytesPerUpdatePerNode / GrossAppBytesPerUpdatePerNode: the
	// same without subtracting the idle rate (everything sent during the
	// update phase, including memberlist's probes).
	GrossWireBytesPerUpdatePerNode float64
	GrossAppBytesPerUpdatePerNode  float64
	// IdleExceededUpdate is set when the idle rate, extrapolated over the
	// update phase, was larger than what was actually sent then (an idle
	// window disturbed by load, e.g. full-digest exchanges): the net figure
	// was clamped to 0 and only the gross figure is meaningful.
	IdleExceededUpdate bool
	// IdleWireBytesPerSecPerNode / IdleAppBytesPerSecPerNode: with no
	// updates, Entries stored.
	IdleWireBytesPerSecPerNode float64
	IdleAppBytesPerSecPerNode  float64
	// FD is the failure detector's timeline over all members, one entry
	// per second from the first join to the end of the updates (At is
	// relative to the first update). It is process-wide: the runs of one
	// process must not overlap.
	FD []FDSecond `json:",omitempty"`
	// SettleWait is how long the run waited, after the mesh formed and 3s,
	// for a quiet failure detector; Unsettled is set when it never was
	// quiet within Options.SettleTimeout. UpdateFD sums the failure
	// detector's events over the update phase (all members).
	SettleWait time.Duration
	Unsettled  bool
	UpdateFD   FDSecond
}

func (o *Options) defaults() error {
	if o.N < 2 {
		return errors.New("sim: N must be >= 2")
	}
	if o.Profile == "" {
		o.Profile = gossip.ProfileWAN
	}
	if o.PayloadBytes <= 0 {
		o.PayloadBytes = 200
	}
	if o.Spacing <= 0 {
		o.Spacing = 400 * time.Millisecond
	}
	if o.IdleWindow <= 0 {
		o.IdleWindow = 5 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.JoinRate == 0 {
		o.JoinRate = 30
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = 60 * time.Second
	}
	return nil
}

// member abstracts one simulated daemon.
type member interface {
	addr() string
	join(addr string) error
	numMembers() int
	wireSent() int64
	appSent() int64
	shutdown()
}

// arrivals records, per update, each node's first receipt latency.
type arrivals struct {
	mu   sync.Mutex
	lat  map[int][]time.Duration
	who  map[int][]int // the member of each lat entry
	seen map[[2]int]bool
}

func (a *arrivals) record(node, update int, lat time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := [2]int{node, update}
	if a.seen[k] {
		return
	}
	a.seen[k] = true
	a.lat[update] = append(a.lat[update], lat)
	a.who[update] = append(a.who[update], node)
}

func (a *arrivals) count(update int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.lat[update])
}

var simKey = []byte("0123456789abcdef0123456789abcdef")

// RunPropagationSim runs one mesh of opts.N in-process members.
func RunPropagationSim(ctx context.Context, opts Options) (res Result, err error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	res = Result{Mode: "coastguard", N: opts.N, Profile: opts.Profile, Entries: opts.Entries, Updates: opts.Updates}
	if opts.Naive {
		res.Mode = "naive"
	}
	m := &simMesh{opts: opts, arr: &arrivals{lat: map[int][]time.Duration{}, who: map[int][]int{}, seen: map[[2]int]bool{}}}
	defer func() { shutdownAll(m.members, 20*time.Second) }()

	fd := startFD(installFDSink())
	defer func() { res.FD = fd.finish() }()

	if err := m.start(); err != nil {
		return res, err
	}
	if err := m.join(ctx); err != nil {
		return res, err
	}
	if err := m.awaitViews(ctx, &res); err != nil {
		return res, err
	}
	if err := settle(ctx, fd, opts, &res); err != nil {
		return res, err
	}
	m.measureIdle(ctx, &res)
	if opts.Updates == 0 {
		return res, ctx.Err()
	}
	if err := m.runUpdates(ctx, fd, &res); err != nil {
		return res, err
	}
	m.latencies(&res)
	return res, nil
}

// publisher is the writing member (member 0) of a mesh.
type publisher interface {
	publish(u int, value []byte) (int, error)
}

// simMesh is one simulated mesh: its members, the writing one, and the
// receipts of the updates.
type simMesh struct {
	opts    Options
	members []member
	writer  publisher
	arr     *arrivals
}

// start creates the mesh's opts.N members (coastguard ones preloaded with
// opts.Entries, or naive ones); member 0 is the writer.
func (m *simMesh) start() error {
	opts := m.opts
	var keys [][]byte
	if !opts.NoEncryption {
		keys = [][]byte{simKey}
	}
	var preload []crdt.Delta
	if !opts.Naive && opts.Entries > 0 {
		preload = preloadDeltas(opts.N, opts.Entries)
	}
	for i := 0; i < opts.N; i++ {
		var mb interface {
			member
			publisher
		}
		var err error
		if opts.Naive {
			mb, err = newNaiveMember(i, opts, keys, m.arr)
		} else {
			mb, err = newCGMember(i, opts, keys, m.arr, preload)
		}
		if err != nil {
			return err
		}
		if i == 0 {
			m.writer = mb
		}
		m.members = append(m.members, mb)
	}
	return nil
}

// join has each new member join a random earlier one (another one if that
// join fails: a TCP push/pull can time out on a starved machine), paced at
// opts.JoinRate.
func (m *simMesh) join(ctx context.Context) error {
	members := m.members
	joinStart := time.Now()
	for i := 1; i < len(members); i++ {
		if m.opts.JoinRate > 0 {
			sleepCtx(ctx, time.Until(joinStart.Add(time.Duration(float64(i-1)/m.opts.JoinRate*float64(time.Second)))))
		}
		var err error
		for try := 0; try < 3; try++ {
			if err = members[i].join(members[rand.IntN(i)].addr()); err == nil {
				break
			}
			slog.Warn("sim: join failed, trying another member", "member", i, "try", try+1, "err", err)
		}
		if err != nil {
			return fmt.Errorf("sim: join %d: %w", i, err)
		}
	}
	return nil
}

// awaitViews waits for every member to see all N alive. On an overloaded
// machine failure detection may flap; after 60s proceed and report it. A
// member may also miss another's alive broadcast (a gossip epidemic leaves
// a few pairs out; memberlist's periodic push/pull repairs them only after
// minutes at N = 300): every 5s, each member still short re-joins a random
// member (a push/pull, as a daemon's seed dial is), paced like the joins.
func (m *simMesh) awaitViews(ctx context.Context, res *Result) error {
	n := m.opts.N
	deadline := time.Now().Add(60 * time.Second)
	nextRefresh := time.Now().Add(5 * time.Second)
	for {
		minSeen := n
		var short []int
		for i, mb := range m.members {
			k := mb.numMembers()
			minSeen = min(minSeen, k)
			if k < n {
				short = append(short, i)
			}
		}
		res.MinMembersSeen = minSeen
		if minSeen == n || time.Now().After(deadline) {
			return nil
		}
		if time.Now().After(nextRefresh) {
			refreshViews(ctx, m.members, short, m.opts.JoinRate, deadline)
			nextRefresh = time.Now().Add(5 * time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settle lets join-time push/pulls and alive broadcasts settle: at least
// 3s, and until the failure detector has been quiet (no suspicion, no
// failed probe) for fdQuietSeconds in a row, at most opts.SettleTimeout.
func settle(ctx context.Context, fd *fdRecorder, opts Options, res *Result) error {
	sleepCtx(ctx, 3*time.Second)
	settleStart := time.Now()
	for !fd.quiet(fdQuietSeconds) {
		if time.Since(settleStart) > opts.SettleTimeout {
			res.Unsettled = true
			slog.Warn("sim: the failure detector did not settle; measuring anyway", "mode", res.Mode, "n", opts.N, "waited", opts.SettleTimeout)
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	res.SettleWait = time.Since(settleStart)
	return nil
}

// totals is the wire and coastguard bytes every member sent so far.
func (m *simMesh) totals() (wire, app int64) {
	for _, mb := range m.members {
		wire += mb.wireSent()
		app += mb.appSent()
	}
	return
}

// measureIdle measures the bytes sent per second per node over
// opts.IdleWindow without updates.
func (m *simMesh) measureIdle(ctx context.Context, res *Result) {
	w0, a0 := m.totals()
	t0 := time.Now()
	sleepCtx(ctx, m.opts.IdleWindow)
	w1, a1 := m.totals()
	idleSecs := time.Since(t0).Seconds()
	res.IdleWireBytesPerSecPerNode = float64(w1-w0) / idleSecs / float64(m.opts.N)
	res.IdleAppBytesPerSecPerNode = float64(a1-a0) / idleSecs / float64(m.opts.N)
}

// runUpdates publishes opts.Updates updates from the writer, each waited
// for (every other member, or opts.Timeout) and spaced by opts.Spacing,
// and measures the bytes sent per update per node, idle rate subtracted.
func (m *simMesh) runUpdates(ctx context.Context, fd *fdRecorder, res *Result) error {
	opts := m.opts
	value := make([]byte, opts.PayloadBytes)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	res.Expected = opts.Updates * (opts.N - 1)
	w0, a0 := m.totals()
	t0 := time.Now()
	fd.markUpdates(t0)
	for u := 0; u < opts.Updates; u++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		size, err := m.writer.publish(u, value)
		if err != nil {
			return err
		}
		res.PayloadBytes = size
		end := time.Now().Add(opts.Timeout)
		for m.arr.count(u) < opts.N-1 && time.Now().Before(end) {
			time.Sleep(2 * time.Millisecond)
		}
		sleepCtx(ctx, opts.Spacing)
	}
	w1, a1 := m.totals()
	secs := time.Since(t0).Seconds()
	res.UpdateFD = fd.sinceMark()
	var cw, ca bool
	res.WireBytesPerUpdatePerNode, res.GrossWireBytesPerUpdatePerNode, cw = NetPerUpdatePerNode(w1-w0, res.IdleWireBytesPerSecPerNode, secs, opts.N, opts.Updates)
	res.AppBytesPerUpdatePerNode, res.GrossAppBytesPerUpdatePerNode, ca = NetPerUpdatePerNode(a1-a0, res.IdleAppBytesPerSecPerNode, secs, opts.N, opts.Updates)
	res.IdleExceededUpdate = cw || ca
	return nil
}

// latencies fills in the receipts: how many, the slowest members, the
// members still short of a full view, and the latency percentiles.
func (m *simMesh) latencies(res *Result) {
	var all []time.Duration
	var who []int
	for u := 0; u < m.opts.Updates; u++ {
		all = append(all, m.arr.lat[u]...)
		who = append(who, m.arr.who[u]...)
	}
	res.Received = len(all)
	res.TailMembers = tailMembers(all, who, res.Expected)
	for _, mb := range m.members {
		if mb.numMembers() < m.opts.N {
			res.ShortViews++
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	// Missing receipts count as +Inf for the percentiles.
	pct := func(p float64) time.Duration {
		idx := int(float64(res.Expected)*p+0.999999) - 1
		if idx < 0 {
			idx = 0
		}
		if idx >= len(all) {
			return time.Duration(1<<63 - 1)
		}
		return all[idx]
	}
	res.P50, res.P99 = pct(0.50), pct(0.99)
	if len(all) > 0 {
		res.Max = all[len(all)-1]
	}
}

// refreshViews has each short member push/pull with a random other one,
// at most rate per second, until the deadline (on a starved machine one
// push/pull can take seconds, and most members may be short).
func refreshViews(ctx context.Context, members []member, short []int, rate float64, deadline time.Time) {
	for k, i := range short {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return
		}
		if k > 0 && rate > 0 {
			sleepCtx(ctx, time.Duration(float64(time.Second)/rate))
		}
		j := rand.IntN(len(members) - 1)
		if j >= i {
			j++
		}
		if err := members[i].join(members[j].addr()); err != nil {
			slog.Warn("sim: view refresh failed", "member", i, "err", err)
		}
	}
}

// tailMembers counts the distinct members among the slowest 1 % of
// expected deliveries (lat[i] went to member who[i]).
func tailMembers(lat []time.Duration, who []int, expected int) int {
	idx := make([]int, len(lat))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return lat[idx[a]] > lat[idx[b]] })
	tail := max(expected/100, 1) - (expected - len(lat)) // missing ones are the slowest
	distinct := map[int]bool{}
	for _, i := range idx[:max(min(tail, len(idx)), 0)] {
		distinct[who[i]] = true
	}
	return len(distinct)
}

// NetPerUpdatePerNode turns the bytes all n nodes sent during an update
// phase of secs seconds into bytes per update per node: gross without and
// net with the idle rate (per second per node) subtracted. The net figure is
// clamped at 0 (clamped=true) when the extrapolated idle traffic exceeds
// what was sent: a noisy idle window must not produce a negative cost.
func NetPerUpdatePerNode(sent int64, idlePerSecPerNode, secs float64, n, updates int) (net, gross float64, clamped bool) {
	div := float64(updates * n)
	if div <= 0 {
		return 0, 0, false
	}
	gross = float64(sent) / div
	net = (float64(sent) - idlePerSecPerNode*secs*float64(n)) / div
	if net < 0 {
		return 0, gross, true
	}
	return net, gross, false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// preloadDeltas builds entries spread over N origins, as deltas every
// replica applies before the mesh starts (identical state, no sync).
func preloadDeltas(n, entries int) []crdt.Delta {
	var out []crdt.Delta
	per := entries / n
	extra := entries % n
	for o := 0; o < n; o++ {
		s := crdt.NewState(origin(o))
		_ = s.SetEpoch(s.MinEpoch())
		cnt := per
		if o < extra {
			cnt++
		}
		for i := 0; i < cnt; i++ {
			v, _ := crdt.EncodeValue(&crdt.PodValue{IPs: []string{fmt.Sprintf("10.%d.%d.%d", o%256, i/256%256, i%256)}})
			if _, _, err := s.Write(crdt.KindPod, fmt.Sprintf("ns/pod-%d", i), v, false, 1); err != nil {
				panic(err)
			}
		}
		out = append(out, s.DeltaSince(crdt.Digest{}, 0)...)
	}
	return out
}

func origin(i int) string { return fmt.Sprintf("c%03d", i) }

// shutdownAll stops every member concurrently and gives up after timeout:
// a member stuck in its transport's shutdown (seen once at N = 300 on a
// starved machine) must not hold back the result of the run.
func shutdownAll(members []member, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.shutdown()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		slog.Warn("sim: some members did not shut down in time; leaving them", "timeout", timeout)
	}
}

// ---- coastguard member ----

type cgMember struct {
	idx  int
	node *gossip.Node
	rep  *store.Replica
}

// memberAddr is every member's loopback address. All members share it:
// giving each its own (127.1.x.y, with TCP streams dialled from it) was
// tried on 2026-11-26 and made the N = 300 LAN mesh much less stable on
// this 2-core machine, for the naive baseline too (p99 23.6 s, runs killed
// at their deadline); one shared address caps every member's concurrent
// inbound streams at the guard's per-IP limit (4), which throttles
// memberlist's join and push/pull storms. A failed join is retried with
// another member instead.
const memberAddr = "127.0.0.1"

func newCGMember(i int, opts Options, keys [][]byte, arr *arrivals, preload []crdt.Delta) (*cgMember, error) {
	inner, err := gossip.NewLoopbackTransport(memberAddr)
	if err != nil {
		return nil, err
	}
	// The in-memory replica logs its load at INFO like a real store; 300
	// of them would bury a failing child's error, so they stay quiet.
	rep, err := store.NewReplica(store.NewMemBackend(), origin(i), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if len(preload) > 0 {
		if _, err := rep.Apply(preload...); err != nil {
			return nil, fmt.Errorf("sim: preload: %w", err)
		}
		if _, err := rep.BumpEpoch(); err != nil {
			return nil, err
		}
	}
	rep.Subscribe(func(chs []crdt.Change) { // own writes too: node 0 skips
		now := time.Now().UnixNano()
		for _, ch := range chs {
			if ch.New == nil || i == 0 || ch.Key.Origin != origin(0) || !strings.HasPrefix(ch.Key.Name, "sim/u-") {
				continue
			}
			var u int
			if _, err := fmt.Sscanf(ch.Key.Name, "sim/u-%d", &u); err == nil {
				arr.record(i, u, time.Duration(now-ch.New.Stamp))
			}
		}
	})
	cfg := gossip.Config{
		NodeName:      fmt.Sprintf("n%03d", i),
		ClusterID:     origin(i),
		BindAddr:      memberAddr,
		EphemeralPort: true,
		Keyring:       keys,
		Profile:       opts.Profile,
		Transport:     gossip.NewFaultTransport(inner),
	}
	if !opts.Unsigned {
		if err := signMember(&cfg, i); err != nil {
			return nil, err
		}
	}
	gossip.ConfigureReplica(&cfg, rep, crdt.DefaultLimits())
	n, err := gossip.New(cfg, rep)
	if err != nil {
		return nil, err
	}
	return &cgMember{idx: i, node: n, rep: rep}, nil
}

// signMember gives member i its cluster's signing key (derived from i, so
// runs are repeatable) and a trust-on-first-use verifier, as a daemon runs
// by default: entries, state marks and membership metadata are signed and
// checked on every path.
func signMember(cfg *gossip.Config, i int) error {
	seed := sha256.Sum256([]byte("coastguard-sim-" + origin(i)))
	sg := gossip.NewSigner(ed25519.NewKeyFromSeed(seed[:]))
	tr, err := gossip.NewTrust(nil, false, origin(i), sg.PublicKey(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	cfg.Signer, cfg.Trust = sg, tr
	return nil
}

func (m *cgMember) publish(u int, value []byte) (int, error) {
	v, err := crdt.EncodeValue(&crdt.PodValue{IPs: []string{"10.9.9.9"}, Labels: map[string]string{"pad": string(value)}})
	if err != nil {
		return 0, err
	}
	d, err := m.rep.Write(crdt.KindPod, fmt.Sprintf("sim/u-%d", u), v, false)
	if err != nil {
		return 0, err
	}
	b, err := crdt.EncodeDelta(d)
	if err != nil {
		return 0, err
	}
	return len(b), m.node.Publish(d)
}

func (m *cgMember) addr() string { return m.node.Addr() }
func (m *cgMember) join(a string) error {
	_, err := m.node.Join(a)
	return err
}

// numMembers is memberlist's alive count (a counter under its read lock):
// polling Members() (a sorted copy of every member) for all N members every
// 50 ms was O(N² log N) per poll and crowded out the mesh at N = 300.
func (m *cgMember) numMembers() int { return m.node.NumAlive() }
func (m *cgMember) wireSent() int64 { return m.node.Transport().SentBytes() }
func (m *cgMember) appSent() int64  { return m.node.Stats().BytesOut }
func (m *cgMember) shutdown()       { _ = m.node.Shutdown() }

// ---- naive baseline ----

// naiveMember is plain memberlist with a TransmitLimitedQueue: the writer
// queues the update, every receiver re-queues it once on first receipt.
// Same timing as coastguard's profile but memberlist's default
// RetransmitMult of 4.
type naiveMember struct {
	idx   int
	ml    *memberlist.Memberlist
	tr    *gossip.FaultTransport
	queue *memberlist.TransmitLimitedQueue
	arr   *arrivals

	mu       sync.Mutex
	seen     map[uint32]bool
	appBytes int64
}

type uniqueBroadcast []byte

func (b uniqueBroadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b uniqueBroadcast) Message() []byte                       { return b }
func (b uniqueBroadcast) Finished()                             {}
func (b uniqueBroadcast) UniqueBroadcast()                      {}

func newNaiveMember(i int, opts Options, keys [][]byte, arr *arrivals) (*naiveMember, error) {
	inner, err := gossip.NewLoopbackTransport(memberAddr)
	if err != nil {
		return nil, err
	}
	m := &naiveMember{idx: i, arr: arr, seen: map[uint32]bool{}, tr: gossip.NewFaultTransport(inner)}
	mc := gossip.MemberlistConfigForProfile(opts.Profile)
	mc.RetransmitMult = 4
	mc.Name = fmt.Sprintf("n%03d", i)
	mc.BindAddr = memberAddr
	mc.BindPort = 0
	mc.AdvertisePort = 0
	mc.Transport = m.tr
	mc.Logger = log.New(io.Discard, "", 0)
	mc.Delegate = m
	if len(keys) > 0 {
		kr, err := memberlist.NewKeyring(nil, keys[0])
		if err != nil {
			return nil, err
		}
		mc.Keyring = kr
	}
	m.queue = &memberlist.TransmitLimitedQueue{NumNodes: func() int { return m.ml.NumMembers() }, RetransmitMult: mc.RetransmitMult}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, err
	}
	m.ml = ml
	return m, nil
}

// message: u32 update | i64 stamp | payload
func (m *naiveMember) publish(u int, value []byte) (int, error) {
	v, err := crdt.EncodeValue(&crdt.PodValue{IPs: []string{"10.9.9.9"}, Labels: map[string]string{"pad": string(value)}})
	if err != nil {
		return 0, err
	}
	s := crdt.NewState(origin(0))
	_ = s.SetEpoch(1)
	d, _, err := s.Write(crdt.KindPod, fmt.Sprintf("sim/u-%d", u), v, false, time.Now().UnixNano())
	if err != nil {
		return 0, err
	}
	payload, err := crdt.EncodeDelta(d)
	if err != nil {
		return 0, err
	}
	msg := make([]byte, 12, 12+len(payload))
	binary.BigEndian.PutUint32(msg, uint32(u))
	binary.BigEndian.PutUint64(msg[4:], uint64(time.Now().UnixNano()))
	msg = append(msg, payload...)
	m.mu.Lock()
	m.seen[uint32(u)] = true
	m.mu.Unlock()
	m.queue.QueueBroadcast(uniqueBroadcast(msg))
	return len(payload), nil
}

func (m *naiveMember) NodeMeta(int) []byte { return nil }
func (m *naiveMember) NotifyMsg(b []byte) {
	if len(b) < 12 {
		return
	}
	u := binary.BigEndian.Uint32(b)
	stamp := int64(binary.BigEndian.Uint64(b[4:]))
	m.mu.Lock()
	first := !m.seen[u]
	m.seen[u] = true
	m.mu.Unlock()
	if !first {
		return
	}
	if _, err := crdt.DecodeDelta(b[12:]); err != nil {
		return
	}
	m.arr.record(m.idx, int(u), time.Duration(time.Now().UnixNano()-stamp))
	cp := append([]byte(nil), b...)
	m.queue.QueueBroadcast(uniqueBroadcast(cp))
}
func (m *naiveMember) GetBroadcasts(overhead, limit int) [][]byte {
	msgs := m.queue.GetBroadcasts(overhead, limit)
	m.mu.Lock()
	for _, b := range msgs {
		m.appBytes += int64(len(b))
	}
	m.mu.Unlock()
	return msgs
}
func (m *naiveMember) LocalState(bool) []byte        { return nil }
func (m *naiveMember) MergeRemoteState([]byte, bool) {}
func (m *naiveMember) addr() string                  { return m.ml.LocalNode().Address() }
func (m *naiveMember) numMembers() int               { return m.ml.NumMembers() }
func (m *naiveMember) wireSent() int64               { return m.tr.SentBytes() }
func (m *naiveMember) shutdown()                     { _ = m.ml.Shutdown() }
func (m *naiveMember) join(a string) error {
	_, err := m.ml.Join([]string{a})
	return err
}
func (m *naiveMember) appSentBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.appBytes
}

var _ member = (*cgMember)(nil)

func (m *naiveMember) appSent() int64 { return m.appSentBytes() }
