package daemon

import (
	"context"
	"strings"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Unproven MCNPs (issue 29, item 1). A receiver merges a validly signed
// entry even when the frame around it lies; only its watermark waits for a
// state mark its own records reproduce. An MCNP entry above its origin's
// proven watermark may therefore be a key holder's resurrection of a
// deleted policy, or a fragment of a range whose rest was skipped. The
// applier leaves the generated NetworkPolicies of such MCNPs exactly as
// they are (not created, changed or deleted) until the entry is proven or
// dropped by an honest stream; honest traffic is proven as it arrives
// (every push carries its origin's mark), so only out-of-order arrivals
// and lies wait.

// provenEvery is how often the unproven set is recomputed: a watermark can
// move without a change to any entry (a reproduced mark), so the set is
// polled, not derived from the change feed.
const provenEvery = 250 * time.Millisecond

// allProven reports whether an origin holds nothing above its proven
// watermark (no record received out of order, none below a GC watermark it
// has not caught up with).
func allProven(od crdt.OriginDigest) bool { return od.Top <= od.Max && od.Max >= od.GC }

// unprovenPolicies lists the MCNPs (origin/namespace/name) of other
// clusters whose entry lies above its origin's proven watermark. The own
// cluster's MCNPs are never unproven here: its leader writes them from its
// own apiserver and its full sync deletes what the apiserver does not hold,
// so a replayed own entry does not outlive a leader's start, while freezing
// them left the leader's own generated policy stale (nemesis seed 29206: a
// new leader whose own watermark stayed at the sealed epoch's end kept a
// deleted pod's IP admitted).
func unprovenPolicies(self string, dg crdt.Digest, view func(func(*crdt.State))) map[string]struct{} {
	out := map[string]struct{}{}
	view(func(st *crdt.State) {
		for o, od := range dg {
			if o == self || allProven(od) {
				continue
			}
			st.Range(o, crdt.KindPolicy, func(e crdt.Entry) bool {
				if e.Version > od.Max {
					out[o+"/"+e.Name] = struct{}{}
				}
				return true
			})
		}
	})
	return out
}

// policyUnproven is the applier's decision-time check for one MCNP
// (origin/namespace/name).
func (d *Daemon) policyUnproven(ref string) bool {
	origin, name, ok := strings.Cut(ref, "/")
	if !ok {
		return false
	}
	od, present := d.rep.Digest()[origin]
	if origin == d.opts.ClusterID || !present || allProven(od) {
		return false
	}
	var e crdt.Entry
	d.rep.View(func(st *crdt.State) { e, ok = st.Get(crdt.Key{Origin: origin, Kind: crdt.KindPolicy, Name: name}) })
	return ok && e.Version > od.Max
}

// provenLoop keeps the applier's unproven set current and hands the held
// inventory entries proven since to the mirror.
func (d *Daemon) provenLoop(ctx context.Context) {
	every(ctx, provenEvery, func(time.Time) {
		dg := d.rep.Digest()
		d.applier.SetUnproven(unprovenPolicies(d.opts.ClusterID, dg, d.rep.View))
		d.afterMirror(d.mirrorBatch(nil, dg), 0) // held entries proven by now
	})
}

// holdLoaded takes the unproven inventory entries of the loaded state out
// of the mirror (the view lock is held: openState).
func (d *Daemon) holdLoaded() {
	dg := d.rep.Digest()
	var ch []crdt.Change
	d.rep.View(func(st *crdt.State) { ch = d.hold.holdLoaded(st, dg) })
	if res := d.mirror.Apply(ch); len(res.Errors) > 0 {
		for _, e := range res.Errors {
			d.log.Warn("skipping undecodable entry", "err", e)
		}
	}
	d.m.unprovenHeld.Set(float64(d.hold.len()))
}
