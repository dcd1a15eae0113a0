package kube

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Every kind crdt declares is registered exactly once in the kube layer:
// either with its Kubernetes source (informer and converter) or as a kind
// no Kubernetes object is the source of. Nothing is registered for a kind
// crdt does not declare.
func TestKindSourcesComplete(t *testing.T) {
	for _, spec := range crdt.Kinds() {
		_, sourced := kindSources[spec.Kind]
		_, other := notSourced[spec.Kind]
		require.True(t, sourced || other,
			"crdt declares kind %q but kube/kinds.go neither registers its Kubernetes source in kindSources nor lists it in notSourced", spec.Name)
		require.False(t, sourced && other, "kind %q is both sourced and not sourced in kube/kinds.go", spec.Name)
	}
	for k, src := range kindSources {
		require.True(t, k.Valid(), "kube/kinds.go registers %v, which crdt does not declare", k)
		require.NotNil(t, src.names, "kind %v has no names lister", k)
		require.NotNil(t, src.value, "kind %v has no converter", k)
	}
	for k := range notSourced {
		require.True(t, k.Valid(), "kube/kinds.go lists %v, which crdt does not declare", k)
	}
	require.Equal(t, len(crdt.Kinds()), len(kindSources)+len(notSourced))
	require.Equal(t, []crdt.Kind{crdt.KindCluster, crdt.KindNamespace, crdt.KindPod, crdt.KindPolicy, crdt.KindService}, InventoryKinds)
}
