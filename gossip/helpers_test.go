package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

type tnode struct {
	*Node
	rep     *memReplica
	cluster string
	reg     *prometheus.Registry
	writer  *atomic.Bool
}

func testLogger() *slog.Logger {
	if os.Getenv("GOSSIP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startNode starts a node on real loopback UDP/TCP with test timing.
func startNode(t *testing.T, name, cluster string, keys [][]byte, mod func(*Config)) *tnode {
	t.Helper()
	inner, err := NewLoopbackTransport("127.0.0.1")
	require.NoError(t, err)
	rep := newMemReplica(t, cluster)
	reg := prometheus.NewRegistry()
	w := &atomic.Bool{}
	w.Store(true)
	cfg := Config{
		NodeName:            name,
		ClusterID:           cluster,
		BindAddr:            "127.0.0.1",
		EphemeralPort:       true,
		Keyring:             keys,
		Profile:             ProfileLocal,
		RejoinInterval:      500 * time.Millisecond,
		AntiEntropyInterval: 200 * time.Millisecond,
		IsWriter:            w.Load,
		Logger:              testLogger().With("t", name),
		Registerer:          reg,
		Transport:           NewFaultTransport(inner),
	}
	if mod != nil {
		mod(&cfg)
	}
	ConfigureReplica(&cfg, rep, crdt.DefaultLimits())
	n, err := New(cfg, rep)
	require.NoError(t, err)
	tn := &tnode{Node: n, rep: rep, cluster: cluster, reg: reg, writer: w}
	t.Cleanup(func() { _ = n.Shutdown() })
	return tn
}

func joinAll(t *testing.T, nodes ...*tnode) {
	t.Helper()
	// Join every earlier node: push/pull with each gives full views at once
	// instead of relying on alive broadcasts alone (CI machines are loaded).
	join := func(check bool) {
		for i, n := range nodes[1:] {
			if !check && n.ml.NumMembers() == len(nodes) {
				continue
			}
			var addrs []string
			for _, p := range nodes[:i+1] {
				addrs = append(addrs, p.Addr())
			}
			_, err := n.Join(addrs...)
			if check {
				require.NoError(t, err)
			}
		}
	}
	join(true)
	// Wait for the condition; under load a join's push/pull can time out,
	// so a node still short of members joins again now and then.
	lastJoin := time.Now()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.ml.NumMembers() != len(nodes) {
				if time.Since(lastJoin) > 3*time.Second {
					join(false)
					lastJoin = time.Now()
				}
				return false
			}
		}
		return true
	}, waitMembership, pollEvery, "membership did not converge")
}

func (n *tnode) write(t *testing.T, kind crdt.Kind, name string, value []byte, deleted bool) crdt.Delta {
	t.Helper()
	d, err := n.rep.Write(kind, name, value, deleted)
	require.NoError(t, err)
	require.NoError(t, n.Publish(d))
	return d
}

func podValue(t *testing.T, ip string) []byte {
	t.Helper()
	b, err := crdt.EncodeValue(&crdt.PodValue{IPs: []string{ip}, Labels: map[string]string{"app": "x"}, Phase: "Running"})
	require.NoError(t, err)
	return b
}

// dump renders a replica's entries (excluding stamps) for comparison.
func dump(r *memReplica) string {
	var lines []string
	r.View(func(s *crdt.State) {
		for _, o := range s.Origins() {
			for k := crdt.KindCluster; k <= crdt.KindReport; k++ {
				s.Range(o, k, func(e crdt.Entry) bool {
					lines = append(lines, fmt.Sprintf("%s v=%s del=%v val=%x", e.Key, e.Version, e.Deleted, e.Value))
					return true
				})
			}
		}
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func digestKey(d crdt.Digest) string {
	var parts []string
	for o, od := range d {
		parts = append(parts, fmt.Sprintf("%s:%d:%x:%d:%d", o, od.Max, od.Hash, od.GC, od.Retired))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func converged(nodes ...*tnode) bool {
	want := digestKey(nodes[0].rep.Digest())
	for _, n := range nodes[1:] {
		if digestKey(n.rep.Digest()) != want {
			return false
		}
	}
	return true
}

func requireConverged(t *testing.T, within time.Duration, nodes ...*tnode) {
	t.Helper()
	if !waitFor(within, func() bool { return converged(nodes...) }) {
		var s []string
		for _, n := range nodes {
			s = append(s, n.Name()+"="+digestKey(n.rep.Digest()))
		}
		t.Fatalf("replicas did not converge within %v: %s", within, strings.Join(s, " | "))
	}
	want := dump(nodes[0].rep)
	for _, n := range nodes[1:] {
		require.Equal(t, want, dump(n.rep), "entries of %s differ from %s", n.Name(), nodes[0].Name())
	}
}

func dropped(n *tnode, reason string) float64 {
	return testutil.ToFloat64(n.m.dropped.WithLabelValues(reason))
}

func has(n *tnode, k crdt.Key) (crdt.Entry, bool) {
	var e crdt.Entry
	var ok bool
	n.rep.View(func(s *crdt.State) { e, ok = s.Get(k) })
	return e, ok
}

func key(origin string, kind crdt.Kind, name string) crdt.Key {
	return crdt.Key{Origin: origin, Kind: kind, Name: name}
}

// decommission does what the daemon's decommission does with the node:
// retire the own cluster up to its watermark on the replica (signed, with
// a signer), then let the node disseminate it and leave.
func (tn *tnode) decommission(ctx context.Context) error {
	r, err := tn.rep.RetireOwn()
	if err != nil {
		return err
	}
	return tn.Decommission(ctx, r)
}
