package crdt

import (
	"fmt"
	"runtime"
	"testing"
)

// realisticPod returns a typical encoded PodValue (~120 B) and pod name.
func realisticPod(tb testing.TB, i int) (string, []byte) {
	v := &PodValue{
		Labels: map[string]string{
			"app":               fmt.Sprintf("web-%d", i%97),
			"pod-template-hash": fmt.Sprintf("%010x", i*2654435761%(1<<40)),
			"tier":              "frontend",
		},
		IPs:   []string{fmt.Sprintf("10.%d.%d.%d", 244+i>>16&3, i>>8&255, i&255)},
		Phase: "Running",
		Ports: []NamedPort{{Name: "http", Port: 8080}},
	}
	b, err := EncodeValue(v)
	if err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprintf("team-%02d/web-%d-%05x", i%50, i%97, i), b
}

// podStream writes n realistic pods at a writer and returns its deltas
// (chunks of DeltaChunkEntries) as a receiver would get them.
func podStream(tb testing.TB, n int) (*State, []Delta) {
	w := NewState("cluster-a")
	if err := w.SetEpoch(1); err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i++ {
		name, val := realisticPod(tb, i)
		if _, _, err := w.Write(KindPod, name, val, false, int64(i)); err != nil {
			tb.Fatal(err)
		}
	}
	return w, w.DeltaSince(Digest{}, 0)
}

func BenchmarkMergeThroughput(b *testing.B) {
	_, ds := podStream(b, 20000)
	n := 0
	for _, d := range ds {
		n += len(d.Entries)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := NewState("cluster-b")
		for _, d := range ds {
			if _, err := s.Apply(d); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

func BenchmarkDecodeApplyThroughput(b *testing.B) {
	_, ds := podStream(b, 20000)
	var wire [][]byte
	n := 0
	for _, d := range ds {
		buf, err := EncodeDelta(d)
		if err != nil {
			b.Fatal(err)
		}
		wire = append(wire, buf)
		n += len(d.Entries)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := NewState("cluster-b")
		for _, buf := range wire {
			d, err := DecodeDelta(buf)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Apply(d); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

func BenchmarkEncodedBytesPerPod(b *testing.B) {
	_, ds := podStream(b, DeltaChunkEntries)
	d := ds[0]
	var size int
	for i := 0; i < b.N; i++ {
		buf, err := EncodeDelta(d)
		if err != nil {
			b.Fatal(err)
		}
		size = len(buf)
	}
	b.ReportMetric(float64(size)/float64(len(d.Entries)), "wire-B/entry")
	b.ReportMetric(float64(len(d.Entries[0].Value)), "value-B")
}

// heapPerEntry builds n pods in a receiving replica and returns the live heap
// growth per entry.
func heapPerEntry(tb testing.TB, n int) (float64, *State) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// The writer and its stream become garbage once applied; only the
	// receiving replica stays reachable when we measure again.
	_, ds := podStream(tb, n)
	s := NewState("cluster-b")
	for i := range ds {
		if _, err := s.Apply(ds[i]); err != nil {
			tb.Fatal(err)
		}
		ds[i] = Delta{} // the wire buffers are garbage once applied
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len("cluster-a") != n {
		tb.Fatalf("holds %d entries, want %d", s.Len("cluster-a"), n)
	}
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n), s
}

func BenchmarkHeapPerPod1M(b *testing.B) {
	for i := 0; i < b.N; i++ {
		per, s := heapPerEntry(b, 1_000_000)
		b.ReportMetric(per, "heap-B/entry")
		runtime.KeepAlive(s)
	}
}

// TestHeapPerPod keeps the memory budget honest in ordinary test runs
// (100k entries; the per-entry cost does not grow with n).
func TestHeapPerPod(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocates ~50 MB; heap figures are meaningless under -race (run without -race/-short)")
	}
	per, s := heapPerEntry(t, 100_000)
	runtime.KeepAlive(s)
	t.Logf("heap per pod entry: %.0f B", per)
	if per > 500 {
		t.Fatalf("heap per pod entry %.0f B exceeds the 500 B budget", per)
	}
}

func BenchmarkDeltaSince10of1M(b *testing.B) {
	w, _ := podStream(b, 1_000_000)
	remote := w.Digest()
	for i := 0; i < 10; i++ {
		name, val := realisticPod(b, i*99991)
		if _, _, err := w.Write(KindPod, name, append(val[:len(val):len(val)], 0), false, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds := w.DeltaSince(remote, 0)
		if len(ds) != 1 || len(ds[0].Entries) != 10 {
			b.Fatalf("got %d deltas", len(ds))
		}
	}
}

// BenchmarkDeltaSince10of10k is the same query at 1% of the size: equal
// ns/op to the 1M case shows the cost tracks the 10, not the 1M.
func BenchmarkDeltaSince10of10k(b *testing.B) {
	w, _ := podStream(b, 10_000)
	remote := w.Digest()
	for i := 0; i < 10; i++ {
		name, val := realisticPod(b, i*997)
		if _, _, err := w.Write(KindPod, name, append(val[:len(val):len(val)], 0), false, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds := w.DeltaSince(remote, 0)
		if len(ds) != 1 || len(ds[0].Entries) != 10 {
			b.Fatalf("got %d deltas", len(ds))
		}
	}
}

// completenessPushes returns n write deltas of a signing writer (each with
// its entry signature and state mark) and the verifier that trusts it.
func completenessPushes(tb testing.TB, n int) ([]Delta, Verifier) {
	sg := newEdSigner(1)
	w := NewState("cluster-a")
	w.SetSigner(sg)
	if err := w.SetEpoch(1); err != nil {
		tb.Fatal(err)
	}
	out := make([]Delta, 0, n)
	for i := 0; i < n; i++ {
		name, val := realisticPod(tb, i)
		d, _, err := w.Write(KindPod, name, val, false, int64(i))
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, d)
	}
	return out, pinVerifier{"cluster-a": sg.PublicKey()}
}

// BenchmarkCompleteness measures what origin-signed completeness (issue 29,
// item 1) costs: the bytes a state mark adds to every update on the wire,
// one set-hash update, and one Apply of a signed push at a verifying
// receiver with the mark (entry signature + mark signature + digest) and
// with the mark stripped (entry signature only; the watermark then never
// moves, as with a peer before state marks).
func BenchmarkCompleteness(b *testing.B) {
	pushes, ver := completenessPushes(b, 2000)
	b.Run("bytes-per-update", func(b *testing.B) {
		with, without, i := 0, 0, 0
		for b.Loop() {
			d := pushes[i%len(pushes)]
			i++
			enc, err := EncodeDelta(d)
			if err != nil {
				b.Fatal(err)
			}
			with += len(enc)
			d.Mark = StateMark{}
			enc, err = EncodeDelta(d)
			if err != nil {
				b.Fatal(err)
			}
			without += len(enc)
		}
		b.ReportMetric(float64(with)/float64(i), "B/update")
		b.ReportMetric(float64(with-without)/float64(i), "B-added/update")
	})
	b.Run("sethash-update", func(b *testing.B) {
		var h setHash
		var eh elemHasher
		name, _ := realisticPod(b, 7)
		v := Version(1)
		for b.Loop() {
			h.add(&eh, KindPod, name, v, false, false)
			v++
		}
	})
	apply := func(strip bool) func(b *testing.B) {
		return func(b *testing.B) {
			ds := make([]Delta, len(pushes))
			copy(ds, pushes)
			if strip {
				for i := range ds {
					ds[i].Mark = StateMark{}
				}
			}
			fresh := func() *State {
				s := NewState("cluster-b")
				s.SetVerifier(ver, nil)
				return s
			}
			s, i := fresh(), 0
			for b.Loop() {
				if i == len(ds) {
					b.StopTimer()
					s, i = fresh(), 0
					b.StartTimer()
				}
				if _, err := s.Apply(ds[i]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			if !strip && s.Digest()["cluster-a"].Max != ds[i-1].To {
				b.Fatal("the receiver did not prove its watermark")
			}
		}
	}
	b.Run("apply-push/with-mark", apply(false))
	b.Run("apply-push/without-mark", apply(true))
}
