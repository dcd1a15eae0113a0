package kube

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// desiredSet is the applier's desired objects, kept grouped by the policy
// that generates them, and what follows for each NetworkPolicy name: the
// one object installed under it, or that it is broken (nothing applied or
// deleted under it) and why. A change of some policies' objects
// (apply) revisits only the names those policies claimed or claim; the
// outcome does not depend on the order of objects or of changes:
//
//   - an invalid object (ValidateDesired) is refused; a name it claims is
//     broken, and every valid object claiming it too is refused ("claimed by
//     another generated object");
//   - a name validly claimed by two or more objects is broken, and each
//     claimant's origin is refused with a message naming the origins of the
//     other claimants, sorted;
//   - a name claimed by one valid object only installs that object.
//
// Reasons are by origin (OriginAnnotation value, what Failures reports),
// in name order (namespace, then name; objects without a name first).
type desiredSet struct {
	groups map[enforce.PolicyRef][]*networkingv1.NetworkPolicy
	claims map[string][]*networkingv1.NetworkPolicy // namespace/name -> its claimants
	want   map[string]*networkingv1.NetworkPolicy   // namespace/name -> the object installed
	broken map[string]struct{}
	// reasons by slot then origin; bySlot indexes the slots of an origin.
	reasons  map[slot]map[string][]string
	byOrigin map[string]map[slot]struct{}
	rejected map[string][]string // origin -> reasons
}

// slot is where reasons come from: a name, or (for objects without a
// namespace or name) the policy that handed them over.
type slot struct {
	ns, name string
	group    enforce.PolicyRef // only for objects without a name
}

func (s slot) compare(o slot) int {
	if c := cmp.Compare(s.ns, o.ns); c != 0 {
		return c
	}
	if c := cmp.Compare(s.name, o.name); c != 0 {
		return c
	}
	return s.group.Compare(o.group)
}

func newDesiredSet() *desiredSet {
	return &desiredSet{
		groups:   map[enforce.PolicyRef][]*networkingv1.NetworkPolicy{},
		claims:   map[string][]*networkingv1.NetworkPolicy{},
		want:     map[string]*networkingv1.NetworkPolicy{},
		broken:   map[string]struct{}{},
		reasons:  map[slot]map[string][]string{},
		byOrigin: map[string]map[slot]struct{}{},
		rejected: map[string][]string{},
	}
}

// setEffect is what one apply changed.
type setEffect struct {
	queue   []string            // names whose installed object changed, appeared or disappeared, or that stopped being broken
	origins map[string]struct{} // origins whose reasons changed
	cleared []string            // origins no longer refused at all
}

func npKey(np *networkingv1.NetworkPolicy) string { return np.Namespace + "/" + np.Name }

func named(np *networkingv1.NetworkPolicy) bool { return np.Namespace != "" && np.Name != "" }

// apply replaces the objects of the given policies (none: the policy
// generates nothing any more). The objects are taken as they are (the
// caller copies them).
func (s *desiredSet) apply(changes map[enforce.PolicyRef][]*networkingv1.NetworkPolicy) setEffect {
	names := map[string]struct{}{}
	origins := map[string]struct{}{}
	for g, nps := range changes {
		for _, np := range s.groups[g] {
			s.unclaim(np, names, origins)
		}
		for _, np := range nps {
			if named(np) {
				k := npKey(np)
				s.claims[k] = append(s.claims[k], np)
				names[k] = struct{}{}
			}
			origins[np.Annotations[OriginAnnotation]] = struct{}{}
		}
		if len(nps) == 0 {
			delete(s.groups, g)
		} else {
			s.groups[g] = nps
		}
		s.setReasons(slot{group: g}, unnamedReasons(nps), origins)
	}
	var eff setEffect
	for _, k := range slices.Sorted(maps.Keys(names)) {
		if s.decideName(k, origins) {
			eff.queue = append(eff.queue, k)
		}
	}
	eff.origins, eff.cleared = s.rebuildRejected(origins)
	return eff
}

// unclaim drops an object of a policy's previous set from its name.
func (s *desiredSet) unclaim(np *networkingv1.NetworkPolicy, names, origins map[string]struct{}) {
	origins[np.Annotations[OriginAnnotation]] = struct{}{}
	if !named(np) {
		return
	}
	k := npKey(np)
	names[k] = struct{}{}
	c := slices.DeleteFunc(s.claims[k], func(o *networkingv1.NetworkPolicy) bool { return o == np })
	if len(c) == 0 {
		delete(s.claims, k)
	} else {
		s.claims[k] = c
	}
}

// unnamedReasons are the validation errors of a policy's objects without a
// namespace or name, by origin.
func unnamedReasons(nps []*networkingv1.NetworkPolicy) map[string][]string {
	var out map[string][]string
	for _, np := range nps {
		if named(np) {
			continue
		}
		if err := ValidateDesired(np); err != nil {
			if out == nil {
				out = map[string][]string{}
			}
			o := np.Annotations[OriginAnnotation]
			out[o] = append(out[o], err.Error())
		}
	}
	for _, rs := range out {
		slices.Sort(rs) // order-free, as for a name
	}
	return out
}

// decideName recomputes what name k installs from its claimants and
// reports whether the applier must look at k again.
func (s *desiredSet) decideName(k string, origins map[string]struct{}) bool {
	var valid []*networkingv1.NetworkPolicy
	reasons := map[string][]string{}
	invalid := false
	for _, np := range s.claims[k] {
		if err := ValidateDesired(np); err != nil {
			o := np.Annotations[OriginAnnotation]
			reasons[o] = append(reasons[o], err.Error())
			invalid = true
			continue
		}
		valid = append(valid, np)
	}
	var next *networkingv1.NetworkPolicy
	switch {
	case invalid:
		for _, np := range valid {
			o := np.Annotations[OriginAnnotation]
			reasons[o] = append(reasons[o], fmt.Sprintf("NetworkPolicy name %s is claimed by another generated object", k))
		}
	case len(valid) > 1:
		for i, np := range valid {
			var others []string
			for j, o := range valid {
				if i != j {
					others = append(others, o.Annotations[OriginAnnotation])
				}
			}
			slices.Sort(others)
			o := np.Annotations[OriginAnnotation]
			reasons[o] = append(reasons[o], fmt.Sprintf("NetworkPolicy name %s collides with one generated from %s", k, strings.Join(slices.Compact(others), ", ")))
		}
	case len(valid) == 1:
		next = valid[0]
	}
	for o, rs := range reasons {
		slices.Sort(rs)
		reasons[o] = slices.Compact(rs)
	}
	ns, name, _ := strings.Cut(k, "/")
	s.setReasons(slot{ns: ns, name: name}, reasons, origins)
	return s.install(k, next, len(s.claims[k]) > 0 && next == nil)
}

// install records name k's outcome and reports whether it changed for the
// applier: its object appeared, disappeared or changed content, or the
// name stopped being broken.
func (s *desiredSet) install(k string, next *networkingv1.NetworkPolicy, broken bool) bool {
	prev, had := s.want[k]
	_, wasBroken := s.broken[k]
	if next != nil {
		s.want[k] = next
	} else {
		delete(s.want, k)
	}
	if broken {
		s.broken[k] = struct{}{}
	} else {
		delete(s.broken, k)
	}
	switch {
	case next != nil && (!had || prev.Annotations[ContentHashAnnotation] != next.Annotations[ContentHashAnnotation]):
		return true
	case next == nil && had:
		return true
	}
	return wasBroken && !broken
}

// setReasons replaces the reasons of a slot (by origin), noting the origins
// concerned.
func (s *desiredSet) setReasons(sl slot, reasons map[string][]string, origins map[string]struct{}) {
	for o := range s.reasons[sl] {
		origins[o] = struct{}{}
		delete(s.byOrigin[o], sl)
		if len(s.byOrigin[o]) == 0 {
			delete(s.byOrigin, o)
		}
	}
	if len(reasons) == 0 {
		delete(s.reasons, sl)
		return
	}
	s.reasons[sl] = reasons
	for o := range reasons {
		origins[o] = struct{}{}
		if s.byOrigin[o] == nil {
			s.byOrigin[o] = map[slot]struct{}{}
		}
		s.byOrigin[o][sl] = struct{}{}
	}
}

// rebuildRejected recomputes the reasons of the given origins; it returns
// those whose reasons changed, and those no longer refused.
func (s *desiredSet) rebuildRejected(origins map[string]struct{}) (changed map[string]struct{}, cleared []string) {
	changed = map[string]struct{}{}
	for o := range origins {
		var rs []string
		for _, sl := range slices.SortedFunc(maps.Keys(s.byOrigin[o]), slot.compare) {
			rs = append(rs, s.reasons[sl][o]...)
		}
		prev, had := s.rejected[o]
		switch {
		case len(rs) == 0 && had:
			delete(s.rejected, o)
			cleared = append(cleared, o)
			changed[o] = struct{}{}
		case len(rs) > 0:
			if !slices.Equal(prev, rs) {
				changed[o] = struct{}{}
			}
			s.rejected[o] = rs
		}
	}
	slices.Sort(cleared)
	return changed, cleared
}
