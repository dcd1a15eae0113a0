package store

import (
	"encoding/binary"
	"runtime"
	"sync"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Parallel signature verification for large ingests (a joining cluster's
// full sync). crdt.State verifies each entry's Ed25519 signature serially
// (crdt/ is pure: no goroutines), ~50-90 µs each, which alone bounds a join
// to ~15 k entries/s per core. Before a large batch is merged, the replica
// verifies the entries' signatures on GOMAXPROCS goroutines with the same
// verifier and remembers the exact (origin, key, message, signature) tuples
// that verified; when crdt.State then asks the verifier about one of them,
// the answer comes from that record. Anything not recorded (failures,
// entries the pre-pass skipped) goes to the real verifier, serially, as
// before: the crdt's decisions, errors and order are unchanged.
//
// Only origins whose key the verifier already trusts are pre-verified: the
// first signed delta of a never-seen origin may pin its key (trust on first
// use), a side effect that stays serial and in the crdt's order. The rest
// of the batch, that origin's further chunks included, is pre-verified once
// its key is pinned.

// preVerifyMin is the smallest number of signatures worth a parallel pass.
const preVerifyMin = 64

// preVerifier wraps the verifier handed to crdt.State. It is used only
// under Replica.mu (write), except for the inner verifier, which is called
// concurrently during a pre-pass (gossip.Trust is safe for that).
type preVerifier struct {
	inner   crdt.Verifier
	workers int
	ok      map[string]struct{}
	// counters for tests and benchmarks
	preVerified, hits int
}

func newPreVerifier(inner crdt.Verifier, workers int) *preVerifier {
	if workers <= 0 {
		// On 2 cores, busy with gossip, the committer and the enforcer,
		// the pre-pass measured slower than serial verification
		// (docs/PERFORMANCE.md); it pays with cores to spare.
		workers = 1
		if n := runtime.GOMAXPROCS(0); n >= 4 {
			workers = n
		}
	}
	return &preVerifier{inner: inner, workers: workers}
}

func sigTuple(origin string, key, msg, sig []byte) string {
	b := make([]byte, 0, 12+len(origin)+len(key)+len(msg)+len(sig))
	for _, p := range [][]byte{[]byte(origin), key, msg} {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return string(append(b, sig...))
}

// Verify implements crdt.Verifier.
func (p *preVerifier) Verify(origin string, key, msg, sig []byte) error {
	if len(p.ok) > 0 {
		t := sigTuple(origin, key, msg, sig)
		if _, ok := p.ok[t]; ok {
			delete(p.ok, t)
			p.hits++
			return nil
		}
	}
	return p.inner.Verify(origin, key, msg, sig)
}

// Key implements crdt.Verifier.
func (p *preVerifier) Key(origin string) []byte { return p.inner.Key(origin) }

type sigJob struct {
	origin        string
	key, msg, sig []byte
}

// prepare pre-verifies, in parallel, the signed entries of the deltas not
// yet done (done[i]) whose origin's key is already trusted, and marks them
// done. held is the receiver's digest: entries at or below an origin's
// watermark are ignored by the crdt (outside resets) and not pre-verified.
// Deltas a checkpoint vouches for (vouched) are left to the crdt, which
// does not verify their entries one by one.
func (p *preVerifier) prepare(deltas []crdt.Delta, done []bool, held crdt.Digest, vouched func(*crdt.Delta) bool) {
	if p.workers < 2 {
		return
	}
	var jobs []sigJob
	trusted := map[string]bool{}
	for i := range deltas {
		d := &deltas[i]
		if done[i] {
			continue
		}
		t, seen := trusted[d.Origin]
		if !seen {
			t = p.inner.Key(d.Origin) != nil
			trusted[d.Origin] = t
		}
		if !t {
			continue
		}
		done[i] = true
		if vouched != nil && vouched(d) {
			continue
		}
		max := held[d.Origin].Max
		for j := range d.Entries {
			e := &d.Entries[j]
			if len(e.Sig) == 0 || (!d.Reset && e.Version <= max) || crdt.MarkCovers(d, e) {
				continue // (a record the delta's state mark signs: Apply verifies the mark)
			}
			jobs = append(jobs, sigJob{origin: d.Origin, key: d.Key, msg: crdt.EntrySigMessage(e), sig: e.Sig})
		}
	}
	if len(jobs) < preVerifyMin {
		return
	}
	p.verifyJobs(jobs)
}

// verifyJobs verifies the signatures on p.workers goroutines and records
// the good ones.
func (p *preVerifier) verifyJobs(jobs []sigJob) {
	good := make([]bool, len(jobs))
	var wg sync.WaitGroup
	per := (len(jobs) + p.workers - 1) / p.workers
	for lo := 0; lo < len(jobs); lo += per {
		hi := min(lo+per, len(jobs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := lo; k < hi; k++ {
				j := &jobs[k]
				good[k] = p.inner.Verify(j.origin, j.key, j.msg, j.sig) == nil
			}
		}()
	}
	wg.Wait()
	if p.ok == nil {
		p.ok = make(map[string]struct{}, len(jobs))
	}
	for k := range jobs {
		if good[k] {
			j := &jobs[k]
			p.ok[sigTuple(j.origin, j.key, j.msg, j.sig)] = struct{}{}
			p.preVerified++
		}
	}
}

// reset forgets every recorded result (end of an Apply).
func (p *preVerifier) reset() { p.ok = nil }
