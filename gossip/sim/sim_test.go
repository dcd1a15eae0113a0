package sim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/gossip"
)

// A small mesh delivers every update to every member well within a second,
// for both coastguard and the naive baseline, and coastguard sends fewer
// bytes per update.
func TestSimSmallMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets, several seconds")
	}
	ctx := context.Background()
	cg, err := RunPropagationSim(ctx, Options{N: 5, Profile: gossip.ProfileWAN, Updates: 3, Entries: 500, IdleWindow: time.Second})
	require.NoError(t, err)
	// Every update reached every member within the simulator's per-update
	// window (no absolute latency is asserted: the machine may be loaded).
	require.Equal(t, cg.Expected, cg.Received)
	require.Greater(t, cg.PayloadBytes, 200)
	nv, err := RunPropagationSim(ctx, Options{N: 5, Profile: gossip.ProfileWAN, Updates: 3, Naive: true, IdleWindow: time.Second})
	require.NoError(t, err)
	require.Equal(t, nv.Expected, nv.Received)
	require.Less(t, cg.AppBytesPerUpdatePerNode, nv.AppBytesPerUpdatePerNode)
	t.Logf("coastguard: %+v", cg)
	t.Logf("naive:      %+v", nv)
}

// BenchmarkPropagation reports p50/p99 and bytes/update/node at N=10.
func BenchmarkPropagation(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := RunPropagationSim(context.Background(), Options{N: 10, Updates: 10, IdleWindow: 2 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.P50)/1e6, "p50-ms")
		b.ReportMetric(float64(r.P99)/1e6, "p99-ms")
		b.ReportMetric(r.AppBytesPerUpdatePerNode, "app-B/update/node")
		b.ReportMetric(r.WireBytesPerUpdatePerNode, "wire-B/update/node")
		b.ReportMetric(r.IdleWireBytesPerSecPerNode, "idle-wire-B/s/node")
	}
}

// The idle rate is subtracted, but a disturbed idle window (more traffic
// than the update phase itself) never makes the cost negative: it is
// clamped, flagged, and the gross figure is kept.
func TestNetPerUpdatePerNode(t *testing.T) {
	net, gross, clamped := NetPerUpdatePerNode(20*10*1000, 100, 5, 10, 20)
	require.Equal(t, 1000.0, gross)
	require.Equal(t, 1000.0-100*5*10/200.0, net)
	require.False(t, clamped)
	net, gross, clamped = NetPerUpdatePerNode(1000, 1500, 6, 20, 20)
	require.Equal(t, 0.0, net)
	require.Equal(t, 2.5, gross)
	require.True(t, clamped)
	net, gross, clamped = NetPerUpdatePerNode(1000, 1, 1, 0, 0)
	require.Zero(t, net+gross)
	require.False(t, clamped)
}

// tailMembers counts the members of the slowest 1 % of deliveries;
// missing deliveries count as the slowest.
func TestTailMembers(t *testing.T) {
	lat := make([]time.Duration, 0, 300)
	who := make([]int, 0, 300)
	for i := 0; i < 300; i++ {
		lat = append(lat, time.Duration(i%100)*time.Millisecond)
		who = append(who, i%100)
	}
	lat[7], lat[8], lat[9] = time.Second, time.Second, time.Second // members 7, 8, 9
	require.Equal(t, 3, tailMembers(lat, who, 300), "the 3 slowest of 300")
	require.Equal(t, 2, tailMembers(lat[:299], who[:299], 300), "one missing takes a tail slot")
	require.Equal(t, 0, tailMembers(nil, nil, 300))
}

func TestFDSinkCountsMemberlistEvents(t *testing.T) {
	s := &fdSink{}
	s.IncrCounterWithLabels([]string{"memberlist", "msg", "suspect"}, 1, nil)
	s.IncrCounter([]string{"svc", "memberlist", "msg", "suspect"}, 2)
	s.IncrCounter([]string{"memberlist", "msg", "dead"}, 1)
	s.IncrCounter([]string{"memberlist", "msg", "alive"}, 4)
	s.IncrCounter([]string{"memberlist", "degraded", "probe"}, 1)
	s.IncrCounter([]string{"memberlist", "udp", "sent"}, 300) // not an event
	s.IncrCounter([]string{"msg", "suspect"}, 1)              // not memberlist's
	require.Equal(t, [fdKinds]int64{3, 1, 4, 1}, s.snapshot())
	require.Equal(t, FDSecond{Suspect: 2, Dead: 1, Alive: 4}, fdDiff(s.snapshot(), [fdKinds]int64{1, 0, 0, 1}))
}

func TestQuietTail(t *testing.T) {
	q := FDSecond{Alive: 3} // alive messages alone are not churn
	require.False(t, quietTail(nil, 3))
	require.False(t, quietTail([]FDSecond{q, q}, 3), "too short")
	require.True(t, quietTail([]FDSecond{{Suspect: 9}, q, q, q}, 3))
	require.False(t, quietTail([]FDSecond{q, q, {ProbeFailed: 1}}, 3))
	require.False(t, quietTail([]FDSecond{q, {Suspect: 1}, q}, 3))
}

// memberlist counts every packet through the sink: the lookup must not
// allocate.
func TestFDSinkDoesNotAllocate(t *testing.T) {
	s := &fdSink{}
	key := []string{"memberlist", "udp", "sent"}
	sus := []string{"memberlist", "msg", "suspect"}
	require.Zero(t, testing.AllocsPerRun(100, func() {
		s.IncrCounterWithLabels(key, 300, nil)
		s.IncrCounterWithLabels(sus, 1, nil)
	}))
}
