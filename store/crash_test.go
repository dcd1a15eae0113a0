package store

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// The crash test re-executes this test binary as a writer child (selected
// by crashChildEnv, handled in TestMain). The child writes batches through a
// Replica - concurrent local writes (group-committed), deletes of older
// entries, and deltas applied from a simulated peer - and prints
// "committed <iter> <batch>" after every call of the batch returned. The
// parent SIGKILLs it at a random moment, reopens the file and checks that
// it is consistent and holds every batch the child reported.
const (
	crashChildEnv = "COASTGUARD_STORE_CRASH_CHILD"
	crashIterEnv  = "COASTGUARD_STORE_CRASH_ITER"
	crashWriters  = 8
	crashDelete   = 5 // batch b tombstones the writes of batch b-crashDelete
)

func crashPodName(iter, batch, g int) string { return fmt.Sprintf("it%d/b%d-g%d", iter, batch, g) }
func crashPeerName(iter, batch int) string   { return fmt.Sprintf("it%d/peer-b%d", iter, batch) }
func crashIP(iter, batch, g int) string      { return fmt.Sprintf("10.%d.%d.%d", iter, batch%250, g) }

func crashChild(path string, iter int) error {
	r, err := OpenReplica(path, "self", Options{MaxBatch: 16})
	if err != nil {
		return err
	}
	peer := crdt.NewState("peer")
	// A fresh peer incarnation per iteration writes at a higher epoch.
	if err := peer.SetEpoch(uint32(iter + 1)); err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	for batch := 0; ; batch++ {
		var wg sync.WaitGroup
		errs := make(chan error, crashWriters+1)
		for g := range crashWriters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := crdt.EncodeValue(&crdt.PodValue{Labels: map[string]string{"g": strconv.Itoa(g)}, IPs: []string{crashIP(iter, batch, g)}})
				if err == nil {
					_, err = r.Write(crdt.KindPod, crashPodName(iter, batch, g), v, false)
				}
				if err == nil && batch >= crashDelete {
					_, err = r.Write(crdt.KindPod, crashPodName(iter, batch-crashDelete, g), nil, true)
				}
				errs <- err
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := crdt.EncodeValue(&crdt.PodValue{IPs: []string{crashIP(iter, batch, 99)}})
			if err != nil {
				errs <- err
				return
			}
			d, _, err := peer.Write(crdt.KindPod, crashPeerName(iter, batch), v, false, 0)
			if err == nil {
				_, err = r.Apply(d)
			}
			errs <- err
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "committed %d %d\n", iter, batch)
		if err := out.Flush(); err != nil {
			return err
		}
	}
}

func TestCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.db")
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill-timing seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	committed := map[int]int{} // iter -> highest reported batch (-1 none)
	prevEpoch := uint32(0)
	const iterations = 5
	for iter := range iterations {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashIterEnv+"="+strconv.Itoa(iter))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		committed[iter] = -1
		first := make(chan struct{})
		lines := make(chan struct{})
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			once := sync.Once{}
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) == 3 && f[0] == "committed" {
					b, _ := strconv.Atoi(f[2])
					committed[iter] = b
					if b > crashDelete {
						once.Do(func() { close(first) })
					}
				}
			}
		}()
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("child made no progress; stderr: %s", stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		<-lines
		err = cmd.Wait()
		require.Error(t, err, "child must have been killed, not exited: %s", stderr.String())
		require.Greater(t, committed[iter], crashDelete, "child should commit several batches before the kill")
		t.Logf("iteration %d: killed after %d reported batches", iter, committed[iter]+1)

		// Reopen the raw store: consistent and complete.
		s, err := Open(path, Options{})
		require.NoError(t, err)
		require.Empty(t, s.Info().MovedAside, "a crash must never make the file look corrupt")
		snap, err := s.Load()
		require.NoError(t, err)
		require.Empty(t, snap.Reset, "persisted digests must match the entries they cover")
		require.Greater(t, snap.Writer.Epoch, prevEpoch)
		prevEpoch = snap.Writer.Epoch
		got := map[crdt.Key]crdt.Entry{}
		for _, e := range snap.Entries {
			got[e.Key] = e
		}
		for it := 0; it <= iter; it++ {
			for b := 0; b <= committed[it]; b++ {
				for g := range crashWriters {
					k := crdt.Key{Origin: "self", Kind: crdt.KindPod, Name: crashPodName(it, b, g)}
					e, ok := got[k]
					require.True(t, ok, "reported batch %d/%d lost %s", it, b, k)
					if b+crashDelete <= committed[it] {
						require.True(t, e.Deleted, "reported delete lost for %s", k)
					} else if !e.Deleted {
						var v crdt.PodValue
						require.NoError(t, crdt.DecodeValue(e.Value, &v))
						require.Equal(t, []string{crashIP(it, b, g)}, v.IPs)
					}
				}
				k := crdt.Key{Origin: "peer", Kind: crdt.KindPod, Name: crashPeerName(it, b)}
				_, ok := got[k]
				require.True(t, ok, "reported applied delta lost: %s", k)
			}
		}
		require.NoError(t, s.Close())
		// And the replica restores it (crdt.State verifies hashes again).
		r, err := OpenReplica(path, "self", Options{})
		require.NoError(t, err)
		require.Greater(t, r.Epoch(), prevEpoch)
		prevEpoch = r.Epoch()
		require.NoError(t, r.Close())
	}
}
