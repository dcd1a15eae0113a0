package crdt

import (
	"bytes"
	"sort"
)

// Re-cutting a sync stream at checkpoint bounds. A Delta is any contiguous
// (From, To] slice of the sender's history, and senders chunk by their own
// rules (entry and byte budgets, fair shares between origins), so their
// chunks rarely coincide with the segments of the origin's checkpoint. A
// receiver may join contiguous deltas of one origin and cut them again at
// the segment bounds: the pieces are still truthful slices of the sender's
// history, and a piece that is exactly a segment (and hashes like it) skips
// per-entry verification. Splitting decides nothing about validity: every
// piece still goes through Apply.

// SplitAtCheckpoints re-cuts ds at the bounds of the checkpoints this state
// holds. Deltas of origins without a checkpoint come back unchanged. Unless
// final, the trailing part of an origin's stream that ends inside a segment
// (below the checkpoint's Max) is returned as held, to be passed in again,
// first, with the stream's next deltas. Apply ready (then held, when the
// stream ends early) in order; deltas of different origins may come back
// in another relative order than in ds, those of one origin never do.
func (s *State) SplitAtCheckpoints(ds []Delta, final bool) (ready, held []Delta) {
	if len(s.checkpoints) == 0 {
		return ds, nil
	}
	var order []string
	byOrigin := map[string][]Delta{}
	for _, d := range ds {
		if _, ok := byOrigin[d.Origin]; !ok {
			order = append(order, d.Origin)
		}
		byOrigin[d.Origin] = append(byOrigin[d.Origin], d)
	}
	for _, origin := range order {
		group := byOrigin[origin]
		cp := s.checkpoints[origin]
		if cp == nil {
			ready = append(ready, group...)
			continue
		}
		for i := 0; i < len(group); {
			if !splittable(&group[i]) {
				ready = append(ready, group[i])
				i++
				continue
			}
			j := i + 1
			for j < len(group) && continues(&group[j-1], &group[j]) {
				j++
			}
			pieces, tail := splitRun(group[i:j], cp, final || j < len(group))
			ready = append(ready, pieces...)
			held = append(held, tail...)
			i = j
		}
	}
	return ready, held
}

// splittable reports whether d may be joined with its neighbours: not a
// gap delta, and its entries of its origin, strictly ordered inside
// (From, To] (the rest of ValidateDelta is left to Apply, piece by piece).
func splittable(d *Delta) bool {
	if d.Gap || d.From > d.To || len(d.Entries) > MaxDeltaEntries {
		return false
	}
	prev := d.From
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Origin != d.Origin || e.Version <= prev || e.Version > d.To {
			return false
		}
		prev = e.Version
	}
	return true
}

// aligned reports whether a run is already cut at every bound of cp and
// nowhere else inside a segment it covers whole: nothing to re-cut.
func aligned(run []Delta, cp *Checkpoint) bool {
	from, to := run[0].From, run[len(run)-1].To
	for i := range run {
		d := &run[i]
		// a bound strictly inside d
		k := sort.Search(len(cp.Bounds), func(k int) bool { return cp.Bounds[k] > d.From })
		if k < len(cp.Bounds) && cp.Bounds[k] < d.To {
			return false
		}
		if i == len(run)-1 {
			break
		}
		// d.To strictly inside a segment the run covers whole
		c := d.To
		k = sort.Search(len(cp.Bounds), func(k int) bool { return cp.Bounds[k] > c })
		if k < len(cp.Bounds) {
			lo := Version(0)
			if k > 0 {
				lo = cp.Bounds[k-1]
			}
			if lo < c && from <= lo && cp.Bounds[k] <= to {
				return false
			}
		}
	}
	return true
}

// continues reports whether d directly extends prev in one sender's stream.
func continues(prev, d *Delta) bool {
	return splittable(d) && d.From == prev.To && !prev.Final && d.Reset == prev.Reset &&
		d.GC == prev.GC && d.Retired == prev.Retired &&
		bytes.Equal(d.Key, prev.Key) && bytes.Equal(d.Endorse, prev.Endorse) &&
		bytes.Equal(d.GCSig, prev.GCSig) && bytes.Equal(d.RetiredSig, prev.RetiredSig)
}

// splitRun re-cuts a contiguous run of one origin's deltas: at every
// checkpoint bound inside it, and no longer at the run's own chunk bounds
// inside a segment the run covers whole. Unless final, the part after the
// last bound reached is returned as tail when the run ends inside a
// segment.
func splitRun(run []Delta, cp *Checkpoint, final bool) (pieces, tail []Delta) {
	if aligned(run, cp) {
		return alignedTail(run, cp, final)
	}
	return recut(run, cp, final)
}

// recut is splitRun for a run that is not aligned.
func recut(run []Delta, cp *Checkpoint, final bool) (pieces, tail []Delta) {
	from := run[0].From
	n := 0
	for i := range run {
		n += len(run[i].Entries)
	}
	entries := make(runEntries, 0, n)
	for i := range run {
		entries = append(entries, run[i].Entries...)
	}
	points := entries.cutPoints(run, cp)
	holdFrom := entries.holdFrom(run, cp, final)
	lo, k := from, 0
	for _, hi := range points {
		p := piece(run, lo, hi)
		n := sort.Search(len(entries)-k, func(x int) bool { return entries[k+x].Version > hi })
		p.Entries = entries[k : k+n : k+n]
		k += n
		if lo >= holdFrom {
			tail = append(tail, p)
		} else {
			pieces = append(pieces, p)
		}
		lo = hi
	}
	return pieces, tail
}

// runEntries are a run's entries, in version order.
type runEntries []Entry

// count is the number of entries in (lo, hi].
func (entries runEntries) count(lo, hi Version) int {
	a := sort.Search(len(entries), func(k int) bool { return entries[k].Version > lo })
	b := sort.Search(len(entries), func(k int) bool { return entries[k].Version > hi })
	return b - a
}

// cutPoints returns where recut cuts the run, sorted, ending at its To:
// every checkpoint bound inside it, and every boundary between the run's
// deltas that no whole segment covers.
func (entries runEntries) cutPoints(run []Delta, cp *Checkpoint) []Version {
	from, to := run[0].From, run[len(run)-1].To
	covered := func(c Version) bool { // c lies inside a segment the run covers whole
		i := sort.Search(len(cp.Bounds), func(i int) bool { return cp.Bounds[i] > c })
		if i == len(cp.Bounds) {
			return false
		}
		lo := Version(0)
		if i > 0 {
			lo = cp.Bounds[i-1]
		}
		return lo < c && from <= lo && cp.Bounds[i] <= to && entries.count(lo, cp.Bounds[i]) <= MaxDeltaEntries
	}
	cuts := map[Version]bool{}
	for _, b := range cp.Bounds {
		if b > from && b < to {
			cuts[b] = true
		}
	}
	for i := 0; i < len(run)-1; i++ {
		if c := run[i].To; !covered(c) {
			cuts[c] = true
		}
	}
	points := make([]Version, 0, len(cuts)+1)
	for c := range cuts {
		points = append(points, c)
	}
	points = append(points, to)
	sort.Slice(points, func(i, j int) bool { return points[i] < points[j] })
	return points
}

// holdFrom is where the held tail starts: after the last checkpoint bound
// in the run (its To when nothing is held).
func (entries runEntries) holdFrom(run []Delta, cp *Checkpoint, final bool) Version {
	from, to := run[0].From, run[len(run)-1].To
	holdFrom := to
	if !final && !run[len(run)-1].Final && to < cp.Max && entries.count(from, to) > 0 {
		holdFrom = from
		for _, b := range cp.Bounds {
			if b > from && b <= to {
				holdFrom = b
			}
		}
		if entries.count(holdFrom, to) > MaxDeltaEntries {
			holdFrom = to // too much to hold: apply as it is
		}
	}
	return holdFrom
}

// piece builds the delta (lo, hi] of a run (entries filled by the caller):
// the metadata of the run delta holding hi, whose head proof and Final flag
// it keeps only when it ends where that delta ends (a cut at a checkpoint
// bound is proven by the checkpoint).
func piece(run []Delta, lo, hi Version) Delta {
	i := sort.Search(len(run), func(i int) bool { return run[i].To >= hi })
	src := &run[i]
	p := *src
	p.From, p.To, p.Entries = lo, hi, nil
	if hi != src.To {
		p.Head, p.HeadSig, p.Final = 0, nil, false
	}
	return p
}

// alignedTail splits an aligned run into what to apply and, unless final,
// the deltas after its last checkpoint bound when it ends inside a
// segment (the same rule as splitRun).
func alignedTail(run []Delta, cp *Checkpoint, final bool) (pieces, tail []Delta) {
	last := &run[len(run)-1]
	if final || last.Final || last.To >= cp.Max {
		return run, nil
	}
	k := len(run)
	for k > 0 && !isBound(cp, run[k-1].To) {
		k--
	}
	held := 0
	for i := k; i < len(run); i++ {
		held += len(run[i].Entries)
	}
	if held == 0 || held > MaxDeltaEntries {
		return run, nil
	}
	return run[:k:k], run[k:]
}

func isBound(cp *Checkpoint, v Version) bool {
	k := sort.Search(len(cp.Bounds), func(k int) bool { return cp.Bounds[k] >= v })
	return k < len(cp.Bounds) && cp.Bounds[k] == v
}
