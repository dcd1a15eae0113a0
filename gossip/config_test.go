package gossip

import (
	"crypto/ed25519"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// A healed partition or a seed that came up after us is merged by the rejoin
// loop; on local/lan profiles that must not take the WAN default of 30s.
func TestRejoinIntervalDefaultsByProfile(t *testing.T) {
	for p, want := range map[Profile]time.Duration{
		"": 30 * time.Second, ProfileWAN: 30 * time.Second, ProfileLAN: 10 * time.Second, ProfileLocal: 2 * time.Second,
	} {
		c := Config{NodeName: "n", ClusterID: "c", Profile: p}
		require.NoError(t, c.setDefaults())
		require.Equal(t, want, c.RejoinInterval, "profile %q", p)
	}
	c := Config{NodeName: "n", ClusterID: "c", Profile: ProfileLocal, RejoinInterval: 7 * time.Second}
	require.NoError(t, c.setDefaults())
	require.Equal(t, 7*time.Second, c.RejoinInterval, "explicit interval wins")
}

// recordingReplica records what a builder configured.
type recordingReplica struct {
	lim      *crdt.Limits
	signer   crdt.Signer
	verifier crdt.Verifier
	auth     crdt.RetireAuthority
}

func (r *recordingReplica) SetSigner(s crdt.Signer) { r.signer = s }
func (r *recordingReplica) SetVerifier(v crdt.Verifier, a crdt.RetireAuthority) {
	r.verifier, r.auth = v, a
}
func (r *recordingReplica) SetLimits(l crdt.Limits) { r.lim = &l }

// The builder, not gossip, configures the replica: ConfigureReplica sets
// the limits always, and the signer and the verifier (under an authority
// it creates) only when the config has them; New refuses a Trust without
// an Authority rather than leaving the replica's retirements unguarded.
func TestConfigureReplica(t *testing.T) {
	var plain recordingReplica
	cfg := Config{NodeName: "n", ClusterID: "c"}
	ConfigureReplica(&cfg, &plain, crdt.DefaultLimits())
	require.NotNil(t, plain.lim)
	require.Equal(t, crdt.DefaultLimits().MaxOrigins, plain.lim.MaxOrigins)
	require.Nil(t, plain.signer)
	require.Nil(t, plain.verifier)
	require.Nil(t, cfg.Authority)

	sg := NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	tr, err := NewTrust(nil, false, "c", sg.PublicKey(), nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	var signed recordingReplica
	cfg = Config{NodeName: "n", ClusterID: "c", Signer: sg, Trust: tr}
	ConfigureReplica(&cfg, &signed, crdt.Limits{MaxOrigins: 7})
	require.Equal(t, 7, signed.lim.MaxOrigins)
	require.Equal(t, sg, signed.signer)
	require.Equal(t, tr, signed.verifier)
	require.NotNil(t, cfg.Authority, "the authority the verifier was given is the config's")
	require.NotNil(t, signed.auth)

	bad := Config{NodeName: "n", ClusterID: "c", Trust: tr}
	require.ErrorContains(t, bad.setDefaults(), "Config.Authority")
}
