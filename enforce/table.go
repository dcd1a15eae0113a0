package enforce

import "iter"

// ptrTable is an open-addressing hash set of pointers (linear probing,
// backward-shift deletion): 9 bytes a slot at a load factor between 13/32
// and 13/16, where a Go map of string to pointer costs 24 bytes a slot plus
// its control bytes. The compact view keeps a million pods and up to as
// many interned label sets in these (compact.go).
//
// The hash of an element is not stored: callers pass a hash function,
// which growing and deleting use to find an element's home slot. The
// iteration order depends on the hashes (random seeds), like a Go map's.
type ptrTable[T any] struct {
	slots []*T
	// tags holds the top 8 bits of each element's hash, so that a probe
	// dereferences (a cache miss at a million elements) only the elements
	// whose tag matches.
	tags []uint8
	n    int
}

func tag(h uint64) uint8 { return uint8(h >> 56) }

// Len is the number of elements.
func (t *ptrTable[T]) Len() int { return t.n }

// find returns the element with hash h for which eq holds, or nil.
func (t *ptrTable[T]) find(h uint64, eq func(*T) bool) *T {
	if t.n == 0 {
		return nil
	}
	mask, tg := uint64(len(t.slots)-1), tag(h)
	for i := h & mask; ; i = (i + 1) & mask {
		x := t.slots[i]
		if x == nil {
			return nil
		}
		if t.tags[i] == tg && eq(x) {
			return x
		}
	}
}

// insert adds x (hash h), which must not be in the table yet.
func (t *ptrTable[T]) insert(h uint64, x *T, hash func(*T) uint64) {
	if (t.n+1)*16 > len(t.slots)*13 {
		t.resize(max(8, len(t.slots)*2), hash)
	}
	t.place(h, x)
	t.n++
}

func (t *ptrTable[T]) place(h uint64, x *T) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i], t.tags[i] = x, tag(h)
}

// replace puts x where old (same hash h) is; old must be in the table.
func (t *ptrTable[T]) replace(h uint64, old, x *T) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		if t.slots[i] == old {
			t.slots[i] = x
			return
		}
	}
}

// remove deletes x (hash h) if present.
func (t *ptrTable[T]) remove(h uint64, x *T, hash func(*T) uint64) {
	if t.n == 0 {
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != x {
		if t.slots[i] == nil {
			return
		}
		i = (i + 1) & mask
	}
	// Backward-shift: move later members of the probe run into the hole
	// when their home slot does not lie cyclically in (hole, j].
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		home := hash(t.slots[j]) & mask
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i], t.tags[i] = t.slots[j], t.tags[j]
			i = j
		}
	}
	t.slots[i] = nil
	t.n--
	if t.n == 0 {
		t.slots, t.tags = nil, nil
	} else if len(t.slots) > 8 && t.n*16 < len(t.slots) {
		t.resize(len(t.slots)/4, hash)
	}
}

func (t *ptrTable[T]) resize(size int, hash func(*T) uint64) {
	old := t.slots
	t.slots, t.tags = make([]*T, size), make([]uint8, size)
	for _, x := range old {
		if x != nil {
			t.place(hash(x), x)
		}
	}
}

// all yields every element; the table must not change meanwhile.
func (t *ptrTable[T]) all() iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for _, x := range t.slots {
			if x != nil && !yield(x) {
				return
			}
		}
	}
}
