package daemon

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/store"
)

// lostOrigins keeps what this daemon knows of lost clusters: the records
// persisted in the store (and mirrored in the Mirror, which keeps their
// policies in the enforce inventory).
type lostOrigins struct {
	mu   sync.Mutex
	recs map[string]store.LostOrigin
	// handled is, per remote origin, the highest retirement the delta
	// path has handled (Apply), so that the deltas that keep carrying it
	// (after a takeover, a decommission or a loss) cost no digest.
	handled map[string]crdt.Version
	// authority is the node's retire authority (nil in an unsigned mesh,
	// whose replica accepts every retirement): an unsigned retirement it
	// refuses is refused by the replica too, so it is not recorded as a
	// loss first (a peer relaying one in every anti-entropy round would
	// cost a store write and delete each time).
	authority func(origin string) bool
	// decided latches authority's answer per origin for the length of one
	// guarded apply (decideMu serializes those), and the replica's
	// verifier asks retireAuthority, which answers from the latch: the
	// guard and the replica decide an unsigned retirement once. A
	// cluster's last heartbeat ageing past the reconnect timeout between
	// two separate checks let the replica retire it without the guard
	// having kept its MCNPs (fail open).
	decideMu sync.Mutex
	latchMu  sync.Mutex
	decided  map[string]bool
}

// retireAuthority is the retire authority of the replica's verifier: the
// latched decision during a guarded apply, the node's authority otherwise.
func (l *lostOrigins) retireAuthority(origin string) bool {
	l.latchMu.Lock()
	v, ok := l.decided[origin]
	l.latchMu.Unlock()
	if ok {
		return v
	}
	return l.authority != nil && l.authority(origin)
}

// decide latches the authority's answer for origins until the returned
// release is called.
func (l *lostOrigins) decide(origins []string) (release func()) {
	if l.authority == nil || len(origins) == 0 {
		return func() {}
	}
	l.decideMu.Lock()
	answers := make(map[string]bool, len(origins))
	for _, o := range origins { // asked without latchMu: no lock order with gossip's
		answers[o] = l.authority(o)
	}
	l.latchMu.Lock()
	l.decided = answers
	l.latchMu.Unlock()
	return func() {
		l.latchMu.Lock()
		l.decided = nil
		l.latchMu.Unlock()
		l.decideMu.Unlock()
	}
}

// decidingReplica is the replica as gossip.ConfigureReplica configures it:
// its verifier's retire authority answers through the latch.
type decidingReplica struct {
	gossip.Configurable
	lost *lostOrigins
}

// SetVerifier implements gossip.Configurable.
func (r decidingReplica) SetVerifier(v crdt.Verifier, authority crdt.RetireAuthority) {
	r.lost.authority = authority
	r.Configurable.SetVerifier(v, r.lost.retireAuthority)
}

// unsignedRetirements lists the remote origins whose deltas carry an
// unsigned retirement.
func (d *Daemon) unsignedRetirements(deltas []crdt.Delta) []string {
	var out []string
	for _, dl := range deltas {
		if dl.Origin != d.opts.ClusterID && dl.Retired != 0 && dl.RetiredSig == nil && !slices.Contains(out, dl.Origin) {
			out = append(out, dl.Origin)
		}
	}
	return out
}

// lostGuard is the replica as gossip sees it: a retirement decided by
// membership (unsigned: the cluster disappeared) first records the
// cluster's live policies as lost, so the mirror keeps enforcing them; a
// signed retirement that leaves the cluster with no entry (its
// decommission) releases them.
type lostGuard struct {
	*store.Replica
	d *Daemon
}

// A takeover's seal (a signed retirement up to the end of an epoch) that
// arrives before the new leader's re-published entries would remove the
// origin's live MCNPs until those arrive, which deletes their generated
// policies (fail open), and would look like a decommission (the origin left
// with no entry). Its MCNPs are kept like a lost cluster's until the origin
// replaces or deletes each of them; it never counts as a decommission.

// Apply implements the delta path of gossip.Replica. A delta carries its
// origin's retirement too (crdt.Delta.Retired, with its signature when the
// origin signed it), and crdt applies it before the entries, so a
// retirement that reaches this replica only inside a delta is handled
// exactly as ApplyRetire handles the same record: a takeover's seal keeps
// the MCNPs it removes until they are re-published (RELIABILITY.md,
// finding 7), an unsigned retirement relayed by a peer (the cluster is
// lost) keeps them until released, and a decommission releases them and
// forgets the cluster's pin.
func (g lostGuard) Apply(deltas ...crdt.Delta) ([]crdt.Change, error) {
	d := g.d
	defer d.lost.decide(d.unsignedRetirements(deltas))()
	rets := d.deltaRetirements(deltas)
	created := make([]bool, len(rets))
	for i, r := range rets {
		created[i] = d.beforeRetire(r)
	}
	ch, err := g.Replica.Apply(deltas...)
	if len(rets) > 0 {
		dg := g.Digest()
		for i, r := range rets {
			d.afterRetire(r, dg[r.Origin].Retired >= r.UpTo, created[i])
		}
	}
	return ch, err
}

// deltaRetirements returns the remote retirements that deltas would
// advance here, as the records ApplyRetire would get.
func (d *Daemon) deltaRetirements(deltas []crdt.Delta) []crdt.Retire {
	var rets []crdt.Retire
	d.lost.mu.Lock()
	for _, dl := range deltas {
		r := crdt.Retire{Origin: dl.Origin, UpTo: dl.Retired, Sig: dl.RetiredSig}
		if r.Origin != d.opts.ClusterID && r.UpTo != 0 && d.lost.handled[r.Origin] < r.UpTo && !d.refusedUnsigned(r) {
			rets = append(rets, r)
		}
	}
	d.lost.mu.Unlock()
	if len(rets) == 0 {
		return nil
	}
	dg := d.rep.Digest()
	news := rets[:0]
	for _, r := range rets {
		if dg[r.Origin].Retired < r.UpTo {
			news = append(news, r)
		}
	}
	return news
}

// ApplyRetire implements the retirement path of gossip.Replica.
func (g lostGuard) ApplyRetire(r crdt.Retire) ([]crdt.Change, error) {
	if r.Sig == nil && r.Origin != g.d.opts.ClusterID {
		defer g.d.lost.decide([]string{r.Origin})()
	}
	created := g.d.beforeRetire(r)
	ch, err := g.Replica.ApplyRetire(r)
	g.d.afterRetire(r, g.Digest()[r.Origin].Retired >= r.UpTo, created)
	return ch, err
}

// beforeRetire records a remote origin's live MCNPs as kept before r
// removes them, when r is a takeover's seal (told by its shape: it ends
// exactly at an epoch's end, signed or, in an unsigned mesh, not) or a loss
// (unsigned: decided by membership, unless lost origins are released at
// once), and reports whether it created a new record.
func (d *Daemon) beforeRetire(r crdt.Retire) bool {
	if d.refusedUnsigned(r) {
		return false // the replica refuses it: nothing to keep
	}
	remote := r.Origin != d.opts.ClusterID
	seal := remote && r.UpTo.EpochEnd() // a decommission retires up to the writer's real head
	if remote && ((r.Sig == nil && !d.opts.ReleaseLostOrigins) || seal) {
		return d.noteLost(r, seal)
	}
	return false
}

// refusedUnsigned reports whether r is an unsigned retirement that the
// replica's retire authority refuses (the cluster still has live members
// in this node's view). authority is set once, before gossip starts.
func (d *Daemon) refusedUnsigned(r crdt.Retire) bool {
	return r.Sig == nil && d.lost.authority != nil && !d.lost.retireAuthority(r.Origin)
}

// afterRetire finishes r once the replica has decided on it: a refused
// retirement drops the record beforeRetire created (an earlier loss stays
// kept); a signed retirement that is no seal and leaves the origin with no
// live entry is its decommission: its kept MCNPs are released and its pin
// is forgotten.
func (d *Daemon) afterRetire(r crdt.Retire, applied, created bool) {
	if !applied {
		if created {
			d.dropLost(r.Origin, "")
		}
		return
	}
	remote := r.Origin != d.opts.ClusterID
	if remote {
		d.lost.mu.Lock()
		if d.lost.handled == nil {
			d.lost.handled = map[string]crdt.Version{}
		}
		d.lost.handled[r.Origin] = max(d.lost.handled[r.Origin], r.UpTo)
		d.lost.mu.Unlock()
	}
	if remote && r.Sig != nil && !r.UpTo.EpochEnd() && d.originEmpty(r.Origin) {
		d.dropLost(r.Origin, "decommissioned")
		go d.forgetPins(r.Origin) // API calls: not on gossip's apply path
	}
}

// originEmpty reports whether the replica holds no live entry of origin.
func (d *Daemon) originEmpty(origin string) bool {
	empty := true
	d.rep.View(func(st *crdt.State) {
		for _, s := range crdt.Kinds() {
			st.Range(origin, s.Kind, func(e crdt.Entry) bool {
				empty = e.Deleted
				return empty
			})
			if !empty {
				return
			}
		}
	})
	return empty
}

// noteLost records the live policies of origin at or below r.UpTo as lost,
// before the retirement is applied (merged into the record of an earlier
// loss, if any), and reports whether it created a new record.
func (d *Daemon) noteLost(r crdt.Retire, seal bool) bool {
	var kept []crdt.Entry
	d.rep.View(func(st *crdt.State) {
		st.Range(r.Origin, crdt.KindPolicy, func(e crdt.Entry) bool {
			if !e.Deleted && e.Version <= r.UpTo {
				e.Value, e.Sig = bytes.Clone(e.Value), bytes.Clone(e.Sig)
				kept = append(kept, e)
			}
			return true
		})
	})
	d.lost.mu.Lock()
	defer d.lost.mu.Unlock()
	rec, had := d.lost.recs[r.Origin]
	if len(kept) == 0 && !had {
		return false
	}
	names := map[string]bool{}
	for _, e := range kept {
		names[e.Name] = true
	}
	for _, e := range rec.Policies { // kept from an earlier loss
		if !names[e.Name] {
			kept = append(kept, e)
		}
	}
	if !had {
		rec.Since = d.now().UnixNano()
	}
	rec.Origin, rec.UpTo, rec.Policies = r.Origin, max(rec.UpTo, r.UpTo), kept
	d.persistLost(rec)
	d.lost.recs[r.Origin] = rec
	d.mu.Lock()
	d.mirror.MarkLost(r.Origin, rec.UpTo)
	d.mu.Unlock()
	d.m.lostPolicies.WithLabelValues(r.Origin).Set(float64(len(kept)))
	if seal {
		d.m.lostEvents.WithLabelValues("sealed").Inc()
		d.log.Info("a takeover's seal arrived before the cluster's re-published MCNPs: they stay enforced here from their last-known state until re-published",
			"remote_cluster", r.Origin, "policies", len(kept), "upto", r.UpTo.String())
		return !had
	}
	d.m.lostEvents.WithLabelValues("lost").Inc()
	d.log.Warn("cluster lost (retired without a decommission): its MCNPs stay enforced here from their last-known state until released",
		"remote_cluster", r.Origin, "policies", len(kept), "release", "kubectl coastguard release-lost "+r.Origin)
	return !had
}

// dropLost stops keeping origin's policies (released, decommissioned,
// rewritten by the origin, or a refused retirement when event is "") and
// re-enforces the policies concerned.
func (d *Daemon) dropLost(origin, event string) {
	d.lost.mu.Lock()
	_, had := d.lost.recs[origin]
	delete(d.lost.recs, origin)
	d.lost.mu.Unlock()
	d.mu.Lock()
	keys := d.mirror.ReleaseLost(origin)
	d.mu.Unlock()
	if !had && len(keys) == 0 {
		return
	}
	if st := d.rep.Store(); st != nil {
		if err := st.DeleteLost(origin); err != nil {
			d.m.lostEvents.WithLabelValues("store_error").Inc()
			d.log.Error("cannot delete the lost-origin record; it will be kept again after a restart", "remote_cluster", origin, "err", err)
		}
	}
	d.m.lostPolicies.DeleteLabelValues(origin)
	if len(keys) > 0 && d.enforce != nil {
		d.enforce.Mark(keys...)
	}
	if event != "" {
		d.m.lostEvents.WithLabelValues(event).Inc()
		d.log.Warn("lost cluster's MCNPs no longer enforced here", "remote_cluster", origin, "why", event, "policies", len(keys))
	}
}

// lostChanged follows the mirror after a batch: a lost origin back in the
// mesh replaced or deleted some kept policies itself; once none is left,
// it is no longer lost.
func (d *Daemon) lostChanged(origins []string) {
	for _, origin := range origins {
		d.mu.Lock()
		names := d.mirror.LostPolicies()[origin]
		d.mu.Unlock()
		if len(names) == 0 {
			d.dropLost(origin, "back")
			continue
		}
		keep := map[string]bool{}
		for _, n := range names {
			keep[n] = true
		}
		d.lost.mu.Lock()
		rec := d.lost.recs[origin]
		var left []crdt.Entry
		for _, e := range rec.Policies {
			if keep[e.Name] {
				left = append(left, e)
			}
		}
		rec.Policies = left
		d.lost.recs[origin] = rec
		d.persistLost(rec)
		d.lost.mu.Unlock()
		d.m.lostPolicies.WithLabelValues(origin).Set(float64(len(left)))
	}
}

func (d *Daemon) persistLost(rec store.LostOrigin) {
	st := d.rep.Store()
	if st == nil {
		return
	}
	if err := st.PutLost(rec); err != nil {
		d.m.lostEvents.WithLabelValues("store_error").Inc()
		d.log.Error("cannot persist the lost-origin record; its policies are kept only until this daemon restarts",
			"remote_cluster", rec.Origin, "err", err)
	}
}

// restoreLost puts the kept policies of lost origins back after the state
// was loaded (d.mu held; before any other goroutine runs, so d.lost needs
// no lock here: elsewhere the order is d.lost.mu, then d.mu).
func (d *Daemon) restoreLost() {
	st := d.rep.Store()
	if st == nil {
		return
	}
	recs, err := st.LostOrigins()
	if err != nil {
		d.m.lostEvents.WithLabelValues("store_error").Inc()
		d.log.Error("lost-origin records could not all be read; those are no longer enforced", "err", err)
	}
	for origin, rec := range recs {
		_, errs := d.mirror.RestoreLost(origin, rec.UpTo, rec.Policies)
		for _, e := range errs {
			d.log.Warn("skipping a kept policy of a lost cluster", "remote_cluster", origin, "err", e)
		}
		n := len(d.mirror.LostPolicies()[origin])
		if n == 0 { // the cluster is back and holds them all again
			d.mirror.ReleaseLost(origin)
			if err := st.DeleteLost(origin); err != nil {
				d.log.Error("cannot delete the lost-origin record", "remote_cluster", origin, "err", err)
			}
			continue
		}
		d.lost.recs[origin] = rec
		d.m.lostPolicies.WithLabelValues(origin).Set(float64(n))
		d.log.Warn("lost cluster's MCNPs restored from the store: still enforced here until released", "remote_cluster", origin, "policies", n)
	}
}

// lostNames returns the kept policies per lost origin (for status).
func (d *Daemon) lostNames() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mirror.LostPolicies()
}

// releaseLoop applies release annotations on CoastguardCluster objects, in
// every daemon of this cluster (leader and standby keep their own records).
// It reads the API only while something is kept.
func (d *Daemon) releaseLoop(ctx context.Context) {
	if d.opts.Dynamic == nil {
		return
	}
	every(ctx, ClusterSetInterval, func(time.Time) {
		// the epoch a lost cluster is known at here (its CoastguardCluster's
		// status.epoch, which release-lost copies into the annotation)
		digest := d.rep.Digest()
		d.lost.mu.Lock()
		lostAt := make(map[string]uint32, len(d.lost.recs))
		for o := range d.lost.recs {
			lostAt[o] = digest[o].Max.Epoch()
		}
		d.lost.mu.Unlock()
		for origin, epoch := range lostAt {
			u, err := d.opts.Dynamic.Resource(v1.CoastguardClusterGVR).Get(ctx, origin, metav1.GetOptions{})
			if err != nil {
				continue // not written yet (or not found): nothing to release
			}
			at, ok := u.GetAnnotations()[v1.AnnotationReleaseLostOrigin]
			if !ok {
				continue
			}
			released, err := strconv.ParseUint(at, 10, 32)
			if err != nil {
				d.log.Warn("ignoring a malformed release annotation (want the epoch the cluster was lost at)", "remote_cluster", origin,
					"annotation", v1.AnnotationReleaseLostOrigin, "value", at)
				continue
			}
			if uint32(released) >= epoch {
				d.dropLost(origin, "released")
			}
		}
	})
}
