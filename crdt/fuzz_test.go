package crdt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Run one for ~30 s with e.g.
//
//	go test ./crdt -run '^$' -fuzz '^FuzzDecodeDelta$' -fuzztime 30s
//
// Seed corpora live in testdata/fuzz/<Name>/ (regenerate with
// CRDT_WRITE_CORPUS=1 go test ./crdt -run TestWriteFuzzCorpus).

func corpusDeltas(t testing.TB) [][]byte {
	var out [][]byte
	d := sampleDelta(t)
	add := func(d Delta) {
		b, err := EncodeDelta(d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	add(d)
	r := d
	r.Reset, r.Final = true, true
	add(r)
	g := Delta{Origin: d.Origin, From: d.To, To: d.To + 5, Gap: true,
		Entries: []Entry{{Key: Key{d.Origin, KindPod, "ns/z"}, Version: d.To + 3, Value: []byte{0x81, 0xa1, 'v', 1}}}}
	add(g)
	add(Delta{Origin: "x", From: 7, To: 7, GC: 5, Retired: 3})
	add(signedSampleDelta(t)) // signatures, key and a state mark (19 elements)
	return out
}

// signedSampleDelta is a delta of a signing writer: its entries carry
// signatures and it carries the writer's state mark.
func signedSampleDelta(t testing.TB) Delta {
	w := NewState("cluster-s")
	w.SetSigner(newEdSigner(1))
	if err := w.SetEpoch(1); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ns/a", "ns/b"} {
		if _, _, err := w.Write(KindPod, name, []byte{0x80}, false, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := w.Write(KindPod, "ns/a", nil, true, 2); err != nil {
		t.Fatal(err)
	}
	w.CollectGarbage(MakeVersion(1, 3))
	ds := w.DeltaSince(Digest{}, 0)
	if len(ds) != 1 || ds[0].Mark.IsZero() {
		t.Fatalf("signed sample: %d deltas, mark %+v", len(ds), ds)
	}
	return ds[0]
}

func corpusDigests(t testing.TB) [][]byte {
	var out [][]byte
	for _, d := range []Digest{
		{},
		{"a": {Max: 5, Hash: 9, GC: 2, Retired: 1, Top: 6, Reset: 3, GapHash: 7}},
		{"a": {Max: MakeVersion(3, 9)}, "b": {Max: 1, Hash: 1 << 63}},
	} {
		b, err := EncodeDigest(d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func FuzzDecodeDelta(f *testing.F) {
	for _, b := range corpusDeltas(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDelta(b)
		if err != nil {
			return
		}
		if err := ValidateDelta(&d); err != nil {
			t.Fatalf("decoded delta fails validation: %v", err)
		}
		b2, err := EncodeDelta(d)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		d2, err := DecodeDelta(b2)
		if err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		b3, _ := EncodeDelta(d2)
		if !bytes.Equal(b2, b3) {
			t.Fatalf("encoding not stable")
		}
	})
}

func FuzzDecodeDigest(f *testing.F) {
	for _, b := range corpusDigests(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDigest(b)
		if err != nil {
			return
		}
		b2, err := EncodeDigest(d)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		d2, err := DecodeDigest(b2)
		if err != nil || !digestsEqual(d, d2) {
			t.Fatalf("round trip: %v", err)
		}
		// A hostile digest must not break DeltaSince/Behind.
		s := NewState("")
		_ = s.Behind(d)
		_ = s.DeltaSince(d, 3)
	})
}

// FuzzApply feeds arbitrary decoded deltas into a populated state: whatever
// is accepted must keep the state's invariants (hash = sum of entry hashes,
// every stored entry above the retirement, no tombstone at or below GC).
func FuzzApply(f *testing.F) {
	for _, b := range corpusDeltas(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDelta(b)
		if err != nil {
			return
		}
		s := writer(t, "cluster-a", 2)
		mustWrite(t, s, KindPod, "ns/p1", "x", false)
		mustWrite(t, s, KindPod, "ns/gone", "", true)
		if _, err := s.Apply(d); err != nil {
			t.Fatalf("valid delta rejected: %v", err)
		}
		checkInvariants(t, s)
		_ = s.DeltaSince(Digest{}, 5)
	})
}

func checkInvariants(t testing.TB, s *State) {
	t.Helper()
	for _, name := range s.Origins() {
		o := s.origins[name]
		var h uint64
		n := 0
		o.byVer.Ascend(func(r *record) bool {
			h += recHash(r)
			n++
			if r.version <= o.retired {
				t.Fatalf("%s: entry %s@%s at or below retirement %s", name, r.name, r.version, o.retired)
			}
			if r.deleted && r.version <= o.gc && !o.stale() {
				t.Fatalf("%s: tombstone %s@%s at or below GC %s", name, r.name, r.version, o.gc)
			}
			if o.lookup(r.kind, r.name) != r {
				t.Fatalf("%s: indexes disagree on %s", name, r.name)
			}
			return true
		})
		if h != o.hash || n != o.count {
			t.Fatalf("%s: hash/count drifted", name)
		}
		var gh uint64
		o.byVer.AscendGreaterOrEqual(&record{version: o.max + 1}, func(r *record) bool {
			gh += recHash(r)
			return true
		})
		if gh != o.gapHash {
			t.Fatalf("%s: gap hash drifted", name)
		}
	}
}

// TestWriteFuzzCorpus checks that the checked-in seed corpus matches what
// the current encoders produce (so a wire-format change cannot silently
// leave the fuzzers without valid seeds); CRDT_WRITE_CORPUS=1 rewrites it.
func TestWriteFuzzCorpus(t *testing.T) {
	regen := os.Getenv("CRDT_WRITE_CORPUS") != ""
	write := func(name string, seeds [][]byte) {
		dir := filepath.Join("testdata", "fuzz", name)
		if regen {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for i, b := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			path := filepath.Join(dir, fmt.Sprintf("seed%d", i))
			if regen {
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != body {
				t.Errorf("%s is missing or stale; regenerate with CRDT_WRITE_CORPUS=1 go test ./crdt -run TestWriteFuzzCorpus", path)
			}
		}
	}
	write("FuzzDecodeDelta", corpusDeltas(t))
	write("FuzzApply", corpusDeltas(t))
	write("FuzzDecodeDigest", corpusDigests(t))
}
