package store

import "github.com/coastguard-mcnp/coastguard/crdt"

// entryHash recomputes crdt's per-entry hash of (kind, name, version,
// deleted); an origin's hash is the wrapping sum over its stored entries.
// crdt keeps its function unexported, so the store carries a copy to verify
// a file independently of crdt.State; TestEntryHashMatchesCRDT pins the two
// together (any drift fails the build's tests).
func entryHash(kind crdt.Kind, name string, v crdt.Version, deleted bool) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	h = (h ^ uint64(kind)) * prime
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < 8; i++ {
		h = (h ^ (uint64(v) >> (8 * i) & 0xff)) * prime
	}
	if deleted {
		h = (h ^ 1) * prime
	} else {
		h = (h ^ 2) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// originHashes recomputes every origin's hash from the entries.
func originHashes(entries []crdt.Entry) map[string]uint64 {
	out := map[string]uint64{}
	var cur string
	var sum uint64
	started := false
	for i := range entries {
		e := &entries[i]
		if !started || e.Origin != cur {
			if started {
				out[cur] += sum
			}
			cur, sum, started = e.Origin, 0, true
		}
		sum += entryHash(e.Kind, e.Name, e.Version, e.Deleted)
	}
	if started {
		out[cur] += sum
	}
	return out
}

// reconcileDigests compares each origin's persisted digest with the hash
// recomputed from its stored entries. For every origin that disagrees (or
// has entries but no digest) it rewrites d[origin] with Max = 0 and the
// recomputed hash, keeping GC and Retired: the entries stay usable for
// enforcement, but the replica no longer claims to hold anything of that
// origin, so anti-entropy re-pulls (and if needed resets) it. It returns
// the reset origins, sorted.
func reconcileDigests(d crdt.Digest, entries []crdt.Entry) []string {
	hashes := originHashes(entries)
	var reset []string
	for o, od := range d {
		if hashes[o] != od.Hash {
			reset = append(reset, o)
		}
	}
	for o := range hashes {
		if _, ok := d[o]; !ok {
			reset = append(reset, o)
		}
	}
	for _, o := range reset {
		od := d[o]
		d[o] = crdt.OriginDigest{Max: 0, Hash: hashes[o], GC: od.GC, Retired: od.Retired}
	}
	sortStrings(reset)
	return reset
}
