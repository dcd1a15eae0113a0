package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// render makes exactly the kinds the daemon's inventory writes: one entry
// maker per kube.InventoryKinds kind, none for any other kind.
func TestRenderKindsComplete(t *testing.T) {
	for _, k := range kube.InventoryKinds {
		_, ok := renderEntries[k]
		require.True(t, ok, "the daemon's inventory writes %q entries but cmd/coastguardd/renderkinds.go has no entry maker for them in renderEntries", k)
	}
	for k := range renderEntries {
		require.Contains(t, kube.InventoryKinds, k, "renderEntries makes %v entries, which the daemon's inventory does not write", k)
		require.True(t, k.Valid())
	}
	require.Len(t, renderEntries, len(kube.InventoryKinds))
	require.Less(t, len(kube.InventoryKinds), len(crdt.Kinds()), "reports are the enforcers', never render input")
}
