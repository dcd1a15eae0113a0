package daemon

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/store"
)

// writeReplica is what the writer needs of the replica: durable own writes
// and a fresh writer epoch when the current one was retired.
type writeReplica interface {
	Write(kind crdt.Kind, name string, value []byte, deleted bool) (crdt.Delta, error)
	WriteMany(ops []store.WriteOp) ([]crdt.Delta, error)
	BumpEpoch() (uint32, error)
}

// publisher disseminates own deltas (gossip.Node).
type publisher interface {
	Publish(deltas ...crdt.Delta) error
}

// errDecommissioned refuses writes after a decommission.
var errDecommissioned = errors.New("cluster is decommissioned")

// writer is the leader's local write path: replica (durable) then gossip.
// When the replica refuses a write because this cluster's origin was
// retired (or a newer writer epoch was seen), it moves to a fresh epoch and
// asks for a full sync, so that every own entry is re-published. It is the
// inventory's kube.Writer and kube.BatchWriter.
type writer struct {
	rep            writeReplica
	pub            publisher
	log            *slog.Logger
	decommissioned *atomic.Bool
	fullSync       chan struct{}
}

func newWriter(rep writeReplica, pub publisher, decommissioned *atomic.Bool, log *slog.Logger) *writer {
	return &writer{rep: rep, pub: pub, log: log, decommissioned: decommissioned, fullSync: make(chan struct{}, 1)}
}

// FullSyncRequests delivers a value after each epoch bump: the owner then
// re-publishes every own entry (kube.Inventory.FullSync).
func (w *writer) FullSyncRequests() <-chan struct{} { return w.fullSync }

// Write writes one own entry.
func (w *writer) Write(kind crdt.Kind, name string, value []byte, deleted bool) error {
	if w.decommissioned.Load() {
		return errDecommissioned
	}
	delta, err := w.rep.Write(kind, name, value, deleted)
	if errors.Is(err, crdt.ErrNeedsEpochBump) {
		// our own origin was retired or a newer writer epoch was seen:
		// move to a fresh epoch and re-publish everything we own.
		ep, berr := w.rep.BumpEpoch()
		if berr != nil {
			return berr
		}
		w.log.Warn("writer epoch bumped; re-publishing own entries", "epoch", ep)
		w.requestFullSync()
		delta, err = w.rep.Write(kind, name, value, deleted)
	}
	if err != nil {
		return err
	}
	w.publish(delta)
	return nil
}

// WriteBatch makes a full sync's writes durable in one transaction.
func (w *writer) WriteBatch(ws []kube.Write) []error {
	errs := make([]error, len(ws))
	if w.decommissioned.Load() {
		for i := range errs {
			errs[i] = errDecommissioned
		}
		return errs
	}
	ops := make([]store.WriteOp, len(ws))
	for i, x := range ws {
		ops[i] = store.WriteOp{Kind: x.Kind, Name: x.Name, Value: x.Value, Deleted: x.Deleted}
	}
	deltas, err := w.rep.WriteMany(ops)
	if errors.Is(err, crdt.ErrNeedsEpochBump) && len(deltas) == 0 {
		if _, berr := w.rep.BumpEpoch(); berr == nil {
			w.requestFullSync()
			deltas, err = w.rep.WriteMany(ops)
		}
	}
	w.publish(deltas...)
	if err != nil {
		// WriteMany stops at the first failing op: the ones before it are
		// durable, the rest are reported failed and retried individually.
		for i := len(deltas); i < len(errs); i++ {
			errs[i] = err
		}
	}
	return errs
}

// OwnRetired is called when a peer retired this cluster's live entries
// (e.g. after a long partition): come back at a higher epoch.
func (w *writer) OwnRetired() {
	if w.decommissioned.Load() {
		return
	}
	if _, err := w.rep.BumpEpoch(); err == nil {
		w.log.Warn("own entries were retired by a peer; re-publishing at a new epoch")
		w.requestFullSync()
	}
}

func (w *writer) publish(deltas ...crdt.Delta) {
	if len(deltas) == 0 {
		return
	}
	if err := w.pub.Publish(deltas...); err != nil && !errors.Is(err, gossip.ErrNotWriter) {
		w.log.Warn("publish failed; anti-entropy will carry it", "err", err)
	}
}

func (w *writer) requestFullSync() {
	select {
	case w.fullSync <- struct{}{}:
	default:
	}
}
