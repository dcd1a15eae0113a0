package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
)

// gcReplica is what the collector needs of the replica.
type gcReplica interface {
	Digest() crdt.Digest
	CollectGarbage(upTo crdt.Version) (crdt.Delta, []crdt.Change, error)
}

// collector garbage-collects this cluster's own tombstones older than the
// horizon (the leader runs it): it samples the own version over time and
// collects up to the newest sample at least horizon old, then publishes the
// new GC watermark.
type collector struct {
	self    string
	horizon time.Duration // 0 = never collect
	rep     gcReplica
	pub     publisher
	log     *slog.Logger
	samples []versionSample
}

type versionSample struct {
	at time.Time
	v  crdt.Version
}

func newCollector(self string, horizon time.Duration, rep gcReplica, pub publisher, log *slog.Logger) *collector {
	return &collector{self: self, horizon: horizon, rep: rep, pub: pub, log: log}
}

// Run samples every horizon/4 (at least 1s) until ctx ends.
func (c *collector) Run(ctx context.Context) {
	if c.horizon <= 0 {
		return
	}
	interval := c.horizon / 4
	if interval < time.Second {
		interval = time.Second
	}
	every(ctx, interval, func(now time.Time) { c.step(now) })
}

// step records the own version at now and collects up to the newest sample
// at least horizon old; it returns the version collected up to (0: none).
func (c *collector) step(now time.Time) crdt.Version {
	c.samples = append(c.samples, versionSample{now, c.rep.Digest()[c.self].Max})
	var upTo crdt.Version
	i := 0
	for i < len(c.samples) && now.Sub(c.samples[i].at) >= c.horizon {
		upTo = c.samples[i].v
		i++
	}
	if i > 1 {
		c.samples = c.samples[i-1:]
	}
	if upTo == 0 || upTo <= c.rep.Digest()[c.self].GC {
		return 0
	}
	delta, changes, err := c.rep.CollectGarbage(upTo)
	if err != nil {
		c.log.Warn("tombstone GC failed", "err", err)
		return 0
	}
	c.log.Debug("collected tombstones", "upTo", upTo.String(), "removed", len(changes))
	if err := c.pub.Publish(delta); err != nil && !errors.Is(err, gossip.ErrNotWriter) {
		c.log.Debug("publishing GC watermark", "err", err)
	}
	return upTo
}
