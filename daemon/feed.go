package daemon

import (
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
)

// persistedOwn lists this cluster's own live entries for the inventory diff.
func (d *Daemon) persistedOwn() (kube.Snapshot, error) {
	var snap kube.Snapshot
	d.rep.View(func(st *crdt.State) { snap = kube.OwnSnapshot(st, d.opts.ClusterID, kube.InventoryKinds) })
	return snap, nil
}

// onChanges is the replica's change feed (called after commit, in order).
func (d *Daemon) onChanges(changes []crdt.Change) {
	var newest int64
	ownRemoved := false
	for _, ch := range changes {
		if ch.New != nil && ch.New.Stamp > newest {
			newest = ch.New.Stamp
		}
		if ch.Key.Origin == d.opts.ClusterID && ch.New == nil && ch.Old != nil && !ch.Old.Deleted {
			ownRemoved = true
		}
	}
	res := d.mirrorBatch(changes, d.rep.Digest())
	d.afterMirror(res, newest)
	if ownRemoved && d.leader.Load() {
		d.w.OwnRetired()
	}
}

// mirrorBatch folds a committed batch into the mirror through the hold
// (provenhold.go), with the held entries that dg proves by now: an
// out-of-order arrival whose gap this batch filled is handed over at once,
// not at the next proven tick. A nil batch only hands over.
func (d *Daemon) mirrorBatch(changes []crdt.Change, dg crdt.Digest) model.Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(changes) == 0 && d.hold.len() == 0 {
		return model.Result{}
	}
	batch := d.hold.filter(changes, dg)
	if d.hold.len() > 0 {
		d.rep.View(func(st *crdt.State) { batch = append(batch, d.hold.release(st, dg)...) })
	}
	res := d.mirror.Apply(batch)
	d.m.unprovenHeld.Set(float64(d.hold.len()))
	return res
}

// afterMirror marks what a batch folded into the mirror changed: the
// affected policies for the enforcer, own policies for status, lost
// origins.
func (d *Daemon) afterMirror(res model.Result, newest int64) {
	for _, e := range res.Errors {
		d.m.decodeErrors.Inc()
		d.log.Warn("skipping undecodable entry", "err", e)
	}
	d.enf.NoteStamp(newest)
	switch {
	case res.All:
		d.enforce.Mark(allPolicies)
	case len(res.Affected) > 0:
		d.enforce.Mark(res.Affected...)
	}
	if len(res.StatusDirty) > 0 {
		d.stat.Mark(res.StatusDirty...)
	}
	if len(res.LostChanged) > 0 {
		d.lostChanged(res.LostChanged)
	}
}
