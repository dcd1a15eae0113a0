package store

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Two replicas of this build relay a delta from a newer peer that mixes a
// known kind with one this build does not know. The relay keeps the unknown
// entry in its file across a restart and serves it on; its change feed
// reports it as a change of an opaque kind (model's mirror ignores
// those).
func TestReplicaCarriesOpaqueKindAcrossRestart(t *testing.T) {
	opaque := crdt.Kind(len(crdt.Kinds()) + 1)
	require.True(t, opaque.Opaque())
	pod := podValue(t, map[string]string{"app": "web"}, "10.0.0.1")
	d := crdt.Delta{Origin: "newer", From: 0, To: crdt.MakeVersion(1, 2), Entries: []crdt.Entry{
		{Key: crdt.Key{Origin: "newer", Kind: opaque, Name: "shop/svc"}, Version: crdt.MakeVersion(1, 1), Value: []byte{0x81, 0xa1, 'p', 80}},
		{Key: crdt.Key{Origin: "newer", Kind: crdt.KindPod, Name: "shop/web"}, Version: crdt.MakeVersion(1, 2), Value: pod},
	}}
	path := filepath.Join(t.TempDir(), "relay.db")
	relay, err := OpenReplica(path, "old", Options{})
	require.NoError(t, err)
	chs, err := relay.Apply(d)
	require.NoError(t, err, "a delta with a kind this build does not know is taken whole")
	var seen []crdt.Kind
	for _, ch := range chs {
		seen = append(seen, ch.Key.Kind)
	}
	require.ElementsMatch(t, []crdt.Kind{opaque, crdt.KindPod}, seen)
	dig := relay.Digest()
	require.NoError(t, relay.Close())

	relay = openReplica(t, path, "old", Options{})
	require.Equal(t, dig, relay.Digest(), "the opaque entry survives the restart")
	peer := NewMemReplica("peer")
	for range 3 {
		_, err := peer.Apply(relay.DeltaSince(peer.Digest(), 0)...)
		require.NoError(t, err)
	}
	require.Equal(t, dig["newer"], peer.Digest()["newer"])
	peer.View(func(st *crdt.State) {
		e, ok := st.Get(crdt.Key{Origin: "newer", Kind: opaque, Name: "shop/svc"})
		require.True(t, ok)
		require.Equal(t, d.Entries[0].Value, e.Value)
	})
}
