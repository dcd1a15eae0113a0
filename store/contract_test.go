package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// The Replica contract (docs/ARCHITECTURE.md, "Store"), checked on every
// Backend: what the daemon and gossip may rely on whatever keeps the state.

// contractBackend is one Backend under the contract.
type contractBackend struct {
	name string
	// fresh returns an empty store and a function that opens a replica on
	// it; opening again after Close is a restart.
	fresh func(t *testing.T, opts Options) func(self string) (*Replica, error)
	// commits counts the commits so far.
	commits func(t *testing.T, r *Replica) int
	// durable returns the committed entries (safe from any goroutine).
	durable func(r *Replica) (map[crdt.Key]crdt.Entry, error)
	// breakCommits makes every later commit fail.
	breakCommits func(t *testing.T, r *Replica)
}

var contractBackends = []contractBackend{
	{
		name: "bbolt",
		fresh: func(t *testing.T, opts Options) func(string) (*Replica, error) {
			path := filepath.Join(t.TempDir(), "r.db")
			return func(self string) (*Replica, error) { return OpenReplica(path, self, opts) }
		},
		commits: func(t *testing.T, r *Replica) int { return int(commitCount(t, r)) },
		durable: func(r *Replica) (map[crdt.Key]crdt.Entry, error) {
			snap, err := r.Store().Load()
			if err != nil {
				return nil, err
			}
			return entryMap(snap.Entries), nil
		},
		// Every later transaction fails, as on a failed disk.
		breakCommits: func(t *testing.T, r *Replica) { require.NoError(t, r.Store().db.Close()) },
	},
	{
		name: "memory",
		fresh: func(_ *testing.T, opts Options) func(string) (*Replica, error) {
			m := NewMemBackend()
			return func(self string) (*Replica, error) { return NewReplica(m, self, opts) }
		},
		commits: func(_ *testing.T, r *Replica) int { return r.backend.(*MemBackend).Commits() },
		durable: func(r *Replica) (map[crdt.Key]crdt.Entry, error) {
			m := r.backend.(*MemBackend)
			m.mu.Lock()
			defer m.mu.Unlock()
			out := make(map[crdt.Key]crdt.Entry, len(m.entries))
			for k, e := range m.entries {
				out[k] = e
			}
			return out, nil
		},
		breakCommits: func(_ *testing.T, r *Replica) { r.backend.(*MemBackend).FailCommits(errors.New("disk full")) },
	},
}

func entryMap(entries []crdt.Entry) map[crdt.Key]crdt.Entry {
	out := make(map[crdt.Key]crdt.Entry, len(entries))
	for _, e := range entries {
		out[e.Key] = e
	}
	return out
}

func TestReplicaContract(t *testing.T) {
	for _, cb := range contractBackends {
		t.Run(cb.name, func(t *testing.T) {
			for _, c := range []struct {
				name string
				fn   func(*testing.T, contractBackend)
			}{
				{"MergeTombstoneRetire", contractMerge},
				{"RedeliveryCommitsNothing", contractRedelivery},
				{"FeedAfterCommitInOrder", contractFeed},
				{"ReopenRestoresAndBumpsEpoch", contractReopen},
				{"ConcurrentWriters", contractConcurrent},
				{"CommitFailureFailsClosed", contractCommitFailure},
				{"ObserverAndIdentity", contractIdentity},
			} {
				t.Run(c.name, func(t *testing.T) { c.fn(t, cb) })
			}
		})
	}
}

// open opens a replica on a fresh store of cb, closed at cleanup.
func (cb contractBackend) open(t *testing.T, self string) (*Replica, func(string) (*Replica, error)) {
	t.Helper()
	return cb.openWith(t, self, Options{Logger: quiet})
}

func (cb contractBackend) openWith(t *testing.T, self string, opts Options) (*Replica, func(string) (*Replica, error)) {
	t.Helper()
	reopen := cb.fresh(t, opts)
	r, err := reopen(self)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, reopen
}

func newPeer(t *testing.T, origin string) *crdt.State {
	t.Helper()
	p := crdt.NewState(origin)
	require.NoError(t, p.SetEpoch(1))
	return p
}

func peerWrite(t *testing.T, p *crdt.State, name string, deleted bool, ip string) crdt.Delta {
	t.Helper()
	var v []byte
	if !deleted {
		v = podValue(t, map[string]string{"app": "web"}, ip)
	}
	d, _, err := p.Write(crdt.KindPod, name, v, deleted, 1)
	require.NoError(t, err)
	return d
}

func getEntry(r *Replica, k crdt.Key) (e crdt.Entry, ok bool) {
	r.View(func(st *crdt.State) { e, ok = st.Get(k) })
	return e, ok
}

// Applied deltas merge by version, deletions leave tombstones, a
// retirement drops the origin's entries for good; the replica's digest
// matches the origin's and what is committed matches what is visible.
func contractMerge(t *testing.T, cb contractBackend) {
	r, _ := cb.open(t, "c1")
	peer := newPeer(t, "peer")
	k := crdt.Key{Origin: "peer", Kind: crdt.KindPod, Name: "ns/a"}
	old := peerWrite(t, peer, "ns/a", false, "10.0.0.1")
	peerWrite(t, peer, "ns/a", false, "10.0.0.2")
	peerWrite(t, peer, "ns/b", false, "10.0.0.3")

	ch, err := r.Apply(peer.DeltaSince(r.Digest(), 0)...)
	require.NoError(t, err)
	require.Len(t, ch, 2)
	want, _ := peer.Get(k)
	got, ok := getEntry(r, k)
	require.True(t, ok)
	require.Equal(t, want.Version, got.Version)
	require.Equal(t, peer.Digest()["peer"], r.Digest()["peer"])

	// A stale delta changes nothing.
	ch, err = r.Apply(old)
	require.NoError(t, err)
	require.Empty(t, ch)
	got, _ = getEntry(r, k)
	require.Equal(t, want.Version, got.Version, "an older version must not win")

	// A deletion is a tombstone, visible and committed.
	ch, err = r.Apply(peerWrite(t, peer, "ns/a", true, ""))
	require.NoError(t, err)
	require.Len(t, ch, 1)
	require.NotNil(t, ch[0].Old)
	require.True(t, ch[0].New.Deleted)
	got, ok = getEntry(r, k)
	require.True(t, ok)
	require.True(t, got.Deleted)
	committed, err := cb.durable(r)
	require.NoError(t, err)
	require.True(t, committed[k].Deleted)
	require.Equal(t, peer.Digest()["peer"], r.Digest()["peer"])

	// Retirement removes everything of the origin, in memory and committed,
	// and the origin's old deltas cannot bring it back.
	ch, err = r.ApplyRetire(r.RetireRecord("peer"))
	require.NoError(t, err)
	require.Len(t, ch, 2)
	for _, c := range ch {
		require.Nil(t, c.New)
	}
	require.NotZero(t, r.Digest()["peer"].Retired)
	var left int
	r.View(func(st *crdt.State) { left = st.Len("peer") })
	require.Zero(t, left)
	committed, err = cb.durable(r)
	require.NoError(t, err)
	for key := range committed {
		require.NotEqual(t, "peer", key.Origin, "retired entry still committed")
	}
	ch, err = r.Apply(peer.DeltaSince(crdt.Digest{}, 0)...)
	require.NoError(t, err)
	require.Empty(t, ch)
}

// Gossip re-delivers what a replica has constantly: that must not cost a
// commit.
func contractRedelivery(t *testing.T, cb contractBackend) {
	r, _ := cb.open(t, "c1")
	peer := newPeer(t, "peer")
	d := peerWrite(t, peer, "ns/a", false, "10.0.0.1")
	ch, err := r.Apply(d)
	require.NoError(t, err)
	require.Len(t, ch, 1)
	n := cb.commits(t, r)
	for range 3 {
		ch, err = r.Apply(d)
		require.NoError(t, err)
		require.Empty(t, ch)
	}
	rt := r.RetireRecord("peer")
	_, err = r.ApplyRetire(rt)
	require.NoError(t, err)
	require.Equal(t, n+1, cb.commits(t, r))
	ch, err = r.ApplyRetire(rt)
	require.NoError(t, err)
	require.Empty(t, ch)
	require.NoError(t, r.SetMinEpoch(r.Epoch())) // not a raise
	require.Equal(t, n+1, cb.commits(t, r), "re-deliveries and no-ops must not commit")
}

// Subscribers see every change exactly once, in commit order, and only
// once it is committed.
func contractFeed(t *testing.T, cb contractBackend) {
	r, _ := cb.open(t, "c1")
	peer := newPeer(t, "peer")
	var mu sync.Mutex
	var got []crdt.Change
	var early []string
	r.Subscribe(func(chs []crdt.Change) {
		durable, err := cb.durable(r)
		mu.Lock()
		defer mu.Unlock()
		for _, c := range chs {
			if e, ok := durable[c.Key]; err != nil || !ok || e.Version < c.New.Version {
				early = append(early, fmt.Sprintf("%s (%v)", c.Key, err))
			}
		}
		got = append(got, chs...)
	})
	var want []crdt.Key
	for i := range 20 {
		name := fmt.Sprintf("ns/own-%d", i)
		_, err := r.Write(crdt.KindPod, name, podValue(t, nil), false)
		require.NoError(t, err)
		want = append(want, crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: name})
		name = fmt.Sprintf("ns/peer-%d", i)
		_, err = r.Apply(peerWrite(t, peer, name, false, "10.0.0.1"))
		require.NoError(t, err)
		want = append(want, crdt.Key{Origin: "peer", Kind: crdt.KindPod, Name: name})
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= len(want)
	}, 20*time.Second, 5*time.Millisecond, "change feed incomplete")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, early, "notified before the commit")
	require.Len(t, got, len(want))
	for i, c := range got {
		require.Equal(t, want[i], c.Key, "change %d out of commit order", i)
	}
}

// A restart restores exactly what was committed, with a higher writer
// epoch: own versions never regress.
func contractReopen(t *testing.T, cb contractBackend) {
	r, reopen := cb.open(t, "c1")
	peer := newPeer(t, "peer")
	_, err := r.Apply(peerWrite(t, peer, "ns/p", false, "10.0.0.1"))
	require.NoError(t, err)
	var last crdt.Version
	for i := range 10 {
		d, err := r.Write(crdt.KindPod, fmt.Sprintf("ns/p%d", i%4), podValue(t, nil), i == 9)
		require.NoError(t, err)
		last = d.To
	}
	require.NoError(t, r.SetMinEpoch(7))
	dig, epoch := r.Digest(), r.Epoch()
	var entries []crdt.Entry
	r.View(func(st *crdt.State) { entries = stateEntries(st) })
	require.NoError(t, r.Close())

	r2, err := reopen("c1")
	require.NoError(t, err)
	defer r2.Close()
	require.Equal(t, dig, r2.Digest())
	require.Empty(t, r2.ResetOrigins())
	var entries2 []crdt.Entry
	r2.View(func(st *crdt.State) { entries2 = stateEntries(st) })
	require.Equal(t, entries, entries2)
	require.Greater(t, r2.Epoch(), epoch, "epoch must be bumped on every open")
	d, err := r2.Write(crdt.KindPod, "ns/new", podValue(t, nil), false)
	require.NoError(t, err)
	require.Greater(t, d.To, last, "versions never regress across restarts")
}

// Writers, appliers and readers at once (run with -race): every change is
// committed and notified once, own versions in commit order, and a restart
// sees the same state.
func contractConcurrent(t *testing.T, cb contractBackend) {
	r, reopen := cb.open(t, "c1")
	var notified sync.Map
	var bad error
	var mu sync.Mutex
	var lastOwn crdt.Version
	r.Subscribe(func(chs []crdt.Change) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range chs {
			id := fmt.Sprintf("%s@%d", c.Key, c.New.Version)
			if _, loaded := notified.LoadOrStore(id, true); loaded {
				bad = fmt.Errorf("notified twice: %s", id)
			}
			if c.Key.Origin == "c1" {
				if c.New.Version <= lastOwn {
					bad = fmt.Errorf("own version %d notified after %d: out of commit order", c.New.Version, lastOwn)
				}
				lastOwn = c.New.Version
			}
		}
	})
	const writers, perWriter, peers = 6, 15, 2
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range perWriter {
				_, err := r.Write(crdt.KindPod, fmt.Sprintf("ns/g%d-%d", g, i), podValue(t, nil), false)
				assert.NoError(t, err)
			}
		})
	}
	for p := range peers {
		wg.Go(func() {
			peer := newPeer(t, fmt.Sprintf("peer%d", p))
			for i := range perWriter {
				_, err := r.Apply(peerWrite(t, peer, fmt.Sprintf("ns/p%d", i), false, "10.0.0.1"))
				assert.NoError(t, err)
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = r.DeltaSince(crdt.Digest{}, 10)
			r.View(func(st *crdt.State) { _ = st.Len("c1") })
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	dig := r.Digest()
	require.NoError(t, r.Close())
	n := 0
	notified.Range(func(any, any) bool { n++; return true })
	require.Equal(t, (writers+peers)*perWriter, n)
	mu.Lock()
	require.NoError(t, bad)
	mu.Unlock()
	r2, err := reopen("c1")
	require.NoError(t, err)
	defer r2.Close()
	require.Equal(t, dig["peer0"], r2.Digest()["peer0"])
	require.Equal(t, dig["c1"].Hash, r2.Digest()["c1"].Hash)
}

// A failed commit reaches the caller as a local CommitError and
// OnCommitError (once), is never notified, and the replica refuses every
// later mutation without touching its state; a restart brings back exactly
// what was committed.
func contractCommitFailure(t *testing.T, cb contractBackend) {
	var reported []error
	var repMu sync.Mutex
	r, reopen := cb.openWith(t, "c1", Options{Logger: quiet, OnCommitError: func(err error) {
		repMu.Lock()
		reported = append(reported, err)
		repMu.Unlock()
	}})
	var mu sync.Mutex
	var notified []crdt.Key
	r.Subscribe(func(chs []crdt.Change) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range chs {
			notified = append(notified, c.Key)
		}
	})
	_, err := r.Write(crdt.KindPod, "ns/kept", podValue(t, nil), false)
	require.NoError(t, err)
	committed := r.Digest()
	require.NoError(t, r.Failed())

	cb.breakCommits(t, r)
	_, err = r.Write(crdt.KindPod, "ns/lost", podValue(t, nil), false)
	require.Error(t, err)
	var ce *CommitError
	require.ErrorAs(t, err, &ce)
	require.True(t, ce.LocalStoreFailure(), "a local failure, never a peer's fault")
	require.ErrorAs(t, r.Failed(), &ce)

	// Refused before touching the state.
	frozen := r.Digest()
	peer := newPeer(t, "peer")
	_, err = r.Apply(peerWrite(t, peer, "ns/x", false, "10.0.0.1"))
	require.ErrorAs(t, err, &ce)
	_, err = r.Write(crdt.KindPod, "ns/later", podValue(t, nil), false)
	require.ErrorAs(t, err, &ce)
	_, err = r.WriteMany([]WriteOp{{Kind: crdt.KindPod, Name: "ns/many", Value: podValue(t, nil)}})
	require.ErrorAs(t, err, &ce)
	_, err = r.BumpEpoch()
	require.ErrorAs(t, err, &ce)
	require.ErrorAs(t, r.SetMinEpoch(r.Epoch()+5), &ce)
	_, _, err = r.CollectGarbage(1)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, frozen, r.Digest(), "a failed replica must not change its state")
	repMu.Lock()
	require.Len(t, reported, 1, "OnCommitError is called once, with the first failure")
	require.ErrorAs(t, reported[0], &ce)
	repMu.Unlock()
	_ = r.Close()
	mu.Lock()
	require.Equal(t, []crdt.Key{{Origin: "c1", Kind: crdt.KindPod, Name: "ns/kept"}}, notified,
		"only committed changes are notified")
	mu.Unlock()

	r2, err := reopen("c1")
	require.NoError(t, err)
	defer r2.Close()
	require.NoError(t, r2.Failed())
	require.Equal(t, committed["c1"].Hash, r2.Digest()["c1"].Hash, "the restart sees exactly what was committed")
	_, ok := getEntry(r2, crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: "ns/lost"})
	require.False(t, ok)
	_, err = r2.Write(crdt.KindPod, "ns/again", podValue(t, nil), false)
	require.NoError(t, err)
}

// An observer never writes; stored state of one cluster is never opened as
// another's.
func contractIdentity(t *testing.T, cb contractBackend) {
	obs, _ := cb.open(t, "")
	_, err := obs.Write(crdt.KindPod, "ns/p", podValue(t, nil), false)
	require.Error(t, err)
	require.Error(t, obs.SetMinEpoch(3))
	_, err = obs.Apply(peerWrite(t, newPeer(t, "peer"), "ns/p", false, "10.0.0.1"))
	require.NoError(t, err, "an observer still merges")

	r, reopen := cb.open(t, "c1")
	require.NoError(t, r.Close())
	_, err = reopen("c2")
	require.ErrorContains(t, err, `belongs to cluster "c1"`)
}
