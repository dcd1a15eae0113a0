package daemon

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/store"
)

type fakeRetirer struct {
	calls int
	got   crdt.Retire
}

func (f *fakeRetirer) Decommission(_ context.Context, r crdt.Retire) error {
	f.calls++
	f.got = r
	return nil
}

type fakeSettler struct {
	desired []networkingv1.NetworkPolicy
	set     bool
	checks  int
}

func (f *fakeSettler) SetDesired(d []networkingv1.NetworkPolicy) error {
	f.desired, f.set = d, true
	return nil
}

func (f *fakeSettler) Settled() bool { f.checks++; return f.checks > 2 }

func TestDecommissionerFlow(t *testing.T) {
	dir := t.TempDir()
	var r roles
	var stopped atomic.Bool
	released := ""
	node, ap := &fakeRetirer{}, &fakeSettler{desired: make([]networkingv1.NetworkPolicy, 1)}
	rep := store.NewMemReplica("a")
	t.Cleanup(func() { _ = rep.Close() })
	_, err := rep.Write(crdt.KindPod, "ns/p", []byte("v"), false)
	require.NoError(t, err)
	head := rep.Digest()["a"].Max
	c := &decommissioner{roles: &r, rep: rep, node: node, applier: ap, releaseGate: func(reason string) { released = reason },
		dataDir: dir, stop: func() { stopped.Store(true) }, log: discard, settle: time.Minute, poll: time.Millisecond}

	require.ErrorIs(t, c.Decommission(t.Context()), errNotLeaderDecommission, "a standby refuses")
	require.Zero(t, node.calls)
	require.NoError(t, checkNotDecommissioned(dir, "a"))

	r.leader.Store(true)
	require.NoError(t, c.Decommission(t.Context()))
	require.Equal(t, 1, node.calls, "the retirement is gossiped")
	require.Equal(t, crdt.Retire{Origin: "a", UpTo: head}, node.got, "up to the own watermark")
	require.Equal(t, head, rep.Digest()["a"].Retired, "applied locally first")
	require.True(t, r.decommissioned.Load())
	require.Equal(t, "decommission", released, "an explicit decommission releases the empty-view gate")
	require.True(t, ap.set)
	require.Empty(t, ap.desired, "every generated NetworkPolicy is removed")
	require.Greater(t, ap.checks, 2, "waits for the applier to settle")
	_, err = os.Stat(filepath.Join(dir, DecommissionedMarker))
	require.NoError(t, err)
	require.ErrorContains(t, checkNotDecommissioned(dir, "a"), "was decommissioned", "a restart is refused")
	require.Eventually(t, stopped.Load, 10*time.Second, 10*time.Millisecond, "the daemon stops")

	require.Error(t, c.Decommission(t.Context()), "only once")
	require.Equal(t, 1, node.calls)
}
