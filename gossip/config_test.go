package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
