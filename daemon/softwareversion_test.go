package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/internal/version"
)

// The local CoastguardCluster's softwareVersion (the SOFTWARE column and
// the skew check of kubectl coastguard status) is this build's version.
func TestSoftwareVersionIsThisBuilds(t *testing.T) {
	require.NotEmpty(t, SoftwareVersion)
	require.Equal(t, version.Get(), SoftwareVersion)
}
