package daemon

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// fakeGCReplica holds the own origin's watermarks and records collections.
type fakeGCReplica struct {
	max, gc   crdt.Version
	collected []crdt.Version
	err       error
}

func (f *fakeGCReplica) Digest() crdt.Digest {
	return crdt.Digest{"a": {Max: f.max, GC: f.gc}, "b": {Max: 1000}}
}

func (f *fakeGCReplica) CollectGarbage(upTo crdt.Version) (crdt.Delta, []crdt.Change, error) {
	if f.err != nil {
		return crdt.Delta{}, nil, f.err
	}
	f.collected = append(f.collected, upTo)
	f.gc = upTo
	return crdt.Delta{Origin: "a", GC: upTo}, nil, nil
}

// The GC horizon: a tombstone is collected only once the own version it
// was written at is at least the horizon old, never earlier; the GC
// watermark is published; nothing is collected twice.
func TestCollectorHorizon(t *testing.T) {
	rep, pub := &fakeGCReplica{}, &fakePublisher{}
	c := newCollector("a", time.Hour, rep, pub, discard)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add

	rep.max = 10
	require.Zero(t, c.step(at(0)), "nothing is old enough yet")
	rep.max = 20
	require.Zero(t, c.step(at(15*time.Minute)))
	rep.max = 30
	require.Zero(t, c.step(at(59*time.Minute)), "one minute short of the horizon")
	require.Empty(t, rep.collected)

	rep.max = 40
	require.Equal(t, crdt.Version(10), c.step(at(time.Hour)), "the version seen an hour ago")
	require.Equal(t, 1, pub.published)
	rep.max = 50
	require.Equal(t, crdt.Version(30), c.step(at(time.Hour+59*time.Minute)),
		"the newest sample at least an hour old, not a younger one")
	require.Zero(t, c.step(at(time.Hour+59*time.Minute+time.Second)), "already collected up to there")
	require.Equal(t, []crdt.Version{10, 30}, rep.collected)
	require.LessOrEqual(t, len(c.samples), 4, "old samples are dropped")
}

func TestCollectorFailureAndDisabled(t *testing.T) {
	rep, pub := &fakeGCReplica{max: 5, err: errors.New("disk full")}, &fakePublisher{}
	c := newCollector("a", time.Minute, rep, pub, discard)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.step(t0)
	require.Zero(t, c.step(t0.Add(time.Minute)))
	require.Zero(t, pub.published, "a failed collection publishes no watermark")

	// horizon 0: Run returns at once and collects nothing
	off := newCollector("a", 0, rep, pub, discard)
	off.Run(t.Context())
	require.Empty(t, off.samples)
}
