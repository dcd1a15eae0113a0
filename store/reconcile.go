package store

import "github.com/coastguard-mcnp/coastguard/crdt"

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
		sum += crdt.EntryHash(e.Kind, e.Name, e.Version, e.Deleted)
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
