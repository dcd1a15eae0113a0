package model

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Every kind crdt declares has exactly one mirror decoder, and there is no
// decoder for a kind crdt does not declare.
func TestMirrorKindsComplete(t *testing.T) {
	for _, spec := range crdt.Kinds() {
		_, ok := mirrorKinds[spec.Kind]
		require.True(t, ok, "crdt declares kind %q but model/mirrorkinds.go has no decoder for it: add one to mirrorKinds", spec.Name)
	}
	for k, mk := range mirrorKinds {
		require.True(t, k.Valid(), "model/mirrorkinds.go registers %v, which crdt does not declare", k)
		require.NotNil(t, mk.decode, "kind %v has no decoder", k)
	}
	require.Len(t, mirrorKinds, len(crdt.Kinds()))
}

// An entry of a kind this build does not know (crdt carries it for newer
// peers) is no input at all: no error, no cluster, no affected policy.
func TestMirrorIgnoresOpaqueKind(t *testing.T) {
	m := NewMirror("eu-1")
	e := crdt.Entry{Key: crdt.Key{Origin: "eu-2", Kind: crdt.Kind(len(crdt.Kinds()) + 1), Name: "x"}, Version: 1, Value: []byte{0x80}}
	require.True(t, e.Kind.Opaque())
	res := m.Apply([]crdt.Change{{Key: e.Key, New: &e}})
	require.Empty(t, res.Errors)
	require.False(t, res.All)
	require.Empty(t, res.Affected)
	require.Zero(t, m.DecodeErrors)
	require.Empty(t, m.inv.Clusters(), "an origin known only by an opaque entry is no cluster")
	res = m.Apply([]crdt.Change{{Key: e.Key, Old: &e}})
	require.Empty(t, res.Errors)
	require.False(t, res.All)
}
