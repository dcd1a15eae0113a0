package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// plainTransport makes startNode's node bind its own plain NetTransport, as
// in production, instead of the test FaultTransport.
func plainTransport(t *testing.T) func(*Config) {
	return func(c *Config) {
		ft, ok := c.Transport.(*FaultTransport)
		require.True(t, ok)
		require.NoError(t, ft.Shutdown())
		c.Transport = nil
	}
}

// Without Config.Transport a node runs on a plain transport (no fault
// injection in production): it meshes and replicates with a node on a
// FaultTransport, and shuts down without hanging (the guard drains the
// transport's streams while it stops).
func TestPlainTransportInProduction(t *testing.T) {
	keys := [][]byte{testKey(40)}
	a := startNode(t, "a", "c1", keys, plainTransport(t))
	b := startNode(t, "b", "c2", keys, nil)
	require.Nil(t, a.Transport(), "production node has no FaultTransport")
	require.NotNil(t, b.Transport())
	joinAll(t, a, b)
	a.write(t, crdt.KindPod, "ns/a", podValue(t, "10.1.0.1"), false)
	b.write(t, crdt.KindPod, "ns/b", podValue(t, "10.2.0.1"), false)
	requireConverged(t, waitConverge, a, b)

	done := make(chan error, 1)
	go func() { done <- a.Shutdown() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitEvent):
		t.Fatal("Shutdown of a node on a plain transport hangs")
	}
}
