package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A restarted node whose seeds do not resolve finds the mesh through the
// addresses its previous run saw alive (Config.KnownPeers; RELIABILITY.md
// finding 9: a daemon restarted without a working seed stayed alone for
// 42 s): at start, and on a rejoin round while it is alone (the first
// dial failed).
func TestKnownPeersFindTheMesh(t *testing.T) {
	a := startNode(t, "a-0", "a", nil, nil)
	b := startNode(t, "b-0", "b", nil, func(c *Config) {
		c.Seeds = []string{"coastguard.invalid"}
		c.KnownPeers = []string{a.Addr()}
		c.RejoinInterval = time.Hour // no rejoin round: the start's join did it
	})
	require.Eventually(t, func() bool { return b.NumAlive() == 2 && a.NumAlive() == 2 }, waitMembership, pollEvery,
		"joined at start through the remembered address")

	inner, err := NewLoopbackTransport("127.0.0.1")
	require.NoError(t, err)
	ft := NewFaultTransport(inner)
	ft.Block(a.Addr(), b.Addr()) // the first dial fails
	c := startNode(t, "c-0", "c", nil, func(c *Config) {
		c.Transport = ft
		c.KnownPeers = []string{a.Addr(), "127.0.0.1:1"} // one stale
	})
	require.Equal(t, 1, c.NumAlive(), "alone: the start's join failed")
	ft.UnblockAll()
	require.Eventually(t, func() bool { return c.NumAlive() == 3 }, waitMembership, pollEvery,
		"a rejoin round while alone dialled the remembered address")
}
