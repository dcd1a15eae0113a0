package gossip

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// Two real nodes announce different build versions in their metadata: each
// sees the other's version, and the skew gauge reports the mixed set.
func TestBuildVersionGossiped(t *testing.T) {
	a := startNode(t, "a", "c1", nil, func(c *Config) { c.BuildVersion = "v1.0.0" })
	b := startNode(t, "b", "c2", nil, func(c *Config) { c.BuildVersion = "v1.1.0" })
	joinAll(t, a, b)
	versionsOf := func(n *tnode) map[string]string {
		out := map[string]string{}
		for _, m := range n.Members() {
			if m.Alive {
				out[m.Name] = m.Version
			}
		}
		return out
	}
	want := map[string]string{"a": "v1.0.0", "b": "v1.1.0"}
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(a.m.versionSkew) == 1 && testutil.ToFloat64(b.m.versionSkew) == 1
	}, waitMembership, pollEvery, "skew reported; a sees %v, b sees %v", versionsOf(a), versionsOf(b))
	require.Equal(t, want, versionsOf(a))
	require.Equal(t, want, versionsOf(b))
	require.Equal(t, 1.0, testutil.ToFloat64(a.m.versions.WithLabelValues("v1.1.0")))
}
