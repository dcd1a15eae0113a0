package daemon

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/store"
)

// lostOrigins keeps what this daemon knows of lost clusters: the records
// persisted in the store (and mirrored in the Mirror, which keeps their
// policies in the enforce inventory).
type lostOrigins struct {
	mu   sync.Mutex
	recs map[string]store.LostOrigin
	// seals is, per remote origin, the highest retirement the delta path
	// has handled (Apply), so that the deltas that keep carrying it after a
	// takeover cost no digest.
	seals map[string]crdt.Version
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
// origin's retirement too (crdt.Delta.Retired), and crdt applies it before
// the entries, so a takeover's seal that reaches this replica inside a
// delta, ahead of the re-published entries, must keep the MCNPs it removes
// exactly as ApplyRetire does (RELIABILITY.md, finding 7: the generated
// policy left two clusters for 80-480 ms while the re-published MCNP was
// on its way).
func (g lostGuard) Apply(deltas ...crdt.Delta) ([]crdt.Change, error) {
	d := g.d
	var seals []crdt.Retire
	for _, dl := range deltas {
		if dl.Origin == d.opts.ClusterID || dl.Retired == 0 || !isEpochSeal(dl.Retired) {
			continue
		}
		d.lost.mu.Lock()
		handled := d.lost.seals[dl.Origin] >= dl.Retired
		d.lost.mu.Unlock()
		if !handled {
			seals = append(seals, crdt.Retire{Origin: dl.Origin, UpTo: dl.Retired, Sig: dl.RetiredSig})
		}
	}
	var created []string
	if len(seals) > 0 {
		dg := g.Digest()
		for _, r := range seals {
			if dg[r.Origin].Retired < r.UpTo && d.noteLost(r, true) {
				created = append(created, r.Origin)
			}
		}
	}
	ch, err := g.Replica.Apply(deltas...)
	if err != nil && len(ch) == 0 {
		for _, o := range created { // refused: nothing was sealed here
			d.dropLost(o, "")
		}
		return ch, err
	}
	if len(seals) > 0 {
		dg := g.Digest()
		d.lost.mu.Lock()
		if d.lost.seals == nil {
			d.lost.seals = map[string]crdt.Version{}
		}
		for _, r := range seals {
			d.lost.seals[r.Origin] = max(d.lost.seals[r.Origin], dg[r.Origin].Retired)
		}
		d.lost.mu.Unlock()
	}
	return ch, err
}

// ApplyRetire implements the retirement path of gossip.Replica.
func (g lostGuard) ApplyRetire(r crdt.Retire) ([]crdt.Change, error) {
	d := g.d
	remote := r.Origin != d.opts.ClusterID
	seal := remote && r.Sig != nil && isEpochSeal(r.UpTo)
	created := false
	if remote && ((r.Sig == nil && !d.opts.ReleaseLostOrigins) || seal) {
		created = d.noteLost(r, seal)
	}
	ch, err := g.Replica.ApplyRetire(r)
	switch {
	case err != nil && len(ch) == 0:
		if created { // refused: nothing was lost (an earlier loss stays kept)
			d.dropLost(r.Origin, "")
		}
	case remote && r.Sig != nil && !seal && d.originEmpty(r.Origin):
		d.dropLost(r.Origin, "decommissioned")
		go d.forgetPins(r.Origin) // API calls: not on gossip's apply path
	}
	return ch, err
}

// isEpochSeal reports whether a retirement ends exactly at the end of an
// epoch, as a takeover's seal does (crdt.SealEpochsBelow); a decommission
// retires up to the writer's real head.
func isEpochSeal(upTo crdt.Version) bool {
	return upTo == crdt.MakeVersion(upTo.Epoch()+1, 0)-1
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
