package daemon

import (
	"crypto/ed25519"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// Options configure a Daemon.
type Options struct {
	ClusterID string
	NodeName  string
	Namespace string // of the Lease

	Client  kubernetes.Interface
	Dynamic dynamic.Interface

	DataDir string
	// Gossip is completed by the daemon (NodeName, ClusterID, IsWriter,
	// Logger, Registerer).
	Gossip gossip.Config
	// AdvertiseGlobalIPOf (--advertise-global-ip) names this daemon's pod:
	// under Globalnet the daemon waits for the pod's GlobalIngressIP (in
	// Namespace) and advertises it for gossip instead of Gossip.AdvertiseAddr
	// (advertise.go). Empty: off.
	AdvertiseGlobalIPOf string

	Debounce         time.Duration
	MaxDelay         time.Duration
	LeaseDuration    time.Duration
	TombstoneGCAfter time.Duration // 0 = never collect

	ClusterInfo kube.ClusterInfo
	// Submariner, when set, supplies ClusterInfo live (CIDRs, Globalnet
	// egress IPs); the daemon starts it and republishes on changes.
	Submariner *kube.SubmarinerWatcher
	// GlobalnetPolicy: render (coarse) or drop peers of Globalnet clusters
	// that only have cluster-wide egress IPs.
	GlobalnetPolicy enforce.GlobalnetPolicy
	// ClockOffset shifts every wall-clock time the daemon shares with other
	// processes (entry stamps, its cluster's LastSeen, lost-origin records);
	// fault injection for a skewed node clock (--fault-clock-offset). The
	// gossip layer's clock is Gossip.Now.
	ClockOffset time.Duration
	// ClusterCIDRs is the operator's --cluster-cidrs: trusted networks
	// merged with the Submariner Cluster objects' (pod-IP ownership).
	ClusterCIDRs enforce.Networks

	// GossipKeyFile, when set, is re-read every KeyReloadInterval (default
	// 10s): new keys are installed, the first line becomes primary, keys no
	// longer listed are removed — so a rotation (install, use, remove) needs
	// no restart.
	GossipKeyFile     string
	KeyReloadInterval time.Duration

	// SigningKey is this cluster's Ed25519 identity (docs/SECURITY.md).
	// When set, own writes are signed and every peer's data is verified:
	// against TrustBundle (strict) when set, else against keys pinned on
	// first use in the store. nil (--insecure-gossip only) trusts peers.
	SigningKey  ed25519.PrivateKey
	TrustBundle map[string][]byte
	// SigningKeyEndorsement: SigningKey endorsed by the previous key (keys rotate; trust.go).
	SigningKeyEndorsement []byte
	// EmptyViewTimeout bounds the empty-view gate (see gate.go); 0 = no bound.
	EmptyViewTimeout time.Duration
	// Guards are the guard rails (protected namespaces, caps).
	Guards enforce.Guards
	// Consent is what this cluster admits from other clusters
	// (--consent-file); nil admits everything not protected.
	Consent *enforce.Consent
	// ReleaseLostOrigins restores the behaviour before lost origins were
	// kept (--lost-origin-policies=release): the policies of a cluster
	// retired because it disappeared stop being enforced at once.
	ReleaseLostOrigins bool

	Registry *prometheus.Registry
	Logger   *slog.Logger
	// Ready reports readiness checks ("state", "enforcement") to the HTTP server.
	Ready func(check string, err error)
}
