package crdt

// Each calls fn for every stored entry (tombstones included) of origin and
// kind in no particular order, until fn returns false. It is Range without
// the sort, for bulk readers that do not need name order (the daemon's
// enforce view at start-up). fn must not change the state.
func (s *State) Each(origin string, kind Kind, fn func(Entry) bool) {
	o := s.origins[origin]
	if o == nil {
		return
	}
	for _, r := range o.names(kind) {
		if !fn(o.entry(r)) {
			return
		}
	}
}
