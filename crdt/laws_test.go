package crdt

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
)

// lawWorld is a set of writer histories (broadcast deltas, retirements and
// GC announcements) from which replicas are built by applying random subsets
// in random order, so they hold gaps, duplicates and partial knowledge.
type lawWorld struct {
	deltas  []Delta
	retires []Retire
}

func newLawWorld(t testing.TB, rng *rand.Rand, withGC bool) *lawWorld {
	w := &lawWorld{}
	for wi := 0; wi < 3; wi++ {
		name := fmt.Sprintf("w%d", wi)
		s := NewState(name)
		if err := s.SetEpoch(uint32(1 + rng.Intn(3))); err != nil {
			t.Fatal(err)
		}
		n := 5 + rng.Intn(25)
		for i := 0; i < n; i++ {
			if rng.Intn(10) == 0 {
				if err := s.SetEpoch(s.MinEpoch() + uint32(rng.Intn(2))); err != nil {
					t.Fatal(err)
				}
			}
			// kindOpaque stands for a later build's kind: the writer is
			// newer than the replicas, which carry it without knowing it.
			kind := []Kind{KindNamespace, KindPod, KindPolicy, kindOpaque}[rng.Intn(4)]
			var key string
			if kind == KindNamespace {
				key = fmt.Sprintf("ns%d", rng.Intn(3))
			} else {
				key = fmt.Sprintf("ns%d/o%d", rng.Intn(3), rng.Intn(5))
			}
			del := rng.Intn(4) == 0
			d, _, err := s.write(kind, key, []byte(fmt.Sprintf("%s-%d", key, i)), del, int64(i))
			if err != nil {
				t.Fatal(err)
			}
			w.deltas = append(w.deltas, d)
			if withGC && rng.Intn(8) == 0 {
				g, _ := s.CollectGarbage(s.Digest()[name].Max)
				w.deltas = append(w.deltas, g)
			}
			if rng.Intn(15) == 0 {
				w.retires = append(w.retires, s.RetireRecord(name))
			}
		}
	}
	return w
}

// replica applies a random subset of the world in random order.
func (w *lawWorld) replica(t testing.TB, rng *rand.Rand) *State {
	s := NewState("")
	type op struct {
		d *Delta
		r *Retire
	}
	var ops []op
	for i := range w.deltas {
		if rng.Intn(3) != 0 {
			ops = append(ops, op{d: &w.deltas[i]})
		}
	}
	for i := range w.retires {
		if rng.Intn(3) == 0 {
			ops = append(ops, op{r: &w.retires[i]})
		}
	}
	rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	for _, o := range ops {
		var err error
		if o.d != nil {
			_, err = s.Apply(*o.d)
		} else {
			_, err = s.ApplyRetire(*o.r)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func clone(t testing.TB, s *State) *State {
	t.Helper()
	var entries []Entry
	for _, o := range s.Origins() {
		for _, k := range testKinds {
			s.Range(o, k, func(e Entry) bool { entries = append(entries, e); return true })
		}
	}
	c := NewState(s.self)
	if err := c.Restore(s.Digest(), entries); err != nil {
		t.Fatal(err)
	}
	return c
}

// merge returns p after pulling everything q can give it through the
// protocol (retirement watermarks, then DeltaSince until nothing is left).
func merge(t testing.TB, p, q *State) *State {
	t.Helper()
	m := clone(t, p)
	for round := 0; round < 100; round++ {
		for o, rd := range q.Digest() {
			if rd.Retired > 0 {
				if _, err := m.ApplyRetire(Retire{Origin: o, UpTo: rd.Retired}); err != nil {
					t.Fatal(err)
				}
			}
		}
		before := m.Digest()
		ds := q.DeltaSince(before, 0)
		changed := false
		for _, d := range ds {
			ch, err := m.Apply(d)
			if err != nil {
				t.Fatal(err)
			}
			changed = changed || len(ch) > 0
		}
		// q may keep offering out-of-order entries m already has (m holds
		// a superset); a round that changes nothing ends the pull.
		if !changed && digestsEqual(before, m.Digest()) {
			return m
		}
	}
	for _, d := range q.DeltaSince(m.Digest(), 0) {
		t.Logf("pending: %+v", d)
	}
	t.Logf("m: %v\nq: %v", m.Digest(), q.Digest())
	t.Fatal("merge did not terminate")
	return nil
}

func sameState(a, b *State) error {
	da, db := a.Digest(), b.Digest()
	for _, o := range a.Origins() {
		for _, k := range testKinds {
			var ea, eb []Entry
			a.Range(o, k, func(e Entry) bool { ea = append(ea, e); return true })
			b.Range(o, k, func(e Entry) bool { eb = append(eb, e); return true })
			if len(ea) != len(eb) {
				return fmt.Errorf("%s/%s: %d vs %d entries\n%+v\n%+v\ndigests %v / %v", o, k, len(ea), len(eb), ea, eb, da[o], db[o])
			}
			for i := range ea {
				x, y := ea[i], eb[i]
				if x.Key != y.Key || x.Version != y.Version || x.Deleted != y.Deleted || !bytes.Equal(x.Value, y.Value) {
					return fmt.Errorf("entry %+v vs %+v", x, y)
				}
			}
		}
	}
	if !digestsEqual(da, db) {
		return fmt.Errorf("digests differ:\n%v\n%v", da, db)
	}
	return nil
}

const lawCases = 300

func TestMergeLaws(t *testing.T) {
	for _, withGC := range []bool{false, true} {
		t.Run(fmt.Sprintf("gc=%v", withGC), func(t *testing.T) {
			for seed := int64(1); seed <= lawCases; seed++ {
				rng := rand.New(rand.NewSource(seed))
				w := newLawWorld(t, rng, withGC)
				a, b, c := w.replica(t, rng), w.replica(t, rng), w.replica(t, rng)
				if withGC {
					// With GC a replica may be stale, and two stale replicas
					// cannot repair each other: that is what the writer (or
					// any up-to-date replica) is for. Make b one that saw
					// every broadcast in order, so every merge has a source
					// of truth.
					b = NewState("")
					for i := range w.deltas {
						if _, err := b.Apply(w.deltas[i]); err != nil {
							t.Fatal(err)
						}
					}
				}
				// idempotent
				if err := sameState(merge(t, a, a), a); err != nil {
					t.Fatalf("seed %d: idempotence: %v", seed, err)
				}
				ab := merge(t, a, b)
				if err := sameState(merge(t, ab, b), ab); err != nil {
					t.Fatalf("seed %d: idempotence (absorb): %v", seed, err)
				}
				// commutative: a⊔b == b⊔a (each side pulls from the other)
				ba := merge(t, b, a)
				if err := sameState(merge(t, ab, a), merge(t, ba, b)); err != nil {
					t.Fatalf("seed %d: commutativity: %v", seed, err)
				}
				// associative: (a⊔b)⊔c == a⊔(b⊔c)
				left := merge(t, merge(t, ab, c), c)
				bc := merge(t, b, c)
				right := merge(t, merge(t, a, bc), bc)
				full := merge(t, merge(t, merge(t, left, right), left), right)
				if err := sameState(left, full); err != nil {
					t.Fatalf("seed %d: associativity (left): %v", seed, err)
				}
				if err := sameState(right, full); err != nil {
					t.Fatalf("seed %d: associativity (right): %v", seed, err)
				}
			}
		})
	}
}

// TestApplyOrderIndependence: applying the same deltas in any order (with
// duplicates) and then syncing with a complete replica yields one state.
func TestApplyOrderIndependence(t *testing.T) {
	for seed := int64(1); seed <= lawCases; seed++ {
		rng := rand.New(rand.NewSource(seed))
		w := newLawWorld(t, rng, true)
		complete := NewState("")
		for i := range w.deltas {
			if _, err := complete.Apply(w.deltas[i]); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range w.retires {
			if _, err := complete.ApplyRetire(r); err != nil {
				t.Fatal(err)
			}
		}
		var ref *State
		for k := 0; k < 3; k++ {
			s := w.replica(t, rng)
			for _, r := range w.retires {
				if _, err := s.ApplyRetire(r); err != nil {
					t.Fatal(err)
				}
			}
			s = merge(t, s, complete)
			if ref == nil {
				ref = s
				if err := sameState(ref, complete); err != nil {
					t.Fatalf("seed %d: replica != complete: %v", seed, err)
				}
				continue
			}
			if err := sameState(ref, s); err != nil {
				t.Fatalf("seed %d: order dependence: %v", seed, err)
			}
		}
	}
}
