package version

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestStampedVersionWins(t *testing.T) {
	old, oldRev := Version, Revision
	t.Cleanup(func() { Version, Revision = old, oldRev })
	Version, Revision = "v9.8.7", "abc123"
	require.Equal(t, "v9.8.7", Get())
	require.Equal(t, "abc123", GetRevision())

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(BuildInfo())
	n, err := testutil.GatherAndCount(reg, "coastguard_build_info")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	labels := map[string]string{}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, map[string]string{"version": "v9.8.7", "revision": "abc123", "goversion": runtime.Version()}, labels)
}

func TestUnstampedVersionIsNeverEmpty(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = ""
	require.NotEmpty(t, Get())
	require.NotEmpty(t, GetRevision())
}
