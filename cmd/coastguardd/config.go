package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Config is the daemon configuration. Every field can be set by a flag, an
// environment variable or a key in the --config YAML file; precedence is
// flag > env > file > default.
type Config struct {
	ClusterID     string `json:"clusterID"`
	Kubeconfig    string `json:"kubeconfig"`
	NodeName      string `json:"nodeName"`
	Namespace     string `json:"namespace"`
	BindAddr      string `json:"bindAddr"`
	AdvertiseAddr string `json:"advertiseAddr"`
	// AdvertiseGlobalIP: under Globalnet, advertise this pod's
	// GlobalIngressIP instead of AdvertiseAddr (docs/OPERATIONS.md "Globalnet").
	AdvertiseGlobalIP bool          `json:"advertiseGlobalIP"`
	Seeds             []string      `json:"seeds"`
	GossipKeyFile     string        `json:"gossipKeyFile"`
	InsecureGossip    bool          `json:"insecureGossip"`
	SigningKeyFile    string        `json:"signingKeyFile"`
	TrustBundleFile   string        `json:"trustBundleFile"`
	GossipProfile     string        `json:"gossipProfile"`
	DataDir           string        `json:"dataDir"`
	Debounce          time.Duration `json:"debounce"`
	MaxDelay          time.Duration `json:"maxDelay"`
	ReconnectTimeout  time.Duration `json:"reconnectTimeout"`
	MetricsAddr       string        `json:"metricsAddr"`
	GlobalnetPolicy   string        `json:"globalnetPolicy"`
	// FaultClockOffset shifts the wall clock this daemon shares with others
	// (fault injection: a skewed node clock).
	FaultClockOffset time.Duration `json:"faultClockOffset"`
	// LostOriginPolicies: keep (enforce a lost cluster's MCNPs from their
	// last-known state until released) or release (the old behaviour).
	LostOriginPolicies string `json:"lostOriginPolicies"`
	// ConsentFile: what this cluster admits from other clusters (docs/SEMANTICS.md "Consent").
	ConsentFile      string        `json:"consentFile"`
	LeaseDuration    time.Duration `json:"leaseDuration"`
	TombstoneGCAfter time.Duration `json:"tombstoneGCAfter"`
	LogLevel         string        `json:"logLevel"`
	ClusterCIDRs     []string      `json:"clusterCIDRs"`
	AdminAddr        string        `json:"adminAddr"`
	MetricsAuth      string        `json:"metricsAuth"`
	// Enforcement safety (issue 13).
	EmptyViewTimeout            time.Duration `json:"emptyViewTimeout"`
	ProtectedNamespaces         []string      `json:"protectedNamespaces"`
	EnforceRemoteInProtected    bool          `json:"enforceRemoteInProtectedNamespaces"`
	MaxNetworkPoliciesPerMCNP   int           `json:"maxNetworkPoliciesPerMCNP"`
	MaxIPBlocksPerNetworkPolicy int           `json:"maxIPBlocksPerNetworkPolicy"`
	MaxBytesPerMCNP             int           `json:"maxBytesPerMCNP"`

	// AllowUnsignedMeta: accept gossip members that announce unsigned
	// (pre-signing) metadata, for a rolling upgrade (docs/SECURITY.md).
	AllowUnsignedMeta bool `json:"allowUnsignedMeta"`
}

// fileConfig mirrors Config with durations as strings for YAML ("30s").
type fileConfig struct {
	ClusterID          *string   `json:"clusterID"`
	Kubeconfig         *string   `json:"kubeconfig"`
	NodeName           *string   `json:"nodeName"`
	Namespace          *string   `json:"namespace"`
	BindAddr           *string   `json:"bindAddr"`
	AdvertiseAddr      *string   `json:"advertiseAddr"`
	AdvertiseGlobalIP  *bool     `json:"advertiseGlobalIP"`
	Seeds              *[]string `json:"seeds"`
	GossipKeyFile      *string   `json:"gossipKeyFile"`
	InsecureGossip     *bool     `json:"insecureGossip"`
	SigningKeyFile     *string   `json:"signingKeyFile"`
	TrustBundleFile    *string   `json:"trustBundleFile"`
	GossipProfile      *string   `json:"gossipProfile"`
	DataDir            *string   `json:"dataDir"`
	Debounce           *string   `json:"debounce"`
	MaxDelay           *string   `json:"maxDelay"`
	ReconnectTimeout   *string   `json:"reconnectTimeout"`
	MetricsAddr        *string   `json:"metricsAddr"`
	GlobalnetPolicy    *string   `json:"globalnetPolicy"`
	FaultClockOffset   *string   `json:"faultClockOffset"`
	LostOriginPolicies *string   `json:"lostOriginPolicies"`
	ConsentFile        *string   `json:"consentFile"`
	LeaseDuration      *string   `json:"leaseDuration"`
	TombstoneGCAfter   *string   `json:"tombstoneGCAfter"`
	LogLevel           *string   `json:"logLevel"`
	ClusterCIDRs       *[]string `json:"clusterCIDRs"`
	AdminAddr          *string   `json:"adminAddr"`
	MetricsAuth        *string   `json:"metricsAuth"`

	EmptyViewTimeout            *string   `json:"emptyViewTimeout"`
	ProtectedNamespaces         *[]string `json:"protectedNamespaces"`
	EnforceRemoteInProtected    *bool     `json:"enforceRemoteInProtectedNamespaces"`
	MaxNetworkPoliciesPerMCNP   *int      `json:"maxNetworkPoliciesPerMCNP"`
	MaxIPBlocksPerNetworkPolicy *int      `json:"maxIPBlocksPerNetworkPolicy"`
	MaxBytesPerMCNP             *int      `json:"maxBytesPerMCNP"`

	AllowUnsignedMeta *bool `json:"allowUnsignedMeta"`
}

func defaultConfig() Config {
	return Config{
		Namespace:          "coastguard-system",
		BindAddr:           "0.0.0.0:7946",
		GossipProfile:      "wan",
		DataDir:            "/var/lib/coastguard",
		Debounce:           50 * time.Millisecond,
		MaxDelay:           500 * time.Millisecond,
		ReconnectTimeout:   24 * time.Hour,
		MetricsAddr:        ":9090",
		GlobalnetPolicy:    "coarse",
		LostOriginPolicies: "keep",
		LeaseDuration:      15 * time.Second,
		TombstoneGCAfter:   time.Hour,
		LogLevel:           "info",
		AdminAddr:          "127.0.0.1:9091",
		MetricsAuth:        "none",

		EmptyViewTimeout:            2 * time.Minute,
		MaxNetworkPoliciesPerMCNP:   enforce.DefaultMaxNetworkPoliciesPerMCNP,
		MaxIPBlocksPerNetworkPolicy: enforce.DefaultMaxIPBlocksPerNetworkPolicy,
		MaxBytesPerMCNP:             enforce.DefaultMaxBytesPerMCNP,
	}
}

func intSetter(name string, p func(c *Config) *int) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", name, v)
		}
		*p(c) = n
		return nil
	}
}

func ip(p *int) (string, bool) {
	if p == nil {
		return "", false
	}
	return strconv.Itoa(*p), true
}

// option describes one setting: its flag, env vars and how to set it.
type option struct {
	// boolFlag: the flag takes no value (--insecure-gossip).
	boolFlag bool
	flag     string
	envs     []string
	usage    string
	set      func(c *Config, v string) error
	fileV    func(f *fileConfig) (string, bool)
}

func strSetter(p func(c *Config) *string) func(c *Config, v string) error {
	return func(c *Config, v string) error { *p(c) = v; return nil }
}

func durSetter(name string, p func(c *Config) *time.Duration) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration (examples: 50ms, 2s, 24h)", name, v)
		}
		*p(c) = d
		return nil
	}
}

func boolSetter(name string, p func(c *Config) *bool) func(c *Config, v string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s: %q is not a boolean", name, v)
		}
		*p(c) = b
		return nil
	}
}

func bp(p *bool) (string, bool) {
	if p == nil {
		return "", false
	}
	return strconv.FormatBool(*p), true
}

// boolFlagValue lets a string-valued option be given as a bare --flag.
type boolFlagValue struct{ s *string }

func (b boolFlagValue) String() string {
	if b.s == nil {
		return ""
	}
	return *b.s
}
func (b boolFlagValue) Set(v string) error { *b.s = v; return nil }
func (b boolFlagValue) IsBoolFlag() bool   { return true }
func (b boolFlagValue) Type() string       { return "bool" }

// typedValue holds a string-valued option (so that file, env and flag
// precedence is resolved in load) but names its real type, which pflag
// shows in --help: "--debounce duration", not "--debounce string".
type typedValue struct {
	s    *string
	kind string
}

func (v typedValue) String() string {
	if v.s == nil {
		return ""
	}
	return *v.s
}
func (v typedValue) Set(s string) error { *v.s = s; return nil }
func (v typedValue) Type() string       { return v.kind }

// kind is the type an option's value parses as, found by asking its setter:
// string (accepts anything), bool, int or duration.
func (o option) kind() string {
	probe := func(v string) bool { return o.set(&Config{}, v) == nil }
	switch {
	case probe("not a typed value"):
		return "string"
	case probe("true"):
		return "bool"
	case probe("1"):
		return "int"
	case probe("1s"):
		return "duration"
	}
	return "string"
}

func sp(p *string) (string, bool) {
	if p == nil {
		return "", false
	}
	return *p, true
}

func options() []option {
	return []option{
		{false, "cluster-id", []string{"COASTGUARD_CLUSTER_ID"}, "cluster ID (default: discovered from ClusterProperty cluster.clusterset.k8s.io or Submariner's Cluster)",
			strSetter(func(c *Config) *string { return &c.ClusterID }), func(f *fileConfig) (string, bool) { return sp(f.ClusterID) }},
		{false, "kubeconfig", []string{"KUBECONFIG"}, "kubeconfig path (default: in-cluster)",
			strSetter(func(c *Config) *string { return &c.Kubeconfig }), func(f *fileConfig) (string, bool) { return sp(f.Kubeconfig) }},
		{false, "node-name", []string{"COASTGUARD_NODE_NAME", "POD_NAME"}, "gossip identity, unique per daemon (default: hostname)",
			strSetter(func(c *Config) *string { return &c.NodeName }), func(f *fileConfig) (string, bool) { return sp(f.NodeName) }},
		{false, "namespace", []string{"POD_NAMESPACE"}, "namespace holding the leader Lease",
			strSetter(func(c *Config) *string { return &c.Namespace }), func(f *fileConfig) (string, bool) { return sp(f.Namespace) }},
		{false, "bind-addr", []string{"COASTGUARD_BIND_ADDR"}, "gossip bind address host:port",
			strSetter(func(c *Config) *string { return &c.BindAddr }), func(f *fileConfig) (string, bool) { return sp(f.BindAddr) }},
		{false, "advertise-addr", []string{"COASTGUARD_ADVERTISE_ADDR", "POD_IP"}, "gossip address advertised to peers, ip or ip:port (default: bind address)",
			strSetter(func(c *Config) *string { return &c.AdvertiseAddr }), func(f *fileConfig) (string, bool) { return sp(f.AdvertiseAddr) }},
		{true, "advertise-global-ip", []string{"COASTGUARD_ADVERTISE_GLOBAL_IP"}, "Globalnet: advertise this pod's GlobalIngressIP (pod-<POD_NAME, else node-name> in --namespace; the daemon's headless Service must be exported) instead of --advertise-addr; until it is allocated the daemon does not join and is not ready",
			boolSetter("advertise-global-ip", func(c *Config) *bool { return &c.AdvertiseGlobalIP }), func(f *fileConfig) (string, bool) { return bp(f.AdvertiseGlobalIP) }},
		{false, "seeds", []string{"COASTGUARD_SEEDS"}, "comma-separated seed peers host[:port]; DNS names are re-resolved on every rejoin (default: the Lighthouse name coastguard.<namespace>.svc.clusterset.local; \"none\" disables)",
			listSetter(func(c *Config) *[]string { return &c.Seeds }), func(f *fileConfig) (string, bool) { return lp(f.Seeds) }},
		{false, "gossip-key-file", []string{"COASTGUARD_GOSSIP_KEY_FILE"}, "keyring file: one base64 AES key (16/24/32 bytes) per line, first is primary",
			strSetter(func(c *Config) *string { return &c.GossipKeyFile }), func(f *fileConfig) (string, bool) { return sp(f.GossipKeyFile) }},
		{true, "insecure-gossip", []string{"COASTGUARD_INSECURE_GOSSIP"}, "run gossip WITHOUT encryption and without origin signatures (testing only; required to start without --gossip-key-file)",
			boolSetter("insecure-gossip", func(c *Config) *bool { return &c.InsecureGossip }), func(f *fileConfig) (string, bool) { return bp(f.InsecureGossip) }},
		{true, "allow-unsigned-meta", []string{"COASTGUARD_ALLOW_UNSIGNED_META"}, "rolling upgrade from a release without signed gossip metadata: accept members whose metadata is unsigned, except member names that signed (default: refused, dropped{reason=\"meta_unsigned\"})",
			boolSetter("allow-unsigned-meta", func(c *Config) *bool { return &c.AllowUnsignedMeta }), func(f *fileConfig) (string, bool) { return bp(f.AllowUnsignedMeta) }},
		{false, "signing-key-file", []string{"COASTGUARD_SIGNING_KEY_FILE"}, "this cluster's Ed25519 signing key (base64 32-byte seed; Secret coastguard-signing-key; see coastguardd keys generate). When absent, the key is read through the API from Secret coastguard-signing-key in --namespace, which is created if missing",
			strSetter(func(c *Config) *string { return &c.SigningKeyFile }), func(f *fileConfig) (string, bool) { return sp(f.SigningKeyFile) }},
		{false, "trust-bundle-file", []string{"COASTGUARD_TRUST_BUNDLE_FILE"}, "strict mode: file of \"<cluster-id> <base64 Ed25519 public key>\" lines; only these keys are trusted (default: trust on first use, pinned in the store)",
			strSetter(func(c *Config) *string { return &c.TrustBundleFile }), func(f *fileConfig) (string, bool) { return sp(f.TrustBundleFile) }},
		{false, "gossip-profile", []string{"COASTGUARD_GOSSIP_PROFILE"}, "gossip timing profile: wan, lan or local",
			strSetter(func(c *Config) *string { return &c.GossipProfile }), func(f *fileConfig) (string, bool) { return sp(f.GossipProfile) }},
		{false, "data-dir", []string{"COASTGUARD_DATA_DIR"}, "directory for the bbolt state file",
			strSetter(func(c *Config) *string { return &c.DataDir }), func(f *fileConfig) (string, bool) { return sp(f.DataDir) }},
		{false, "debounce", []string{"COASTGUARD_DEBOUNCE"}, "enforcer quiet period before recomputing",
			durSetter("debounce", func(c *Config) *time.Duration { return &c.Debounce }), func(f *fileConfig) (string, bool) { return sp(f.Debounce) }},
		{false, "max-delay", []string{"COASTGUARD_MAX_DELAY"}, "enforcer maximum delay under continuous churn",
			durSetter("max-delay", func(c *Config) *time.Duration { return &c.MaxDelay }), func(f *fileConfig) (string, bool) { return sp(f.MaxDelay) }},
		{false, "reconnect-timeout", []string{"COASTGUARD_RECONNECT_TIMEOUT"}, "a cluster with no live member for this long is retired",
			durSetter("reconnect-timeout", func(c *Config) *time.Duration { return &c.ReconnectTimeout }), func(f *fileConfig) (string, bool) { return sp(f.ReconnectTimeout) }},
		{false, "metrics-addr", []string{"COASTGUARD_METRICS_ADDR"}, "address serving /metrics, /healthz and /readyz",
			strSetter(func(c *Config) *string { return &c.MetricsAddr }), func(f *fileConfig) (string, bool) { return sp(f.MetricsAddr) }},
		{false, "fault-clock-offset", []string{"COASTGUARD_FAULT_CLOCK_OFFSET"}, "fault injection: shift every wall-clock time this daemon shares with others (entry stamps, status times, lost-origin records) by this much, as a skewed node clock would (at most 24h either way)",
			durSetter("fault-clock-offset", func(c *Config) *time.Duration { return &c.FaultClockOffset }), func(f *fileConfig) (string, bool) { return sp(f.FaultClockOffset) }},
		{false, "globalnet-policy", []string{"COASTGUARD_GLOBALNET_POLICY"}, "coarse (render cluster-wide Globalnet egress IPs and warn) or drop (fail closed)",
			strSetter(func(c *Config) *string { return &c.GlobalnetPolicy }), func(f *fileConfig) (string, bool) { return sp(f.GlobalnetPolicy) }},
		{false, "consent-file", []string{"COASTGUARD_CONSENT_FILE"}, "YAML file of what this cluster admits from other clusters' MCNPs: rules of origins and namespaces, forbidWidening, pinned clusterLabels (default: everything not protected is admitted; docs/SEMANTICS.md, Consent)",
			strSetter(func(c *Config) *string { return &c.ConsentFile }), func(f *fileConfig) (string, bool) { return sp(f.ConsentFile) }},
		{false, "lost-origin-policies", []string{"COASTGUARD_LOST_ORIGIN_POLICIES"}, "keep (the MCNPs of a cluster retired because it disappeared stay enforced from their last-known state until released: kubectl coastguard release-lost, or its decommission) or release (stop enforcing them at once)",
			strSetter(func(c *Config) *string { return &c.LostOriginPolicies }), func(f *fileConfig) (string, bool) { return sp(f.LostOriginPolicies) }},
		{false, "lease-duration", []string{"COASTGUARD_LEASE_DURATION"}, "leader Lease duration",
			durSetter("lease-duration", func(c *Config) *time.Duration { return &c.LeaseDuration }), func(f *fileConfig) (string, bool) { return sp(f.LeaseDuration) }},
		{false, "tombstone-gc-after", []string{"COASTGUARD_TOMBSTONE_GC_AFTER"}, "own tombstones older than this are garbage-collected",
			durSetter("tombstone-gc-after", func(c *Config) *time.Duration { return &c.TombstoneGCAfter }), func(f *fileConfig) (string, bool) { return sp(f.TombstoneGCAfter) }},
		{false, "log-level", []string{"COASTGUARD_LOG_LEVEL"}, "debug, info, warn or error",
			strSetter(func(c *Config) *string { return &c.LogLevel }), func(f *fileConfig) (string, bool) { return sp(f.LogLevel) }},
		{false, "cluster-cidrs", []string{"COASTGUARD_CLUSTER_CIDRS"}, "trusted CIDRs per cluster, added to Submariner's Cluster objects; remote pod IPs outside them are never allowed: comma-separated <cluster>[:pod|:service|:global]=<cidr>, e.g. eu-2=10.2.0.0/16,eu-2:service=100.2.0.0/16",
			listSetter(func(c *Config) *[]string { return &c.ClusterCIDRs }), func(f *fileConfig) (string, bool) { return lp(f.ClusterCIDRs) }},
		{false, "admin-addr", []string{"COASTGUARD_ADMIN_ADDR"}, "loopback address serving /debug/state and /admin/* (kubectl exec only; \"\" disables)",
			strSetter(func(c *Config) *string { return &c.AdminAddr }), func(f *fileConfig) (string, bool) { return sp(f.AdminAddr) }},
		{false, "metrics-auth", []string{"COASTGUARD_METRICS_AUTH"}, "none, or kubernetes: /metrics requires a bearer token that TokenReview accepts and SubjectAccessReview allows to get /metrics",
			strSetter(func(c *Config) *string { return &c.MetricsAuth }), func(f *fileConfig) (string, bool) { return sp(f.MetricsAuth) }},
		{false, "empty-view-timeout", []string{"COASTGUARD_EMPTY_VIEW_TIMEOUT"}, "after start or a leadership takeover, generated NetworkPolicies are neither deleted nor shrunk until anti-entropy covered every known cluster, or this long at most (0: no bound)",
			durSetter("empty-view-timeout", func(c *Config) *time.Duration { return &c.EmptyViewTimeout }), func(f *fileConfig) (string, bool) { return sp(f.EmptyViewTimeout) }},
		{false, "protected-namespaces", []string{"COASTGUARD_PROTECTED_NAMESPACES"}, "comma-separated namespaces where MCNPs of other clusters are not enforced (default: kube-system, kube-public, kube-node-lease, the Submariner namespace and --namespace)",
			listSetter(func(c *Config) *[]string { return &c.ProtectedNamespaces }), func(f *fileConfig) (string, bool) { return lp(f.ProtectedNamespaces) }},
		{false, "enforce-remote-in-protected-namespaces", []string{"COASTGUARD_ENFORCE_REMOTE_IN_PROTECTED_NAMESPACES"}, "enforce MCNPs of other clusters in protected namespaces too (true|false)",
			func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				if err != nil {
					return fmt.Errorf("enforce-remote-in-protected-namespaces: %q is not true or false", v)
				}
				c.EnforceRemoteInProtected = b
				return nil
			},
			func(f *fileConfig) (string, bool) {
				if f.EnforceRemoteInProtected == nil {
					return "", false
				}
				return strconv.FormatBool(*f.EnforceRemoteInProtected), true
			}},
		{false, "max-networkpolicies-per-mcnp", []string{"COASTGUARD_MAX_NETWORKPOLICIES_PER_MCNP"}, "cap on NetworkPolicies generated from one MCNP in this cluster; above it the MCNP only isolates its pods and is Degraded",
			intSetter("max-networkpolicies-per-mcnp", func(c *Config) *int { return &c.MaxNetworkPoliciesPerMCNP }), func(f *fileConfig) (string, bool) { return ip(f.MaxNetworkPoliciesPerMCNP) }},
		{false, "max-ipblocks-per-networkpolicy", []string{"COASTGUARD_MAX_IPBLOCKS_PER_NETWORKPOLICY"}, "cap on ipBlock peers in one generated NetworkPolicy; above it the MCNP only isolates its pods and is Degraded",
			intSetter("max-ipblocks-per-networkpolicy", func(c *Config) *int { return &c.MaxIPBlocksPerNetworkPolicy }), func(f *fileConfig) (string, bool) { return ip(f.MaxIPBlocksPerNetworkPolicy) }},
		{false, "max-bytes-per-mcnp", []string{"COASTGUARD_MAX_BYTES_PER_MCNP"}, "cap on the JSON size of all NetworkPolicies generated from one MCNP; above it the MCNP only isolates its pods and is Degraded",
			intSetter("max-bytes-per-mcnp", func(c *Config) *int { return &c.MaxBytesPerMCNP }), func(f *fileConfig) (string, bool) { return ip(f.MaxBytesPerMCNP) }},
	}
}

// listSetter sets a comma-separated list option.
func listSetter(p func(c *Config) *[]string) func(c *Config, v string) error {
	return func(c *Config, v string) error { *p(c) = splitList(v); return nil }
}

// lp is a list option of the config file, joined as its flag takes it.
func lp(p *[]string) (string, bool) {
	if p == nil {
		return "", false
	}
	return strings.Join(*p, ","), true
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseConfig builds the configuration from args, the environment (getenv)
// and an optional --config file, then validates it.
// configFlags holds the run flags, defined on a Go flag set (which the
// cobra command binds through pflag). Flags start empty so that load can tell
// a flag given on the command line from a default; their DefValue shows the
// effective default in --help.
type configFlags struct {
	fs         *flag.FlagSet
	configFile *string
	vals       map[string]*string
	getenv     func(string) string
}

func newConfigFlags(name string, getenv func(string) string) *configFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	cf := &configFlags{fs: fs, vals: map[string]*string{}, getenv: getenv}
	cf.configFile = fs.String("config", getenv("COASTGUARD_CONFIG"), "YAML config file (keys: clusterID, seeds, dataDir, ...) [env COASTGUARD_CONFIG]")
	defaults := defaultStrings()
	for _, o := range options() {
		if o.boolFlag {
			v := new(string)
			fs.Var(boolFlagValue{v}, o.flag, o.usage+envHint(o.envs))
			cf.vals[o.flag] = v
			continue
		}
		v := new(string)
		fs.Var(typedValue{s: v, kind: o.kind()}, o.flag, o.usage+envHint(o.envs))
		cf.vals[o.flag] = v
		if v, ok := o.fileV(&defaults); ok && v != "" {
			fs.Lookup(o.flag).DefValue = v
		}
	}
	return cf
}

// defaultStrings renders defaultConfig() in the config file's form, so each
// option's fileV yields its default as a string (durations as "50ms").
func defaultStrings() fileConfig {
	var fc fileConfig
	d := reflect.ValueOf(defaultConfig())
	for i := 0; i < d.NumField(); i++ {
		tag, _, _ := strings.Cut(d.Type().Field(i).Tag.Get("json"), ",")
		v := d.Field(i).Interface()
		if dur, ok := v.(time.Duration); ok {
			v = dur.String()
		}
		b, err := json.Marshal(map[string]any{tag: v})
		if err != nil {
			continue
		}
		_ = json.Unmarshal(b, &fc) // a field of another shape keeps no default
	}
	return fc
}

func parseConfig(name string, args []string, getenv func(string) string) (Config, error) {
	cf := newConfigFlags(name, getenv)
	if err := cf.fs.Parse(args); err != nil {
		return defaultConfig(), err
	}
	if cf.fs.NArg() > 0 {
		return defaultConfig(), fmt.Errorf("unexpected arguments: %q", cf.fs.Args())
	}
	setByFlag := map[string]bool{}
	cf.fs.Visit(func(f *flag.Flag) { setByFlag[f.Name] = true })
	return cf.load(func(name string) bool { return setByFlag[name] })
}

// load resolves the configuration once the flags are parsed: defaults, then
// the config file, then environment variables, then flags given on the
// command line (changed reports those).
func (cf *configFlags) load(changed func(name string) bool) (Config, error) {
	cfg := defaultConfig()
	opts := options()
	getenv, configFile, flagVals := cf.getenv, cf.configFile, cf.vals
	setByFlag := map[string]bool{}
	for _, o := range opts {
		setByFlag[o.flag] = changed(o.flag)
	}

	var fc fileConfig
	if *configFile != "" {
		raw, err := os.ReadFile(*configFile)
		if err != nil {
			return cfg, fmt.Errorf("config file: %w", err)
		}
		if err := yaml.UnmarshalStrict(raw, &fc); err != nil {
			return cfg, fmt.Errorf("config file %s: %w", *configFile, err)
		}
	}
	for _, o := range opts {
		if v, ok := o.fileV(&fc); ok {
			if err := o.set(&cfg, v); err != nil {
				return cfg, fmt.Errorf("config file %s: %w", *configFile, err)
			}
		}
		for i := len(o.envs) - 1; i >= 0; i-- { // first listed env var wins
			if v := getenv(o.envs[i]); v != "" {
				if err := o.set(&cfg, v); err != nil {
					return cfg, fmt.Errorf("env %s: %w", o.envs[i], err)
				}
			}
		}
		if setByFlag[o.flag] {
			if err := o.set(&cfg, *flagVals[o.flag]); err != nil {
				return cfg, fmt.Errorf("--%w", err)
			}
		}
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("node-name not set and hostname unavailable: %w", err)
		}
		cfg.NodeName = h
	}
	return cfg, cfg.Validate()
}

func envHint(envs []string) string {
	if len(envs) == 0 {
		return ""
	}
	return " [env " + strings.Join(envs, ", ") + "]"
}

// Validate rejects nonsense with a message naming the setting.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.validateIdentity()...)
	errs = append(errs, c.validateGossip()...)
	errs = append(errs, c.validateTimings()...)
	errs = append(errs, c.validateEndpoints()...)
	errs = append(errs, c.validateChoices()...)
	return errors.Join(errs...)
}

// validateIdentity checks the identity, namespaces and caps.
func (c Config) validateIdentity() []error {
	var errs []error
	if c.ClusterID != "" {
		if msgs := validation.IsDNS1123Label(c.ClusterID); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("cluster-id %q: %s", c.ClusterID, strings.Join(msgs, "; ")))
		}
	}
	if c.NodeName == "" {
		errs = append(errs, errors.New("node-name must not be empty"))
	}
	for _, ns := range c.ProtectedNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("protected-namespaces: %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if c.EmptyViewTimeout < 0 {
		errs = append(errs, fmt.Errorf("empty-view-timeout %s: must not be negative", c.EmptyViewTimeout))
	}
	for name, v := range map[string]int{"max-networkpolicies-per-mcnp": c.MaxNetworkPoliciesPerMCNP,
		"max-ipblocks-per-networkpolicy": c.MaxIPBlocksPerNetworkPolicy, "max-bytes-per-mcnp": c.MaxBytesPerMCNP} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: must be at least 1", name, v))
		}
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: %s", c.Namespace, strings.Join(msgs, "; ")))
	}
	return errs
}

// validateGossip checks the gossip addresses, profile and key files.
func (c Config) validateGossip() []error {
	var errs []error
	if _, _, err := splitHostPort(c.BindAddr, true); err != nil {
		errs = append(errs, fmt.Errorf("bind-addr %q: %v", c.BindAddr, err))
	}
	if c.AdvertiseAddr != "" {
		host, _, err := splitHostPort(c.AdvertiseAddr, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("advertise-addr %q: %v", c.AdvertiseAddr, err))
		} else if net.ParseIP(host) == nil {
			errs = append(errs, fmt.Errorf("advertise-addr %q: must be an IP address", c.AdvertiseAddr))
		}
	}
	for _, s := range c.Seeds {
		if _, _, err := splitHostPort(s, false); err != nil {
			errs = append(errs, fmt.Errorf("seeds: %q: %v", s, err))
		}
	}
	switch c.GossipProfile {
	case "wan", "lan", "local":
	default:
		errs = append(errs, fmt.Errorf("gossip-profile %q: must be wan, lan or local", c.GossipProfile))
	}
	if c.GossipKeyFile == "" && !c.InsecureGossip {
		errs = append(errs, errors.New("gossip-key-file is required: without it gossip is unencrypted and any host that reaches the gossip port can join (pass --insecure-gossip to run without encryption, for tests only)"))
	}
	// signing-key-file may be absent: the key is then read (or created)
	// through the API in Secret coastguard-signing-key (keys.go loadTrust).
	for _, f := range []struct{ name, path string }{
		{"gossip-key-file", c.GossipKeyFile}, {"trust-bundle-file", c.TrustBundleFile},
	} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", f.name, err))
		} else if st.IsDir() {
			errs = append(errs, fmt.Errorf("%s %q is a directory", f.name, f.path))
		}
	}
	return errs
}

// validateTimings checks the data directory and the timings.
func (c Config) validateTimings() []error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data-dir must not be empty"))
	}
	if c.Debounce <= 0 {
		errs = append(errs, fmt.Errorf("debounce %s: must be > 0", c.Debounce))
	}
	if c.MaxDelay < c.Debounce {
		errs = append(errs, fmt.Errorf("max-delay %s: must be >= debounce %s", c.MaxDelay, c.Debounce))
	}
	if c.ReconnectTimeout < time.Second {
		errs = append(errs, fmt.Errorf("reconnect-timeout %s: must be >= 1s", c.ReconnectTimeout))
	}
	if c.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("lease-duration %s: must be >= 1s", c.LeaseDuration))
	}
	if c.TombstoneGCAfter < time.Minute && c.TombstoneGCAfter != 0 {
		errs = append(errs, fmt.Errorf("tombstone-gc-after %s: must be 0 (never) or >= 1m", c.TombstoneGCAfter))
	}
	return errs
}

// validateEndpoints checks the HTTP endpoints.
func (c Config) validateEndpoints() []error {
	var errs []error
	if c.MetricsAddr != "" {
		if _, _, err := splitHostPort(c.MetricsAddr, true); err != nil {
			errs = append(errs, fmt.Errorf("metrics-addr %q: %v", c.MetricsAddr, err))
		}
	}
	if c.AdminAddr != "" {
		host, _, err := splitHostPort(c.AdminAddr, true)
		if ip := net.ParseIP(host); err == nil && (ip == nil || !ip.IsLoopback()) && host != "localhost" {
			err = errors.New("must be a loopback address (the admin endpoints are reachable through kubectl exec only)")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("admin-addr %q: %v", c.AdminAddr, err))
		}
	}
	switch c.MetricsAuth {
	case "none", "kubernetes":
	default:
		errs = append(errs, fmt.Errorf("metrics-auth %q: must be none or kubernetes", c.MetricsAuth))
	}
	return errs
}

// validateChoices checks the enumerated choices and the cluster CIDRs.
func (c Config) validateChoices() []error {
	var errs []error
	switch c.LostOriginPolicies {
	case "keep", "release":
	default:
		errs = append(errs, fmt.Errorf("lost-origin-policies %q: must be keep or release", c.LostOriginPolicies))
	}
	if c.FaultClockOffset > 24*time.Hour || c.FaultClockOffset < -24*time.Hour {
		errs = append(errs, fmt.Errorf("fault-clock-offset %s: must be within 24h either way", c.FaultClockOffset))
	}
	switch c.GlobalnetPolicy {
	case "coarse", "drop":
	default:
		errs = append(errs, fmt.Errorf("globalnet-policy %q: must be coarse or drop", c.GlobalnetPolicy))
	}
	if _, err := enforce.ParseClusterCIDRs(c.ClusterCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("cluster-cidrs: %w", err))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log-level %q: must be debug, info, warn or error", c.LogLevel))
	}
	return errs
}

// splitHostPort accepts host:port, or a bare host when !requirePort.
func splitHostPort(s string, requirePort bool) (string, int, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		if requirePort {
			return "", 0, errors.New("want host:port")
		}
		if strings.ContainsAny(s, " /") || s == "" {
			return "", 0, errors.New("want host or host:port")
		}
		return s, 0, nil
	}
	p, err := strconv.Atoi(portStr)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("port %q out of range", portStr)
	}
	return host, p, nil
}
