package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
)

func pinKey(t *testing.T) []byte {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return pub
}

// The shared pins win over a daemon's own; a reset forgets exactly its key,
// once; the leader writes back the first-use pins only it holds and drops
// the tombstone of a cluster pinned again.
func TestPlanPins(t *testing.T) {
	self, a, b, c := pinKey(t), pinKey(t), pinKey(t), pinKey(t)
	local := map[string][]byte{"self": self, "a": a, "b": b}
	shared := kube.Pins{Keys: map[string][]byte{"a": c}, Unpinned: map[string]kube.Reset{"b": {ID: "r1", Key: b}}}

	p := planPins("self", local, shared, map[string]string{}, false)
	assert.Equal(t, map[string][]byte{"a": c}, p.adopt, "the shared pin of a wins")
	assert.Equal(t, map[string][]byte{"b": b}, p.forget, "b's reset key is forgotten")
	assert.Nil(t, p.write, "a standby never writes")

	p = planPins("self", local, shared, map[string]string{"b": "r1"}, false)
	assert.Empty(t, p.forget, "a reset is applied once: b re-pinned to the same key (a reinstall) stays")

	p = planPins("self", local, shared, map[string]string{"b": "r1"}, true)
	require.NotNil(t, p.write)
	assert.Equal(t, map[string][]byte{"a": c, "b": b}, p.write.Keys, "the leader writes b's new pin; never its own key")
	assert.Empty(t, p.write.Unpinned, "and drops b's tombstone")

	p = planPins("self", local, shared, map[string]string{}, true)
	assert.Nil(t, p.write, "a pin forgotten in this round is not written back, and the reset stays")

	p = planPins("self", map[string][]byte{"self": self, "a": c}, kube.Pins{Keys: map[string][]byte{"a": c}, Unpinned: map[string]kube.Reset{}}, nil, true)
	assert.Empty(t, p.adopt)
	assert.Nil(t, p.write, "in sync: nothing to write")
}

// Through a Secret: the leader publishes its first-use pins, a fresh pod
// (empty store) adopts them instead of pinning anew, and an operator's reset
// makes both forget the key.
func TestSyncPinsThroughTheSecret(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	log := slog.New(slog.DiscardHandler)
	own := pinKey(t)
	remote, rogue := pinKey(t), pinKey(t)
	newTrust := func(pins map[string][]byte) *gossip.Trust {
		tr, err := gossip.NewTrust(pins, false, "self", own, nil, log)
		require.NoError(t, err)
		return tr
	}
	leader := newTrust(map[string][]byte{"r": remote})
	require.NoError(t, syncPins(ctx, client, "ns", "self", leader, map[string]string{}, true, log))
	shared, err := kube.ReadPins(ctx, client, "ns")
	require.NoError(t, err)
	assert.Equal(t, map[string][]byte{"r": remote}, shared.Keys)

	fresh := newTrust(map[string][]byte{"r": rogue}) // pinned a rogue key on first use
	freshApplied := map[string]string{}
	require.NoError(t, syncPins(ctx, client, "ns", "self", fresh, freshApplied, false, log))
	assert.Equal(t, remote, fresh.Key("r"), "the cluster's shared pin wins")

	require.True(t, shared.Unpin("r", "reset-1"))
	require.NoError(t, kube.WritePins(ctx, client, "ns", shared))
	require.NoError(t, syncPins(ctx, client, "ns", "self", fresh, freshApplied, false, log))
	require.NoError(t, syncPins(ctx, client, "ns", "self", leader, map[string]string{}, true, log))
	assert.Nil(t, fresh.Key("r"))
	assert.Nil(t, leader.Key("r"), "reset everywhere: r's next key is pinned on first use")
	shared, err = kube.ReadPins(ctx, client, "ns")
	require.NoError(t, err)
	assert.NotContains(t, shared.Keys, "r", "the leader did not write the reset key back")
}
