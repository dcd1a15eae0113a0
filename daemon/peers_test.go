package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/gossip"
)

// The remembered addresses are alive members other than this daemon,
// spread over clusters before a second address of any cluster is taken.
func TestPeersToRemember(t *testing.T) {
	ms := []gossip.MemberInfo{
		{Name: "a-0", Cluster: "a", Addr: "10.1.0.1:7946", Alive: true}, // self
		{Name: "a-1", Cluster: "a", Addr: "10.1.0.2:7946", Alive: true},
		{Name: "b-0", Cluster: "b", Addr: "10.2.0.1:7946", Alive: true},
		{Name: "b-1", Cluster: "b", Addr: "10.2.0.2:7946", Alive: true},
		{Name: "b-2", Cluster: "b", Addr: "10.2.0.3:7946", Alive: false},            // dead
		{Name: "c-0", Cluster: "c", Addr: "10.3.0.1:7946", Alive: true, Left: true}, // left
		{Name: "d-0", Cluster: "d", Addr: "10.4.0.1:7946", Alive: true},
	}
	require.Equal(t, []string{"10.1.0.2:7946", "10.2.0.1:7946", "10.2.0.2:7946", "10.4.0.1:7946"},
		peersToRemember("a-0", ms, 32))
	require.Equal(t, []string{"10.1.0.2:7946", "10.2.0.1:7946", "10.4.0.1:7946"},
		peersToRemember("a-0", ms, 3), "one of each cluster first")
	require.Empty(t, peersToRemember("a-0", ms[:1], 32), "alone: nothing to remember")
}
