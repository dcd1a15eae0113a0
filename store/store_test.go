package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func openTestStore(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func podEntry(t testing.TB, origin, name string, v crdt.Version, labels map[string]string, ips ...string) *crdt.Entry {
	b, err := crdt.EncodeValue(&crdt.PodValue{Labels: labels, IPs: ips})
	require.NoError(t, err)
	return &crdt.Entry{Key: crdt.Key{Origin: origin, Kind: crdt.KindPod, Name: name}, Version: v, Value: b, Stamp: 42}
}

func nsEntry(t testing.TB, origin, name string, v crdt.Version) *crdt.Entry {
	b, err := crdt.EncodeValue(&crdt.NamespaceValue{Labels: map[string]string{"team": name}})
	require.NoError(t, err)
	return &crdt.Entry{Key: crdt.Key{Origin: origin, Kind: crdt.KindNamespace, Name: name}, Version: v, Value: b}
}

func policyEntry(t testing.TB, origin, name string, v crdt.Version) *crdt.Entry {
	b, err := crdt.EncodeValue(&crdt.PolicyValue{UID: "u", Spec: []byte(`{}`)})
	require.NoError(t, err)
	return &crdt.Entry{Key: crdt.Key{Origin: origin, Kind: crdt.KindPolicy, Name: name}, Version: v, Value: b}
}

func put(e *crdt.Entry) crdt.Change { return crdt.Change{Key: e.Key, New: e} }

// scanPaths returns the paths of the entries under prefix, "(deleted)"
// appended to tombstones.
func scanPaths(t *testing.T, s *Store, prefix string, limit int) []string {
	t.Helper()
	var out []string
	require.NoError(t, s.Scan(prefix, limit, func(path string, e crdt.Entry) error {
		require.Equal(t, path, Path(e.Key))
		if e.Deleted {
			path += " (deleted)"
		}
		out = append(out, path)
		return nil
	}))
	return out
}

// livePaths is scanPaths without tombstones.
func livePaths(t *testing.T, s *Store, prefix string) []string {
	t.Helper()
	var out []string
	for _, p := range scanPaths(t, s, prefix, 0) {
		if !strings.HasSuffix(p, " (deleted)") {
			out = append(out, p)
		}
	}
	return out
}

// TestScanPrefix reads the proposal's etcd queries as prefixes of the
// primary key order: whole components never over-match (foo vs foobar,
// foo_bar; default vs default_x), partial ones match like etcd's byte
// prefixes, and the order is the key order (origin, kind number, name).
func TestScanPrefix(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "s.db"), Options{})
	require.True(t, s.Info().Created)
	app := func(v string) map[string]string { return map[string]string{"app": v} }
	tomb := podEntry(t, "foo", "default/dead", 9, app("web"), "10.0.0.9")
	tomb.Deleted, tomb.Value = true, nil
	changes := []crdt.Change{
		put(podEntry(t, "foo", "default/web-1", 1, map[string]string{"app": "web", "tier": "fe"}, "10.0.0.1", "fd00::1")),
		put(podEntry(t, "foo", "default/web-2", 2, app("web"), "10.0.0.2")),
		put(podEntry(t, "foo", "default/db-1", 3, app("db"), "10.0.0.3")),
		put(podEntry(t, "foo", "default_x/web-3", 4, app("web"), "10.0.0.4")),
		put(podEntry(t, "foo", "kube/web-4", 5, app("web"), "10.0.0.5")),
		put(podEntry(t, "foobar", "default/web-5", 1, app("web"), "10.1.0.1")),
		put(podEntry(t, "foo_bar", "default/web-6", 1, map[string]string{"app": "web_x"}, "10.2.0.1")),
		put(podEntry(t, "foo", "default/nolabel", 6, nil, "10.0.0.6")),
		put(tomb),
		put(nsEntry(t, "foo", "default", 7)),
		put(nsEntry(t, "foo", "default_x", 8)),
		put(nsEntry(t, "foobar", "other", 2)),
		put(policyEntry(t, "foo", "default/allow", 10)),
		put(policyEntry(t, "foobar", "default/deny", 3)),
	}
	digests := crdt.Digest{"foo": {Max: 10}, "foobar": {Max: 3}, "foo_bar": {Max: 1}}
	require.NoError(t, s.Commit(changes, digests, nil))

	require.Equal(t, []string{"/coastguard/foo/pod/default/db-1", "/coastguard/foo/pod/default/dead (deleted)",
		"/coastguard/foo/pod/default/nolabel", "/coastguard/foo/pod/default/web-1", "/coastguard/foo/pod/default/web-2"},
		scanPaths(t, s, "/coastguard/foo/pod/default/", 0))
	require.Equal(t, []string{"/coastguard/foo/pod/default_x/web-3"}, scanPaths(t, s, "/coastguard/foo/pod/default_x/", 0))
	require.Equal(t, []string{"/coastguard/foo/pod/default/web-1", "/coastguard/foo/pod/default/web-2", "/coastguard/foo/pod/default_x/web-3"},
		scanPaths(t, s, "/coastguard/foo/pod/default", 0)[3:], "a partial name is a byte prefix")
	require.Equal(t, []string{"/coastguard/foo/namespace/default", "/coastguard/foo/namespace/default_x"},
		scanPaths(t, s, "/coastguard/foo/namespace/", 0))
	require.Equal(t, []string{"/coastguard/foobar/policy/default/deny"}, scanPaths(t, s, "/coastguard/foobar/policy/", 0))
	require.Equal(t, []string{"/coastguard/foo/pod/default/db-1", "/coastguard/foo/pod/default/dead (deleted)"},
		scanPaths(t, s, "/coastguard/foo/po", 2), "a partial kind name filters the origin's entries (pods before policies: kind order)")
	require.Len(t, scanPaths(t, s, "/coastguard/foo/po", 0), 8)
	require.Len(t, scanPaths(t, s, "/coastguard/foo/", 0), 10)
	require.Len(t, scanPaths(t, s, "/coastguard/fo", 0), 14, "a partial origin")
	require.Len(t, scanPaths(t, s, "", 0), 14)
	require.Len(t, scanPaths(t, s, "/coastguard/foo/", 3), 3, "limit")
	require.Empty(t, scanPaths(t, s, "/coastguard/foo/nokind/", 0))
	require.Empty(t, scanPaths(t, s, "/other/", 0))

	// The value is the stored one (valid during the callback).
	require.NoError(t, s.Scan("/coastguard/foo/pod/default/web-1", 0, func(_ string, e crdt.Entry) error {
		var v crdt.PodValue
		require.NoError(t, crdt.DecodeValue(e.Value, &v))
		require.Equal(t, []string{"10.0.0.1", "fd00::1"}, v.IPs)
		require.Equal(t, crdt.Version(1), e.Version)
		return nil
	}))

	// Update: relabel web-2 to db; delete web-1 by tombstone; drop the policy.
	web1Tomb := &crdt.Entry{Key: changes[0].Key, Version: 20, Deleted: true}
	require.NoError(t, s.Commit([]crdt.Change{
		put(podEntry(t, "foo", "default/web-2", 21, app("db"), "10.0.0.22")),
		{Key: changes[0].Key, Old: changes[0].New, New: web1Tomb},
		{Key: changes[12].Key, Old: changes[12].New, New: nil},
	}, crdt.Digest{"foo": {Max: 21}}, nil))
	require.Equal(t, []string{"/coastguard/foo/pod/default/db-1", "/coastguard/foo/pod/default/dead (deleted)",
		"/coastguard/foo/pod/default/nolabel", "/coastguard/foo/pod/default/web-1 (deleted)", "/coastguard/foo/pod/default/web-2"},
		scanPaths(t, s, "/coastguard/foo/pod/default/", 0))
	require.Empty(t, scanPaths(t, s, "/coastguard/foo/policy/", 0))

	// The snapshot carries the tombstone, the digests and every value.
	snap, err := s.Load()
	require.NoError(t, err)
	// The test's digests carry no real hashes: load must not trust them.
	require.Equal(t, []string{"foo", "foo_bar", "foobar"}, snap.Reset)
	hashes := originHashes(snap.Entries)
	for _, o := range snap.Reset {
		require.Equal(t, crdt.OriginDigest{Hash: hashes[o]}, snap.Digest[o])
	}
	got := map[crdt.Key]crdt.Entry{}
	for _, e := range snap.Entries {
		got[e.Key] = e
	}
	require.Len(t, got, len(changes)-1) // policy removed
	require.True(t, got[web1Tomb.Key].Deleted)
	require.Equal(t, crdt.Version(20), got[web1Tomb.Key].Version)
	require.Equal(t, changes[2].New.Value, got[changes[2].Key].Value)
	require.Equal(t, int64(42), got[changes[2].Key].Stamp)
}

// TestEntriesRandom commits random upserts, tombstones and removals (with
// stale Old values, undecodable values and adversarial names) and checks
// the stored entries and every namespace prefix against a model.
func TestEntriesRandom(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "s.db"), Options{})
	r := rand.New(rand.NewPCG(7, 8))
	origins := []string{"a", "a_b", "ab", "b"}
	nss := []string{"default", "default_x", "kube", "x\x00y"}
	labelKeys := []string{"app", "app_x", "tier", "k\x00"}
	labelVals := []string{"web", "db", "web_x", ""}
	version := map[string]crdt.Version{}
	current := map[crdt.Key]*crdt.Entry{}
	var keys []crdt.Key
	for round := range 150 {
		var changes []crdt.Change
		digests := crdt.Digest{}
		for range 1 + r.IntN(20) {
			o := origins[r.IntN(len(origins))]
			version[o]++
			v := version[o]
			var k crdt.Key
			if len(keys) > 0 && r.IntN(3) > 0 {
				k = keys[r.IntN(len(keys))]
				o = k.Origin
				version[o]++
				v = version[o]
			} else {
				kind := []crdt.Kind{crdt.KindPod, crdt.KindPod, crdt.KindPod, crdt.KindNamespace, crdt.KindPolicy, crdt.KindCluster}[r.IntN(6)]
				name := fmt.Sprintf("%s/p%d", nss[r.IntN(len(nss))], r.IntN(30))
				if kind == crdt.KindNamespace {
					name = nss[r.IntN(len(nss))]
				}
				k = crdt.Key{Origin: o, Kind: kind, Name: name}
				if _, ok := current[k]; !ok {
					keys = append(keys, k)
				}
			}
			old := current[k]
			var ne *crdt.Entry
			switch op := r.IntN(10); {
			case op < 6: // upsert with random labels
				labels := map[string]string{}
				for range r.IntN(3) {
					labels[labelKeys[r.IntN(len(labelKeys))]] = labelVals[r.IntN(len(labelVals))]
				}
				switch k.Kind {
				case crdt.KindPod:
					ne = podEntry(t, k.Origin, k.Name, v, labels, fmt.Sprintf("10.%d.%d.%d", round%250, r.IntN(250), r.IntN(250)))
				case crdt.KindNamespace:
					ne = nsEntry(t, k.Origin, k.Name, v)
				case crdt.KindPolicy:
					ne = policyEntry(t, k.Origin, k.Name, v)
				default:
					ne = &crdt.Entry{Key: k, Version: v, Value: []byte{0x80}}
				}
				if r.IntN(20) == 0 {
					ne.Value = []byte("not msgpack") // undecodable values are stored as they are
				}
			case op < 8: // tombstone
				ne = &crdt.Entry{Key: k, Version: v, Deleted: true}
			default: // removed from storage (retire / GC)
				ne = nil
			}
			// Old is deliberately sometimes stale: the store must not rely on it.
			ch := crdt.Change{Key: k, Old: old, New: ne}
			if r.IntN(5) == 0 {
				ch.Old = nil
			}
			changes = append(changes, ch)
			if ne == nil {
				delete(current, k)
			} else {
				current[k] = ne
			}
			digests[o] = crdt.OriginDigest{Max: version[o]}
		}
		require.NoError(t, s.Commit(changes, digests, nil))
	}
	// Entries equal the model.
	snap, err := s.Load()
	require.NoError(t, err)
	require.Len(t, snap.Entries, len(current))
	for _, e := range snap.Entries {
		want := current[e.Key]
		require.NotNil(t, want, e.String())
		require.Equal(t, want.Version, e.Version)
		require.Equal(t, want.Deleted, e.Deleted)
		require.True(t, bytes.Equal(want.Value, e.Value))
	}
	// Brute-force query comparison for every (label, cluster, ns).
	for _, o := range origins {
		for _, ns := range nss {
			prefix := PathRoot + o + "/pod/" + ns + "/"
			var want []string
			for k, e := range current {
				if path := Path(k); strings.HasPrefix(path, prefix) {
					if e.Deleted {
						path += " (deleted)"
					}
					want = append(want, path)
				}
			}
			slices.Sort(want)
			require.Equal(t, want, scanPaths(t, s, prefix, 0), "%s/%s", o, ns)
		}
	}
}

func TestSchemaVersionNewerRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaSchema, u32(SchemaVersion+1))
	}))
	require.NoError(t, s.Close())
	_, err = Open(path, Options{})
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, SchemaVersion+1, se.Found)
	require.Contains(t, err.Error(), fmt.Sprintf("schema version %d", SchemaVersion+1))
	require.Contains(t, err.Error(), fmt.Sprintf("supports at most %d", SchemaVersion))
	// Refused, not moved aside.
	matches, _ := filepath.Glob(path + ".corrupt-*")
	require.Empty(t, matches)
	_, err = os.Stat(path)
	require.NoError(t, err)
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Commit([]crdt.Change{put(podEntry(t, "c", "ns/p", 1, nil, "1.2.3.4"))},
		crdt.Digest{"c": {Max: 1, Hash: 5}}, &WriterMeta{Epoch: 3, LastVersion: 7}))
	require.NoError(t, s.Close())
	s2 := openTestStore(t, path, Options{})
	require.False(t, s2.Info().Created)
	snap, err := s2.Load()
	require.NoError(t, err)
	require.Len(t, snap.Entries, 1)
	require.Equal(t, WriterMeta{Epoch: 3, LastVersion: 7}, snap.Writer)
}

func TestLockedFileIsAnErrorNotCorruption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	openTestStore(t, path, Options{})
	_, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
	require.ErrorContains(t, err, "locked")
	matches, _ := filepath.Glob(path + ".corrupt-*")
	require.Empty(t, matches)
}

// populated writes a store with enough data to span many pages.
func populated(t *testing.T, path string) []byte {
	s, err := Open(path, Options{})
	require.NoError(t, err)
	var changes []crdt.Change
	for i := range 3000 {
		changes = append(changes, put(podEntry(t, "c", fmt.Sprintf("ns%d/pod-%d", i%7, i), crdt.Version(i+1),
			map[string]string{"app": fmt.Sprint(i % 13)}, fmt.Sprintf("10.0.%d.%d", i/250, i%250))))
	}
	require.NoError(t, s.Commit(changes, crdt.Digest{"c": {Max: 3000}}, nil))
	require.NoError(t, s.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func TestCorruptFileMovedAside(t *testing.T) {
	cases := map[string]func(b []byte) []byte{
		"truncated-half": func(b []byte) []byte { return b[:len(b)/2] },
		"truncated-odd":  func(b []byte) []byte { return b[:len(b)/3+123] },
		"empty":          func(b []byte) []byte { return nil },
		"junk":           func(b []byte) []byte { return bytes.Repeat([]byte("coastguard"), 5000) },
		"meta-garbled": func(b []byte) []byte {
			for i := 16; i < 200; i++ { // both meta pages' headers
				b[i] ^= 0x5A
				b[4096+i] ^= 0x5A
			}
			return b
		},
		"late-pages-garbled": func(b []byte) []byte {
			// Only the second half of the file: leaves and branches, not the
			// meta pages or (usually) the root; only the page check sees it.
			r := rand.New(rand.NewPCG(11, 12))
			for p := len(b) / 4096 / 2; p < len(b)/4096; p++ {
				off := p*4096 + r.IntN(64)
				for i := range 32 {
					b[off+i] = byte(r.Uint32())
				}
			}
			return b
		},
		"pages-garbled": func(b []byte) []byte {
			r := rand.New(rand.NewPCG(9, 9))
			for p := 2; p < len(b)/4096; p++ {
				off := p*4096 + r.IntN(64)
				for i := range 32 {
					b[off+i] = byte(r.Uint32())
				}
			}
			return b
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			orig := populated(t, path)
			bad := mutate(append([]byte(nil), orig...))
			require.NoError(t, os.WriteFile(path, bad, 0o600))
			reg := prometheus.NewRegistry()
			s, err := Open(path, Options{Registerer: reg, Check: CheckAlways})
			require.NoError(t, err)
			defer s.Close()
			info := s.Info()
			require.True(t, info.Created)
			require.ErrorIs(t, info.Corrupt, ErrCorrupt)
			require.NotEmpty(t, info.MovedAside)
			moved, err := os.ReadFile(info.MovedAside)
			require.NoError(t, err, "moved-aside file must exist")
			require.True(t, bytes.Equal(bad, moved), "moved-aside file must be untouched")
			require.Equal(t, 1.0, testutil.ToFloat64(s.m.corruptFiles))
			// The fresh store is empty and writable.
			snap, err := s.Load()
			require.NoError(t, err)
			require.Empty(t, snap.Entries)
			require.NoError(t, s.Commit([]crdt.Change{put(podEntry(t, "c", "ns/p", 1, nil))}, crdt.Digest{"c": {Max: 1}}, nil))
		})
	}
}

func TestCommitAfterCloseFails(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Commit(nil, nil, nil), ErrClosed)
	require.NoError(t, s.Close())
}

func TestFullCheckAfterUncleanShutdownOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.db")
	s, err := Open(path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Commit([]crdt.Change{put(podEntry(t, "c", "ns/p", 1, nil, "1.1.1.1"))}, crdt.Digest{"c": {Max: 1}}, nil))
	// A copy taken while the store is open is exactly what a crash leaves.
	img, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s2 := openTestStore(t, path, Options{})
	require.False(t, s2.Info().Unclean)
	require.False(t, s2.Info().Checked, "clean shutdown: no full page check")

	crashed := filepath.Join(dir, "crashed.db")
	require.NoError(t, os.WriteFile(crashed, img, 0o600))
	s3 := openTestStore(t, crashed, Options{})
	require.True(t, s3.Info().Unclean)
	require.True(t, s3.Info().Checked, "unclean shutdown: full page check")
	require.Empty(t, s3.Info().MovedAside)
	snap, err := s3.Load()
	require.NoError(t, err)
	require.Len(t, snap.Entries, 1)
}

func TestRecordChecksumDetectsDamagedValue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	r, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	for i := range 20 {
		_, err := r.Write(crdt.KindPod, fmt.Sprintf("ns/p%d", i), podValue(t, nil, fmt.Sprintf("10.77.77.%d", i)), false)
		require.NoError(t, err)
	}
	require.NoError(t, r.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	// Flip one byte of a value inside the entries bucket (the same IP is
	// also in the index buckets; damage only the first occurrence that sits
	// in an entry record, identified by the msgpack "ip" field prefix).
	needle := []byte("10.77.77.13")
	i := -1
	for off := 0; ; {
		j := bytes.Index(b[off:], needle)
		require.GreaterOrEqual(t, j, 0, "value not found in an entry record")
		j += off
		if bytes.Contains(b[max(0, j-8):j], []byte("ip")) {
			i = j
			break
		}
		off = j + 1
	}
	b[i+9] ^= 0x01 // "10.77.77.13" -> "10.77.77.03"
	require.NoError(t, os.WriteFile(path, b, 0o600))
	r2, err := OpenReplica(path, "c1", Options{})
	require.NoError(t, err)
	defer r2.Close()
	require.ErrorContains(t, r2.Info().Corrupt, "checksum")
	require.FileExists(t, r2.Info().MovedAside)
}

func TestCommitFailureIsSticky(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "s.db"), Options{})
	good := put(podEntry(t, "c", "ns/ok", 1, nil))
	huge := put(podEntry(t, "c", "ns/"+string(bytes.Repeat([]byte("x"), bolt.MaxKeySize)), 2, nil))
	err := s.Commit([]crdt.Change{good, huge}, crdt.Digest{"c": {Max: 2}}, nil)
	require.Error(t, err)
	// Nothing of the failed transaction is visible, and later writes are
	// refused: memory would otherwise run ahead of disk unnoticed.
	require.Empty(t, scanPaths(t, s, "/coastguard/c/", 0))
	err2 := s.Commit([]crdt.Change{good}, nil, nil)
	require.ErrorContains(t, err2, "refusing further writes")
}

func TestScansOnDamagedPagesReturnErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	b := populated(t, path)
	r := rand.New(rand.NewPCG(13, 14))
	for p := 2; p < len(b)/4096; p++ {
		off := p*4096 + r.IntN(64)
		for i := range 32 {
			b[off+i] = byte(r.Uint32())
		}
	}
	require.NoError(t, os.WriteFile(path, b, 0o600))
	// Skip every check that would have moved the file aside, then query:
	// damage must surface as ErrCorrupt errors, never as a crash.
	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err, "bbolt's own open does not notice page damage")
	s := &Store{db: db, path: path, opts: Options{}, m: mustMetrics(t), counts: map[string]int{}}
	s.opts.defaults()
	s.log = s.opts.Logger
	s.start()
	defer s.Close()
	var errs int
	for i := range 7 {
		if err := s.Scan(fmt.Sprintf("/coastguard/c/pod/ns%d/", i), 0, func(string, crdt.Entry) error { return nil }); err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			errs++
		}
	}
	require.Positive(t, errs, "damage in every page must be noticed by some query")
	require.True(t, s.corruptSeen.Load(), "Close must not mark a damaged file clean")
	// Writes walking into damaged pages fail (and stick) instead of crashing.
	var changes []crdt.Change
	for i := range 200 {
		changes = append(changes, put(podEntry(t, "c", fmt.Sprintf("ns%d/pod-%d", i%7, i*13), crdt.Version(5000+i), nil)))
	}
	if err := s.Commit(changes, crdt.Digest{"c": {Max: 6000}}, nil); err != nil {
		require.ErrorIs(t, err, ErrCorrupt)
	}
}

// A failed commit is counted, reported once through OnCommitError as a
// CommitError (a local failure, never a peer's), and makes the store refuse
// writes.
func TestCommitErrorIsLoudAndLocal(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	var calls atomic.Int32
	var got error
	s, err := Open(filepath.Join(dir, "s.db"), Options{Registerer: reg, OnCommitError: func(e error) { calls.Add(1); got = e }})
	require.NoError(t, err)
	require.NoError(t, s.SetSelf("eu-1"))
	require.NoError(t, s.db.Close()) // every later transaction fails
	err = s.SetSelf("eu-2")
	require.Error(t, err)
	var ce *CommitError
	require.ErrorAs(t, err, &ce)
	require.True(t, ce.LocalStoreFailure())
	require.Error(t, s.SetSelf("eu-3"), "refuses later writes")
	require.Equal(t, int32(1), calls.Load())
	require.ErrorAs(t, got, &ce)
	require.ErrorAs(t, s.Failed(), &ce)
	require.Equal(t, 1.0, testutil.ToFloat64(s.m.commitErrors))
}

func mustMetrics(t *testing.T) *metrics {
	t.Helper()
	m, err := newMetrics(nil)
	require.NoError(t, err)
	return m
}
