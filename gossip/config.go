// Package gossip connects coastguard daemons of all clusters into one
// hashicorp/memberlist mesh and replicates crdt state over it:
//
//   - fresh local writes travel (UDP) down a per-origin push tree (tree.go)
//     and tiny per-origin HEAD announcements through memberlist's broadcast
//     queue repair what the tree missed;
//     a node that hears of a newer head pulls the missing range from the node
//     that announced it (push-announce / pull-data);
//   - anti-entropy exchanges digests only (O(clusters)): memberlist push/pull
//     carries the digest, and every AntiEntropyInterval each node sends its
//     digest to one random peer; missing data travels in bounded chunks over
//     memberlist's reliable (TCP) path;
//   - partitions heal through a periodic rejoin toward known peers and seeds;
//   - a cluster departs only when it is decommissioned or when none of its
//     members has been alive for ReconnectTimeout; then a crdt.Retire is issued.
//
// The package talks to state only through the Replica interface.
package gossip

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Replica is everything gossip needs from the local replicated state, and
// all of it: gossip asserts nothing else of it. store.Replica satisfies it.
// Implementations must be safe for concurrent use. The checkpoint methods
// serve fast joins (checkpoint.go); a replica without checkpoints makes
// MakeCheckpoint and AcceptCheckpoint fail, returns 0 from CheckpointMax and
// all of ds as ready from SplitAtCheckpoints. Signing, verification and
// limits are the replica's own configuration, set by whoever builds it
// (daemon wiring) before New.
type Replica interface {
	Digest() crdt.Digest
	DeltaSince(remote crdt.Digest, maxEntries int) []crdt.Delta
	Apply(deltas ...crdt.Delta) ([]crdt.Change, error)
	ApplyRetire(r crdt.Retire) ([]crdt.Change, error)

	MakeCheckpoint() (crdt.Checkpoint, error)
	AcceptCheckpoint(cp crdt.Checkpoint) error
	CheckpointMax(origin string) crdt.Version
	SplitAtCheckpoints(ds []crdt.Delta, final bool) (ready, held []crdt.Delta)
	CheckpointStats() crdt.CheckpointStats
}

// NoCheckpoints is the checkpoint half of a Replica that keeps none: it
// builds none and accepts none, so a join verifies every entry. Embed it in
// such a replica.
type NoCheckpoints struct{}

// ErrNoCheckpoints is what NoCheckpoints answers a checkpoint request with.
var ErrNoCheckpoints = errors.New("this replica keeps no checkpoints")

// MakeCheckpoint implements Replica: there is none.
func (NoCheckpoints) MakeCheckpoint() (crdt.Checkpoint, error) {
	return crdt.Checkpoint{}, ErrNoCheckpoints
}

// AcceptCheckpoint implements Replica: refused.
func (NoCheckpoints) AcceptCheckpoint(crdt.Checkpoint) error { return ErrNoCheckpoints }

// CheckpointMax implements Replica: no origin has one.
func (NoCheckpoints) CheckpointMax(string) crdt.Version { return 0 }

// CheckpointStats implements Replica: nothing counted.
func (NoCheckpoints) CheckpointStats() crdt.CheckpointStats { return crdt.CheckpointStats{} }

// SplitAtCheckpoints implements Replica: everything is ready.
func (NoCheckpoints) SplitAtCheckpoints(ds []crdt.Delta, _ bool) (ready, held []crdt.Delta) {
	return ds, nil
}

// Profile names a memberlist timing base.
type Profile string

// The timing profiles; each starts from memberlist's DefaultWANConfig,
// DefaultLANConfig or DefaultLocalConfig respectively.
const (
	ProfileWAN   Profile = "wan"
	ProfileLAN   Profile = "lan"
	ProfileLocal Profile = "local"
)

// Config configures a Node. Zero values take the documented defaults.
type Config struct {
	// NodeName is the unique gossip identity of this daemon (pod name).
	NodeName string
	// ClusterID is the cluster this daemon belongs to (crdt origin).
	ClusterID string
	// BuildVersion is announced in the node metadata so that mixed-version
	// cluster sets are visible (coastguard_gossip_member_versions).
	BuildVersion string

	BindAddr      string // default 0.0.0.0
	BindPort      int    // default 7946
	AdvertiseAddr string
	AdvertisePort int
	// EphemeralPort binds port 0 (tests); BindPort is then ignored.
	EphemeralPort bool

	// Seeds are host or host:port; DNS names are re-resolved on every
	// join/rejoin attempt. The default port is the bind port.
	Seeds []string
	// KnownPeers are gossip addresses ("ip:port") of members a previous
	// run saw alive (the daemon remembers them in its store). They are
	// dialled with the seeds at start and, while no other member is alive,
	// on every rejoin round, so a restarted node whose seeds do not resolve
	// (DNS or Lighthouse down) still finds the mesh. A stale address costs
	// one failed dial: it joins nothing without the gossip key.
	KnownPeers []string

	// Signer, when set, signs this node's membership metadata and its
	// cluster's heartbeats. The Replica signs the own cluster's entries
	// and watermarks with the signer its builder set (SetSigner).
	Signer crdt.Signer
	// Trust, when set, checks membership metadata, heartbeats and
	// checkpoint requests (docs/SECURITY.md); nil = --insecure-gossip.
	// With Trust, Authority is required: the Replica's builder hands its
	// MayRetire to the Replica's verifier (SetVerifier) before New, so that
	// retirements without the origin's signature are applied only where
	// this node's membership view agrees.
	Trust *Trust
	// Authority is this node's retire authority; New binds it.
	Authority *Authority
	// AllowUnsignedMeta accepts alive messages whose node metadata is
	// unsigned (version 1, what coastguardd before signed metadata sends)
	// while Trust is set: for a rolling upgrade only. Even then, unsigned
	// metadata is refused for a node name that presented signed metadata,
	// and a name stays bound to its cluster (alive.go). Without Trust
	// every metadata is accepted.
	AllowUnsignedMeta bool
	// LimitLoopbackStreams applies the per-source inbound stream cap to
	// loopback sources too (tests; simulations share one loopback IP).
	LimitLoopbackStreams bool
	// Keyring is the AES keys, first one primary. Empty disables encryption
	// (only for tests and the simulator).
	Keyring [][]byte
	// Label is memberlist's packet/stream label (authenticated data).
	// Default "coastguard".
	Label string

	// Profile selects the timing base (default wan).
	Profile Profile

	// RejoinInterval is how often known-but-not-alive peers and the seeds are
	// re-joined. It bounds how long a healed partition, or a seed that was
	// not up yet at start, stays unmerged. Default by profile: 30s wan, 10s
	// lan, 2s local.
	RejoinInterval time.Duration
	// ReconnectTimeout: a cluster with no alive member for this long is
	// retired (default 24h).
	ReconnectTimeout time.Duration
	// AntiEntropyInterval: digest exchange with one random peer (default 1s,
	// jittered ±25%).
	AntiEntropyInterval time.Duration
	// OnDigest, when set, is called with every digest received from a peer
	// (anti-entropy or push/pull) and the peer's cluster, after the pulls it
	// calls for were started; and with the local digest when a peer's digest
	// sum equals ours (the peer holds exactly what we hold). The daemon's
	// empty-view gate uses it.
	OnDigest func(senderCluster string, d crdt.Digest)
	// WantDigests, when set, returns the clusters whose current digest the
	// daemon is waiting for (its empty-view gate's missing clusters). While
	// it returns any, anti-entropy ticks run at the repair pace, go to an
	// alive member of one of those clusters when there is one, and ask the
	// peer for its digest sum in return: an exchange the asker sees through
	// OnDigest. Call Node.WakeAntiEntropy when the answer becomes non-empty.
	WantDigests func() []string
	// MaxConcurrentSyncs caps concurrent outgoing and incoming catch-up syncs
	// (default 4 each).
	MaxConcurrentSyncs int
	// SyncChunkBytes bounds one reliable sync message (default 256 KiB).
	SyncChunkBytes int
	// SyncMaxBytes bounds what one sync request is answered with; the
	// requester re-requests if still behind (default 4 MiB).
	SyncMaxBytes int
	// EagerFanout is the push tree's fanout (tree.go): how many children
	// every node relays a fresh delta to (default TreeFanout, 4).
	EagerFanout int
	// PeerRateLimit / PeerRateBurst: gossip messages per second accepted per
	// sender (default 200/s, burst 400).
	PeerRateLimit float64
	PeerRateBurst int

	// IsWriter reports whether this daemon holds the cluster's Lease. Only
	// the writer publishes; standbys receive and serve anti-entropy.
	// nil means always writer.
	IsWriter func() bool

	Logger     *slog.Logger
	Registerer prometheus.Registerer

	// Transport overrides memberlist's transport (tests, fault injection:
	// a *FaultTransport is then returned by Node.Transport). It must already
	// be bound; BindAddr/BindPort are then only advertised. Nil (production):
	// netTransport (memberlist's UDP/TCP transport without its 64 KiB
	// per-packet buffers, nettransport.go) bound to BindAddr:BindPort.
	Transport memberlist.Transport

	// Now is the clock (default time.Now); tests may inject.
	Now func() time.Time

	// MemberlistHook lets tests and the simulator adjust the memberlist
	// configuration last.
	MemberlistHook func(*memberlist.Config)
}

// Wire and resource limits.
const (
	// MaxMessageBytes bounds any single gossip message we accept or send.
	MaxMessageBytes = 2 << 20
	// udpBudget is the largest user message sent over UDP (memberlist's
	// UDPBufferSize is 1400; keep room for label, crypto and compound headers).
	udpBudget = 1200
	// HeadRetransmitMult is the RetransmitMult of our head/retire queue.
	HeadRetransmitMult = 2
	// LazyHeadRetransmitMult is the RetransmitMult of the heads of deltas
	// that arrived by the push tree (tree.go), with the member count capped
	// at lazyHeadNodeCap: ⌈log10(min(N,99)+1)⌉ sends per node, 1 below 10
	// members and 2 from there on, so a node the tree missed hears a head
	// from someone within a gossip tick or two with probability ~1-e^-2
	// (86 %); the repaired node then announces with the full count. At
	// N = 300 a third lazy send per node cost ~70 B per update per node
	// (2.09× the payload instead of ~1.9×) for a repair the pull-announce
	// path already provides.
	LazyHeadRetransmitMult = 1
	lazyHeadNodeCap        = 99
	// maxSenderName bounds node names on the wire.
	maxSenderName = 256
	// maxHeadsPerMsg bounds head entries in one announcement.
	maxHeadsPerMsg = 4096
	// maxDeltasPerMsg bounds deltas in one message.
	maxDeltasPerMsg = 4096
)

func (c *Config) setDefaults() error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	if c.BindPort == 0 && !c.EphemeralPort {
		c.BindPort = 7946
	}
	if c.Label == "" {
		c.Label = "coastguard"
	}
	if c.Profile == "" {
		c.Profile = ProfileWAN
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = defaultRejoinInterval(c.Profile)
	}
	if c.ReconnectTimeout <= 0 {
		c.ReconnectTimeout = 24 * time.Hour
	}
	if c.AntiEntropyInterval <= 0 {
		c.AntiEntropyInterval = time.Second
	}
	c.setSyncDefaults()
	if c.IsWriter == nil {
		c.IsWriter = func() bool { return true }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// validate checks the fields that have no default.
func (c *Config) validate() error {
	if c.NodeName == "" {
		return errors.New("gossip: NodeName is required")
	}
	if len(c.NodeName) > maxSenderName {
		return fmt.Errorf("gossip: NodeName longer than %d bytes", maxSenderName)
	}
	if c.ClusterID == "" {
		return errors.New("gossip: ClusterID is required")
	}
	if len(c.ClusterID) > 253 {
		return errors.New("gossip: ClusterID longer than 253 bytes")
	}
	if c.Trust != nil && c.Authority == nil {
		return errors.New("gossip: Config.Trust needs Config.Authority (its MayRetire is the retire authority of the Replica's verifier)")
	}
	switch c.Profile {
	case "", ProfileWAN, ProfileLAN, ProfileLocal:
	default:
		return fmt.Errorf("gossip: unknown profile %q (want wan, lan or local)", c.Profile)
	}
	for i, k := range c.Keyring {
		switch len(k) {
		case 16, 24, 32:
		default:
			return fmt.Errorf("gossip: keyring key %d has %d bytes, want 16, 24 or 32", i, len(k))
		}
	}
	return nil
}

// setSyncDefaults defaults the sync sizes and the push and rate limits.
func (c *Config) setSyncDefaults() {
	if c.MaxConcurrentSyncs <= 0 {
		c.MaxConcurrentSyncs = 4
	}
	if c.SyncChunkBytes <= 0 {
		c.SyncChunkBytes = 256 << 10
	}
	if c.SyncChunkBytes > MaxMessageBytes/2 {
		c.SyncChunkBytes = MaxMessageBytes / 2
	}
	if c.SyncMaxBytes <= 0 {
		c.SyncMaxBytes = 4 << 20
	}
	if c.EagerFanout <= 0 {
		c.EagerFanout = TreeFanout
	}
	if c.PeerRateLimit <= 0 {
		c.PeerRateLimit = 200
	}
	if c.PeerRateBurst <= 0 {
		c.PeerRateBurst = 400
	}
}

// memberlistConfig builds the memberlist configuration from the profile.
//
// Tuning on top of memberlist's bases (see docs/ARCHITECTURE.md "Gossip"):
//   - GossipInterval 100ms for every profile: user broadcasts (our head
//     announcements) wait for the next gossip tick; an idle queue sends
//     nothing, so a short interval costs no idle bandwidth.
//   - GossipNodes 4 (wan/lan) — each tick reaches 4 peers.
//   - memberlist's own RetransmitMult stays at the base (4): its alive/dead
//     messages need it. Our own head/retire queue uses HeadRetransmitMult 2:
//     a head is sent 2*ceil(log10(N+1)) times per node (6 at N=100) —
//     heads are tiny, and anti-entropy repairs the rare miss.
//   - PushPullInterval stays at the base (60s wan, 30s lan); it carries only
//     our digest, and the own digest exchange runs every second anyway.
//
// defaultRejoinInterval: a rejoin only dials seeds that are not alive and
// members that are dead, so a short interval costs nothing while healthy.
func defaultRejoinInterval(p Profile) time.Duration {
	switch p {
	case ProfileLocal:
		return 2 * time.Second
	case ProfileLAN:
		return 10 * time.Second
	default:
		return 30 * time.Second
	}
}

func (c *Config) memberlistConfig() *memberlist.Config {
	var mc *memberlist.Config
	switch c.Profile {
	case ProfileLAN:
		mc = memberlist.DefaultLANConfig()
		mc.GossipNodes = 4
	case ProfileLocal:
		mc = memberlist.DefaultLocalConfig()
		mc.GossipNodes = 4
	default:
		mc = memberlist.DefaultWANConfig()
	}
	mc.GossipInterval = 100 * time.Millisecond
	mc.Name = c.NodeName
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	if c.EphemeralPort {
		mc.BindPort = 0
	}
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = mc.BindPort
	}
	mc.Label = c.Label
	// Deltas are msgpack and already compact; compression costs CPU and
	// makes the UDP budget unpredictable.
	mc.EnableCompression = false
	return mc
}

// MemberlistConfigForProfile returns the tuned memberlist configuration of
// a profile (timing only; identity, transport and delegates unset). The
// simulator's naive baseline uses it to compare at equal timing.
func MemberlistConfigForProfile(p Profile) *memberlist.Config {
	c := Config{Profile: p}
	if c.Profile == "" {
		c.Profile = ProfileWAN
	}
	return c.memberlistConfig()
}

// LoadKeyringFile reads a keyring file: one base64 AES key (16, 24 or 32
// bytes) per line, first line primary. Blank lines and lines starting with
// '#' are ignored.
func LoadKeyringFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip: read keyring: %w", err)
	}
	return ParseKeyring(b)
}

// ParseKeyring parses the keyring file format (see LoadKeyringFile).
func ParseKeyring(b []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("gossip: keyring line %d: not base64: %w", line, err)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("gossip: keyring line %d: key has %d bytes, want 16, 24 or 32", line, len(k))
		}
		for _, o := range keys {
			if bytes.Equal(o, k) {
				return nil, fmt.Errorf("gossip: keyring line %d: duplicate key", line)
			}
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("gossip: keyring: %w", err)
	}
	if len(keys) == 0 {
		return nil, errors.New("gossip: keyring file has no keys")
	}
	return keys, nil
}

// Configurable is the configuration a Replica's builder sets before New
// (store.Replica has it): gossip itself never configures the replica.
type Configurable interface {
	SetSigner(crdt.Signer)
	SetVerifier(crdt.Verifier, crdt.RetireAuthority)
	SetLimits(crdt.Limits)
}

// ConfigureReplica is what a builder does with its replica before New:
// limits lim, and with cfg's Signer and Trust, the replica's signer and its
// verifier under the node's retire authority (created in cfg if missing).
func ConfigureReplica(cfg *Config, rep Configurable, lim crdt.Limits) {
	rep.SetLimits(lim)
	if cfg.Signer != nil {
		rep.SetSigner(cfg.Signer)
	}
	if cfg.Trust != nil {
		if cfg.Authority == nil {
			cfg.Authority = new(Authority)
		}
		rep.SetVerifier(cfg.Trust, cfg.Authority.MayRetire)
	}
}
