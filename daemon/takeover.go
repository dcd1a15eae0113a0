package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// errNotActing: the daemon is not (or no longer) the acting leader.
var errNotActing = errors.New("not the acting leader")

// errEpochMoved: the writer epoch changed while a takeover ran; it runs again.
var errEpochMoved = errors.New("takeover incomplete")

// takeover makes a new writer epoch authoritative for the own origin. A
// leader may take over from a replica that missed the previous leader's
// last writes; writing only the difference against its own replica would
// leave such an entry (a deleted pod, still live elsewhere) in place
// forever. So it first re-publishes every own live entry at the current
// epoch (the inventory from this cluster's API server, the reports as they
// are), and then seals every prior epoch: what an earlier leader wrote and
// this replica never received is retired everywhere, and refused should it
// arrive later. The order matters: sealing first would retire the live
// entries too, until re-published.
type takeover struct {
	epoch func() uint32
	// fence records the epoch on the Lease (a writer epoch bumped during
	// the term must be fenced too); an error stops the takeover.
	fence     func() error
	republish []func() error // each rewrites its entries at the current epoch
	// settle waits for the re-publication to propagate before the seal (a
	// peer that got the seal first would drop live entries until their
	// re-published versions arrive: fail closed, but needless); an error
	// (the term ended) stops the takeover.
	settle  func() error
	seal    func(below uint32) (crdt.Retire, []crdt.Change, error)
	publish func(crdt.Retire) // disseminate the seal
}

// run re-publishes, then seals. At epoch 1 there is nothing prior to seal.
func (t takeover) run() error {
	epoch := t.epoch()
	if t.fence != nil {
		if err := t.fence(); err != nil {
			return err
		}
	}
	if epoch < 2 {
		return nil
	}
	for _, f := range t.republish {
		if err := f(); err != nil {
			return fmt.Errorf("re-publish before sealing: %w", err)
		}
	}
	if t.settle != nil {
		if err := t.settle(); err != nil {
			return err
		}
	}
	// Seal below the epoch the entries were re-published at, never below a
	// newer one: that would retire them too until written again (a replica
	// refilled from its peers bumps its epoch when it learns of its own
	// earlier writes, often during the settle wait).
	r, _, err := t.seal(epoch)
	if err != nil {
		return fmt.Errorf("seal prior epochs: %w", err)
	}
	t.publish(r)
	if now := t.epoch(); now != epoch {
		// entries an earlier leader wrote at epochs in [epoch, now) are not
		// sealed yet: re-publish at the new epoch and seal again
		return fmt.Errorf("%w: the writer epoch moved from %d to %d during the takeover", errEpochMoved, epoch, now)
	}
	return nil
}

// newTakeover wires a takeover to the daemon's replica, inventory, reporter
// and gossip node. The re-publication settles for two anti-entropy
// intervals before the seal.
func (d *Daemon) newTakeover(ctx context.Context) takeover {
	ae := d.opts.Gossip.AntiEntropyInterval
	if ae <= 0 {
		ae = time.Second // gossip's default
	}
	return takeover{
		epoch:     d.rep.Epoch,
		fence:     func() error { return d.fenceEpoch(ctx) },
		republish: []func() error{d.inv.Republish, d.reports.Republish},
		settle: func() error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * ae):
				return nil
			}
		},
		seal:    d.rep.SealEpochsBelow,
		publish: d.node.PublishRetire,
	}
}

// takeoverLoop runs a takeover once the inventory caches are synced, and
// again after every writer epoch bump (the writer's full-sync requests),
// retrying a failed one with backoff, until the term ends.
func (d *Daemon) takeoverLoop(ctx context.Context) {
	if err := d.inv.WaitForSync(ctx); err != nil {
		return
	}
	t := d.newTakeover(ctx)
	for {
		for backoff := 250 * time.Millisecond; ; backoff = min(2*backoff, 30*time.Second) {
			if d.decommissioned.Load() {
				return
			}
			err := t.run()
			if err == nil {
				d.log.Info("took over: own entries re-published and prior epochs sealed", "epoch", d.rep.Epoch())
				break
			}
			if ctx.Err() != nil {
				return // the term ended: there is nothing to retry
			}
			d.log.Warn("takeover failed; will retry", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-d.w.FullSyncRequests():
		}
	}
}
