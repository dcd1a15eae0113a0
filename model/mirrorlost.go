package model

import (
	"fmt"
	"slices"
	"sort"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Lost origins in the mirror (docs/SEMANTICS.md, "Lost origins"). When a
// cluster disappears and is retired by membership, its entries are removed
// from the replica like any retirement; the mirror removes its pods,
// namespaces and labels (which only narrows what other policies admit) but
// keeps the policies it originated, so that their protection does not leave
// with their origin. They stay until released (an explicit action in this
// cluster, or the origin's decommission), or until the origin, back in the
// mesh, replaces or deletes each of them itself.

// lostOrigin is what the mirror keeps of one lost origin.
type lostOrigin struct {
	upTo crdt.Version    // the retirement that lost it
	kept map[string]bool // names (namespace/name) of the policies kept
}

// MarkLost records origin as lost by a retirement up to upTo, before that
// retirement is applied: its removal of the origin's live policies (at or
// below upTo) is then ignored. Later removals (the origin back, sealing
// its own newer epochs) are applied as usual.
func (m *Mirror) MarkLost(origin string, upTo crdt.Version) {
	l := m.lost[origin]
	if l == nil {
		l = &lostOrigin{kept: map[string]bool{}}
		m.lost[origin] = l
	}
	l.upTo = max(l.upTo, upTo)
}

// keepLost reports whether the change removes (by retirement: no tombstone
// left) a policy of a lost origin, which is then kept. Any other change of
// such a policy (the origin back, writing or deleting it) ends the keeping
// of that one policy.
func (m *Mirror) keepLost(k crdt.Key, ch crdt.Change) bool {
	l := m.lost[k.Origin]
	if l == nil {
		return false
	}
	if ch.New == nil && live(ch.Old) && ch.Old.Version <= l.upTo {
		l.kept[k.Name] = true
		return true
	}
	if l.kept[k.Name] {
		delete(l.kept, k.Name)
		m.lostDirty(k.Origin)
	}
	return false
}

// RestoreLost puts a lost origin's kept policies (from the store) back into
// the inventory at start-up, except those the replica holds live again, and
// returns the policies restored.
func (m *Mirror) RestoreLost(origin string, upTo crdt.Version, entries []crdt.Entry) ([]enforce.PolicyRef, []error) {
	m.MarkLost(origin, upTo)
	var keys []enforce.PolicyRef
	var errs []error
	for i := range entries {
		e := entries[i]
		if e.Origin != origin || e.Kind != crdt.KindPolicy || e.Deleted {
			errs = append(errs, fmt.Errorf("lost origin %s: entry %s is not one of its live policies", origin, e.Key))
			continue
		}
		ref, ok := policyRef(e.Key)
		if !ok {
			errs = append(errs, fmt.Errorf("lost origin %s: %s: policy name is not namespace/name", origin, e.Key))
			continue
		}
		if _, held := m.inv.Policy(ref); held {
			continue // the origin is back and wrote it again
		}
		if _, err := m.applyPolicy(crdt.Change{Key: e.Key, New: &e}, true); err != nil {
			errs = append(errs, err)
			continue
		}
		m.lost[origin].kept[e.Name] = true
		keys = append(keys, ref)
	}
	return keys, errs
}

// ReleaseLost stops keeping a lost origin's policies: those still kept are
// removed, and returned (sorted, to re-enforce).
func (m *Mirror) ReleaseLost(origin string) []enforce.PolicyRef {
	l, ok := m.lost[origin]
	if !ok {
		return nil
	}
	delete(m.lost, origin)
	keys := make([]enforce.PolicyRef, 0, len(l.kept))
	for name := range l.kept {
		ref, ok := lostRef(origin, name)
		if !ok {
			continue
		}
		m.inv.RemovePolicy(ref)
		keys = append(keys, ref)
	}
	slices.SortFunc(keys, enforce.PolicyRef.Compare)
	return keys
}

// LostPolicies returns, per lost origin, the names (namespace/name) of the
// policies still kept from its last-known state.
func (m *Mirror) LostPolicies() map[string][]string {
	out := make(map[string][]string, len(m.lost))
	for origin, l := range m.lost {
		names := make([]string, 0, len(l.kept))
		for n := range l.kept {
			names = append(names, n)
		}
		sort.Strings(names)
		out[origin] = names
	}
	return out
}

// IsLost reports whether origin is a lost origin whose policies are kept.
func (m *Mirror) IsLost(origin string) bool { return m.lost[origin] != nil }

func (m *Mirror) lostDirty(origin string) {
	if m.lostChanged == nil {
		m.lostChanged = map[string]bool{}
	}
	m.lostChanged[origin] = true
}

func (m *Mirror) takeLostChanged() []string {
	if len(m.lostChanged) == 0 {
		return nil
	}
	out := make([]string, 0, len(m.lostChanged))
	for o := range m.lostChanged {
		out = append(out, o)
	}
	clear(m.lostChanged)
	sort.Strings(out)
	return out
}

// lostRef is the policy reference of a kept name.
func lostRef(origin, name string) (enforce.PolicyRef, bool) {
	return policyRef(crdt.Key{Origin: origin, Kind: crdt.KindPolicy, Name: name})
}
