package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfigDefaultsAndPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("clusterID: from-file\nseeds: [a.example, b.example:7000]\ndebounce: 80ms\nmaxDelay: 1s\n"), 0o600))

	cfg, err := parseConfig("run", []string{"--config", file, "--node-name", "n1", "--insecure-gossip"}, envMap(nil))
	require.NoError(t, err)
	require.Equal(t, "from-file", cfg.ClusterID)
	require.Equal(t, []string{"a.example", "b.example:7000"}, cfg.Seeds)
	require.Equal(t, 80*time.Millisecond, cfg.Debounce)
	require.Equal(t, "0.0.0.0:7946", cfg.BindAddr, "default kept")
	require.Equal(t, 24*time.Hour, cfg.ReconnectTimeout)

	// env beats file, flag beats env
	cfg, err = parseConfig("run", []string{"--config", file, "--cluster-id", "from-flag"},
		envMap(map[string]string{"COASTGUARD_INSECURE_GOSSIP": "true", "COASTGUARD_CLUSTER_ID": "from-env", "POD_NAME": "pod-a", "COASTGUARD_DEBOUNCE": "90ms"}))
	require.NoError(t, err)
	require.Equal(t, "from-flag", cfg.ClusterID)
	require.Equal(t, "pod-a", cfg.NodeName)
	require.Equal(t, 90*time.Millisecond, cfg.Debounce)

	// the first listed env var wins over later aliases
	cfg, err = parseConfig("run", nil, envMap(map[string]string{"COASTGUARD_NODE_NAME": "explicit", "POD_NAME": "pod", "COASTGUARD_INSECURE_GOSSIP": "1"}))
	require.NoError(t, err)
	require.Equal(t, "explicit", cfg.NodeName)
	require.Zero(t, cfg.FaultClockOffset, "no skew unless asked")

	cfg, err = parseConfig("run", []string{"--node-name", "n", "--insecure-gossip", "--fault-clock-offset=-90s"}, envMap(nil))
	require.NoError(t, err)
	require.Equal(t, -90*time.Second, cfg.FaultClockOffset)
}

// Attack 6: the daemon must not silently run unencrypted, unsigned gossip.
func TestParseConfigRequiresGossipKeys(t *testing.T) {
	_, err := parseConfig("run", []string{"--node-name", "n"}, envMap(nil))
	require.ErrorContains(t, err, "gossip-key-file is required")
	require.ErrorContains(t, err, "--insecure-gossip")

	dir := t.TempDir()
	key := filepath.Join(dir, "keyring")
	sig := filepath.Join(dir, "signing.key")
	require.NoError(t, os.WriteFile(key, []byte("x\n"), 0o600))
	require.NoError(t, os.WriteFile(sig, []byte("x\n"), 0o600))
	// No signing key file: allowed, the key is read (or created) through
	// the API at start (keys.go loadTrust), never unsigned.
	_, err = parseConfig("run", []string{"--node-name", "n", "--gossip-key-file", key}, envMap(nil))
	require.NoError(t, err)
	cfg, err := parseConfig("run", []string{"--node-name", "n", "--gossip-key-file", key, "--signing-key-file", sig}, envMap(nil))
	require.NoError(t, err)
	require.False(t, cfg.InsecureGossip)

	cfg, err = parseConfig("run", []string{"--node-name", "n", "--insecure-gossip"}, envMap(nil))
	require.NoError(t, err)
	require.True(t, cfg.InsecureGossip)
	_, err = parseConfig("run", []string{"--node-name", "n", "--insecure-gossip=maybe"}, envMap(nil))
	require.Error(t, err)
}

func TestParseConfigRejectsNonsense(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"bad cluster id":       {[]string{"--cluster-id", "Bad_ID"}, "cluster-id"},
		"bad duration":         {[]string{"--debounce", "soon"}, "not a duration"},
		"max below debounce":   {[]string{"--debounce", "2s", "--max-delay", "1s"}, "max-delay"},
		"bind without port":    {[]string{"--bind-addr", "0.0.0.0"}, "bind-addr"},
		"advertise not ip":     {[]string{"--advertise-addr", "host.example"}, "must be an IP"},
		"profile":              {[]string{"--gossip-profile", "fast"}, "gossip-profile"},
		"key file missing":     {[]string{"--gossip-key-file", "/nonexistent/key"}, "gossip-key-file"},
		"globalnet policy":     {[]string{"--globalnet-policy", "maybe"}, "globalnet-policy"},
		"clock offset too big": {[]string{"--fault-clock-offset=-25h"}, "fault-clock-offset -25h0m0s: must be within 24h"},
		"tiny reconnect":       {[]string{"--reconnect-timeout", "10ms"}, "reconnect-timeout"},
		"stray args":           {[]string{"extra"}, "unexpected arguments"},
		"unknown flag":         {[]string{"--nope"}, "not defined"},
		"bad port":             {[]string{"--metrics-addr", ":99999"}, "metrics-addr"},
		"bad log level":        {[]string{"--log-level", "loud"}, "log-level"},
		"bad seed":             {[]string{"--seeds", "a b"}, "seeds"},
		"bad namespace":        {[]string{"--namespace", "NS"}, "namespace"},
		"gc horizon too small": {[]string{"--tombstone-gc-after", "5s"}, "tombstone-gc-after"},
		"cluster cidrs":        {[]string{"--cluster-cidrs", "eu-2=10.2.1.0/16"}, "cluster-cidrs: \"eu-2=10.2.1.0/16\": \"10.2.1.0/16\" has host bits set"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := parseConfig("run", append([]string{"--node-name", "n", "--insecure-gossip"}, tc.args...), envMap(nil))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestParseConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("clusterName: typo-key\n"), 0o600))
	_, err := parseConfig("run", []string{"--config", file, "--node-name", "n", "--insecure-gossip"}, envMap(nil))
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "clusterName"), err.Error())

	_, err = parseConfig("run", []string{"--config", filepath.Join(dir, "missing.yaml")}, envMap(nil))
	require.ErrorContains(t, err, "config file")
}

func TestParseConfigClusterCIDRs(t *testing.T) {
	cfg, err := parseConfig("run", []string{"--node-name", "n", "--insecure-gossip", "--cluster-cidrs", "eu-1=10.1.0.0/16, eu-2:global=242.2.0.0/16"},
		envMap(map[string]string{"COASTGUARD_CLUSTER_CIDRS": "us-1=10.3.0.0/16"}))
	require.NoError(t, err)
	require.Equal(t, []string{"eu-1=10.1.0.0/16", "eu-2:global=242.2.0.0/16"}, cfg.ClusterCIDRs, "the flag wins over the env")
}

// Protected namespaces default to the system namespaces, Submariner's and
// coastguard's own; an explicit list replaces them.
func TestDefaultProtectedNamespaces(t *testing.T) {
	g := guards(Config{Namespace: "coastguard-system"}, "submariner-operator")
	require.Equal(t, []string{"coastguard-system", "kube-node-lease", "kube-public", "kube-system", "submariner-operator"}, g.ProtectedNamespaces)
	g = guards(Config{Namespace: "kube-system"}, "")
	require.Equal(t, []string{"kube-node-lease", "kube-public", "kube-system"}, g.ProtectedNamespaces)
	g = guards(Config{Namespace: "coastguard-system", ProtectedNamespaces: []string{"team-a"}}, "submariner-operator")
	require.Equal(t, []string{"team-a"}, g.ProtectedNamespaces)
}

// --advertise-global-ip comes from the flag, the env (the chart's ConfigMap)
// or the file; the pod it watches is POD_NAME, else the node name.
func TestAdvertiseGlobalIPConfig(t *testing.T) {
	cfg, err := parseConfig("run", []string{"--insecure-gossip", "--node-name", "n1"}, envMap(map[string]string{"COASTGUARD_ADVERTISE_GLOBAL_IP": "true"}))
	require.NoError(t, err)
	require.True(t, cfg.AdvertiseGlobalIP)
	require.Equal(t, "n1", advertiseGlobalIPOf(cfg, slog.New(slog.DiscardHandler)))
	t.Setenv("POD_NAME", "coastguard-abcde")
	require.Equal(t, "coastguard-abcde", advertiseGlobalIPOf(cfg, slog.New(slog.DiscardHandler)))

	cfg, err = parseConfig("run", []string{"--insecure-gossip", "--node-name", "n1"}, envMap(nil))
	require.NoError(t, err)
	require.False(t, cfg.AdvertiseGlobalIP, "off by default")
	require.Empty(t, advertiseGlobalIPOf(cfg, slog.New(slog.DiscardHandler)))

	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("advertiseGlobalIP: true\n"), 0o600))
	cfg, err = parseConfig("run", []string{"--config", file, "--insecure-gossip", "--node-name", "n1"}, envMap(nil))
	require.NoError(t, err)
	require.True(t, cfg.AdvertiseGlobalIP)
}
