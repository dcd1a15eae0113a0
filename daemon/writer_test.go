package daemon

import (
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/store"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeWriteReplica refuses writes while its origin is retired, like the
// store does with crdt.ErrNeedsEpochBump, until the epoch is bumped.
type fakeWriteReplica struct {
	retired bool
	epoch   uint32
	written []string
	failAt  int // WriteMany fails at this op index (0 = never)
}

func (f *fakeWriteReplica) Write(kind crdt.Kind, name string, _ []byte, _ bool) (crdt.Delta, error) {
	if f.retired {
		return crdt.Delta{}, crdt.ErrNeedsEpochBump
	}
	f.written = append(f.written, name)
	return crdt.Delta{Origin: "a", Entries: []crdt.Entry{{Key: crdt.Key{Origin: "a", Kind: kind, Name: name}}}}, nil
}

func (f *fakeWriteReplica) WriteMany(ops []store.WriteOp) ([]crdt.Delta, error) {
	if f.retired {
		return nil, crdt.ErrNeedsEpochBump
	}
	var ds []crdt.Delta
	for i, op := range ops {
		if f.failAt > 0 && i == f.failAt {
			return ds, errors.New("disk full")
		}
		f.written = append(f.written, op.Name)
		ds = append(ds, crdt.Delta{Origin: "a", Entries: []crdt.Entry{{Key: crdt.Key{Origin: "a", Kind: op.Kind, Name: op.Name}}}})
	}
	return ds, nil
}

func (f *fakeWriteReplica) BumpEpoch() (uint32, error) {
	f.retired = false
	f.epoch++
	return f.epoch, nil
}

type fakePublisher struct {
	published int
	err       error
}

func (f *fakePublisher) Publish(ds ...crdt.Delta) error {
	f.published += len(ds)
	return f.err
}

func fullSyncRequested(w *writer) bool {
	select {
	case <-w.FullSyncRequests():
		return true
	default:
		return false
	}
}

// A write refused because this cluster's origin was retired moves the
// writer to a fresh epoch, succeeds, is published, and asks for a full
// sync so every other own entry is re-published too.
func TestWriterBumpsEpochWhenRetired(t *testing.T) {
	rep, pub := &fakeWriteReplica{retired: true}, &fakePublisher{}
	var dec atomic.Bool
	w := newWriter(rep, pub, &dec, discard)

	require.NoError(t, w.Write(crdt.KindPod, "ns/p", []byte("x"), false))
	require.Equal(t, uint32(1), rep.epoch)
	require.Equal(t, []string{"ns/p"}, rep.written)
	require.Equal(t, 1, pub.published)
	require.True(t, fullSyncRequested(w))

	// no retirement: no bump, no full sync
	require.NoError(t, w.Write(crdt.KindPod, "ns/q", nil, true))
	require.Equal(t, uint32(1), rep.epoch)
	require.False(t, fullSyncRequested(w))

	// a standby's publish refusal is not an error: anti-entropy carries it
	pub.err = gossip.ErrNotWriter
	require.NoError(t, w.Write(crdt.KindPod, "ns/r", nil, false))
}

func TestWriterBatchBumpsEpochWhenRetired(t *testing.T) {
	rep, pub := &fakeWriteReplica{retired: true}, &fakePublisher{}
	var dec atomic.Bool
	w := newWriter(rep, pub, &dec, discard)
	ws := []kube.Write{{Kind: crdt.KindPod, Name: "ns/a"}, {Kind: crdt.KindPod, Name: "ns/b"}}
	require.Equal(t, []error{nil, nil}, w.WriteBatch(ws))
	require.Equal(t, uint32(1), rep.epoch)
	require.Equal(t, 2, pub.published)
	require.True(t, fullSyncRequested(w))

	// a failing op: the ones before it are durable and published, the rest failed
	rep.failAt = 1
	errs := w.WriteBatch(ws)
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.Equal(t, 3, pub.published)
}

// A peer retiring our live entries bumps the epoch once and asks for a
// full sync; after a decommission nothing is written or revived.
func TestWriterOwnRetiredAndDecommissioned(t *testing.T) {
	rep, pub := &fakeWriteReplica{}, &fakePublisher{}
	var dec atomic.Bool
	w := newWriter(rep, pub, &dec, discard)
	w.OwnRetired()
	require.Equal(t, uint32(1), rep.epoch)
	require.True(t, fullSyncRequested(w))

	dec.Store(true)
	w.OwnRetired()
	require.Equal(t, uint32(1), rep.epoch, "a decommissioned cluster stays retired")
	require.ErrorIs(t, w.Write(crdt.KindPod, "ns/p", nil, false), errDecommissioned)
	for _, err := range w.WriteBatch([]kube.Write{{Kind: crdt.KindPod, Name: "ns/p"}}) {
		require.ErrorIs(t, err, errDecommissioned)
	}
	require.Empty(t, rep.written)
	require.Zero(t, pub.published)
}
