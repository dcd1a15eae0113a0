package daemon

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
		require.True(t, ok, "crdt declares kind %q but daemon/mirrorkinds.go has no decoder for it: add one to mirrorKinds", spec.Name)
	}
	for k, mk := range mirrorKinds {
		require.True(t, k.Valid(), "daemon/mirrorkinds.go registers %v, which crdt does not declare", k)
		require.NotNil(t, mk.decode, "kind %v has no decoder", k)
	}
	require.Len(t, mirrorKinds, len(crdt.Kinds()))
}

// An entry of a kind this build does not know is an error for that entry
// only.
func TestMirrorRefusesUnknownKind(t *testing.T) {
	m := NewMirror("eu-1")
	e := crdt.Entry{Key: crdt.Key{Origin: "eu-2", Kind: crdt.Kind(len(crdt.Kinds()) + 1), Name: "x"}, Version: 1, Value: []byte{0x80}}
	res := m.Apply([]crdt.Change{{Key: e.Key, New: &e}})
	require.Len(t, res.Errors, 1)
	require.Contains(t, res.Errors[0].Error(), "unknown kind")
}
