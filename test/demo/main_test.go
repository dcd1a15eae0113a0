package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo's service ranges come from the examples' own Submariner Cluster
// objects (the Services there take ClusterIPs in them), and a cluster
// without one is an error, not a default.
func TestExampleServiceCIDRs(t *testing.T) {
	got, err := exampleServiceCIDRs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.Equal(t, []string{"100.1.0.0/16", "100.2.0.0/16", "100.3.0.0/16"}, got)

	root := t.TempDir()
	for _, c := range clusters {
		require.NoError(t, os.MkdirAll(filepath.Join(root, "examples", c), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "examples", c, "submariner-clusters.yaml"),
			[]byte("apiVersion: submariner.io/v1\nkind: Cluster\nmetadata: {name: other}\nspec: {cluster_id: other, service_cidr: [100.9.0.0/16]}\n"), 0o644))
	}
	_, err = exampleServiceCIDRs(root)
	require.ErrorContains(t, err, "no Submariner Cluster object of "+clusters[0])
}
