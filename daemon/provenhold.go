package daemon

import (
	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Unproven inventory entries (issue 29, item 1, the pod half). A live pod,
// namespace or Service entry of another cluster that lies above its
// origin's proven watermark may be a key holder's resurrection of a deleted
// (and collected) pod, whose IP may belong to someone else by now, or an
// old label set. The mirror never sees such an entry until the origin's
// signed mark covers it; it keeps what it last held for the key instead:
//   - nothing, or a deletion: the unproven entry is held and the mirror
//     keeps nothing (fail closed: an IP stays out of the allow lists);
//   - a proven live value: the mirror keeps that value, the last state the
//     origin proved (as a partition keeps its last-known state). Dropping
//     it would shrink every allow list at every remote whenever honest
//     updates arrive out of order, as they do when a new leader
//     re-publishes its whole inventory (takeover.go); and it is nothing a
//     liar could not have caused by withholding the update.
// The proven loop hands the entry over once the origin's mark covers it. A
// deletion is never held. Honest traffic is proven as it arrives (every
// push carries its origin's mark), so only out-of-order arrivals and lies
// are held. Policies are held by the applier instead (proven.go): removing
// an MCNP would open what it isolates.

// heldKinds are the kinds whose unproven live entries are held back.
var heldKinds = map[crdt.Kind]bool{crdt.KindPod: true, crdt.KindNamespace: true, crdt.KindService: true}

// inventoryHold is the set of held entries. The mirror has, for a held key,
// the proven value kept (nil: nothing). Not safe for concurrent use (the
// view lock guards it).
type inventoryHold struct {
	self string
	held map[crdt.Key]heldEntry
}

// heldEntry is one held key: the unproven version waiting for its proof,
// and the live value the mirror keeps meanwhile (nil: none).
type heldEntry struct {
	version crdt.Version
	kept    *crdt.Entry
}

func newInventoryHold(self string) *inventoryHold {
	return &inventoryHold{self: self, held: map[crdt.Key]heldEntry{}}
}

// entryUnproven reports whether e lies above its origin's proven watermark.
func entryUnproven(dg crdt.Digest, e *crdt.Entry) bool {
	od, ok := dg[e.Origin]
	return ok && !allProven(od) && e.Version > od.Max
}

// filter rewrites a committed batch for the mirror: the old value of a
// held key is what the mirror kept, and a new unproven live value is held
// (the mirror keeps a proven live value it had, and holds nothing else).
func (h *inventoryHold) filter(changes []crdt.Change, dg crdt.Digest) []crdt.Change {
	out := make([]crdt.Change, 0, len(changes))
	for _, ch := range changes {
		if !heldKinds[ch.Key.Kind] || ch.Key.Origin == h.self {
			out = append(out, ch)
			continue
		}
		if he, was := h.held[ch.Key]; was {
			ch.Old = he.kept
		}
		if ch.New != nil && !ch.New.Deleted && entryUnproven(dg, ch.New) {
			he := heldEntry{version: ch.New.Version}
			if ch.Old != nil && !ch.Old.Deleted {
				he.kept = ch.Old
			}
			h.held[ch.Key] = he
			if he.kept != nil {
				continue // the mirror keeps the proven value
			}
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
					h.held[e.Key] = heldEntry{version: e.Version}
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
// mirror (replacing what it kept), no longer held. A held key whose entry
// moved on is left alone (its change is on its way through the feed, which
// decides again).
func (h *inventoryHold) release(st *crdt.State, dg crdt.Digest) []crdt.Change {
	var out []crdt.Change
	for k, he := range h.held {
		e, ok := st.Get(k)
		if !ok || e.Version != he.version || entryUnproven(dg, &e) {
			continue
		}
		delete(h.held, k)
		out = append(out, crdt.Change{Key: k, Old: he.kept, New: &e})
	}
	return out
}

// len is the number of held entries.
func (h *inventoryHold) len() int { return len(h.held) }
