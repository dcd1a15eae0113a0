package main

import (
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// render makes exactly the kinds the daemon's inventory writes, through
// the inventory's own kind table (a static kube inventory), and names the
// file of every object whose entry can fail to convert.
func TestRenderKindsComplete(t *testing.T) {
	clusters, objs, _, err := readRenderInput("../../examples", io.Discard)
	require.NoError(t, err)
	require.NotEmpty(t, clusters)
	for _, id := range clusters {
		snap, errs := clusterEntries(id, objs[id])
		require.Empty(t, errs)
		require.ElementsMatch(t, kube.InventoryKinds, slices.Collect(maps.Keys(snap)), "cluster %s: render's entries are the inventory's kinds", id)
	}
	for k := range renderWhat {
		require.Contains(t, kube.InventoryKinds, k, "renderWhat names %v entries, which the daemon's inventory does not write", k)
	}
	for _, k := range []crdt.Kind{crdt.KindPod, crdt.KindPolicy, crdt.KindService} {
		require.Contains(t, renderWhat, k, "render reads %v objects from files and must name them in conversion errors", k)
	}
	require.Less(t, len(kube.InventoryKinds), len(crdt.Kinds()), "reports are the enforcers', never render input")
}
