package daemon

import (
	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Unproven inventory entries (issue 29, item 1, the pod half). A live pod,
// namespace or Service entry of another cluster that lies above its
// origin's proven watermark may be a key holder's resurrection of a deleted
// (and collected) pod, whose IP may belong to someone else by now, or an
// old label set. Such an entry only ever widens what a policy admits, so
// the mirror does not see it until it is proven: the change feed passes
// the mirror a removal instead (fail closed: an IP drops out of the allow
// lists, nothing is added), and the proven loop hands the entry over once
// the origin's signed mark covers it. Honest traffic is proven as it
// arrives (every push carries its origin's mark), so only out-of-order
// arrivals and lies are held. Policies are held by the applier instead
// (proven.go): removing an MCNP would open what it isolates.

// heldKinds are the kinds whose unproven live entries are held back.
var heldKinds = map[crdt.Kind]bool{crdt.KindPod: true, crdt.KindNamespace: true, crdt.KindService: true}

// inventoryHold is the set of held entries: key -> the version held. The
// mirror has nothing for a held key. Not safe for concurrent use (the view
// lock guards it).
type inventoryHold struct {
	self string
	held map[crdt.Key]crdt.Version
}

func newInventoryHold(self string) *inventoryHold {
	return &inventoryHold{self: self, held: map[crdt.Key]crdt.Version{}}
}

// entryUnproven reports whether e lies above its origin's proven watermark.
func entryUnproven(dg crdt.Digest, e *crdt.Entry) bool {
	od, ok := dg[e.Origin]
	return ok && !allProven(od) && e.Version > od.Max
}

// filter rewrites a committed batch for the mirror: a held key's old value
// is one the mirror never saw, and a new unproven live value is held (the
// mirror removes what it had for the key).
func (h *inventoryHold) filter(changes []crdt.Change, dg crdt.Digest) []crdt.Change {
	out := make([]crdt.Change, 0, len(changes))
	for _, ch := range changes {
		if !heldKinds[ch.Key.Kind] || ch.Key.Origin == h.self {
			out = append(out, ch)
			continue
		}
		if _, was := h.held[ch.Key]; was {
			ch.Old = nil
		}
		if ch.New != nil && !ch.New.Deleted && entryUnproven(dg, ch.New) {
			h.held[ch.Key] = ch.New.Version
			ch.New = nil
		} else {
			delete(h.held, ch.Key)
		}
		if ch.Old != nil || ch.New != nil {
			out = append(out, ch)
		}
	}
	return out
}

// holdLoaded holds the unproven entries of a freshly loaded state: it
// returns the removals that take them out of a mirror loaded from st.
func (h *inventoryHold) holdLoaded(st *crdt.State, dg crdt.Digest) []crdt.Change {
	var out []crdt.Change
	for origin, od := range dg {
		if origin == h.self || allProven(od) {
			continue
		}
		for kind := range heldKinds {
			st.Range(origin, kind, func(e crdt.Entry) bool {
				if !e.Deleted && e.Version > od.Max {
					h.held[e.Key] = e.Version
					out = append(out, crdt.Change{Key: e.Key, Old: &e})
				}
				return true
			})
		}
	}
	return out
}

// release hands over the held entries that st now holds at the held
// version and that dg proves: each as the change that gives it to the
// mirror, no longer held. A held key whose entry moved on is left alone
// (its change is on its way through the feed, which decides again).
func (h *inventoryHold) release(st *crdt.State, dg crdt.Digest) []crdt.Change {
	var out []crdt.Change
	for k, v := range h.held {
		e, ok := st.Get(k)
		if !ok || e.Version != v || entryUnproven(dg, &e) {
			continue
		}
		delete(h.held, k)
		out = append(out, crdt.Change{Key: k, New: &e})
	}
	return out
}

// len is the number of held entries.
func (h *inventoryHold) len() int { return len(h.held) }
