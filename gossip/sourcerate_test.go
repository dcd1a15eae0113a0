package gossip

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Issue 29, item 6: the per-sender rate limit was keyed on the sender name
// inside each message, so a key holder rotating names had every message
// accepted. It is now keyed on the source address, in the guard transport,
// before memberlist hands the message on: rotating names from one source
// gets no more than the one bucket (burst + rate x time).
func TestAttackRateLimitNotKeyedOnSenderName(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	a := startNode(t, "a", "c1", [][]byte{key}, func(c *Config) { c.PeerRateLimit = 50; c.PeerRateBurst = 100 })
	b := startNode(t, "b", "c2", [][]byte{key}, nil)
	joinAll(t, a, b)
	const label, sent = "coastguard", 1000

	udp, err := net.Dial("udp", a.Addr())
	require.NoError(t, err)
	defer udp.Close()
	start := time.Now()
	for i := range sent {
		msg := append([]byte{mlUserMsg}, encodeRetires(fmt.Sprintf("rogue-%d", i), nil)...)
		_, err := udp.Write(append(labelHeader(label), seal(t, key, msg, []byte(label))...))
		require.NoError(t, err)
		if i%100 == 99 {
			time.Sleep(5 * time.Millisecond) // stay within the socket buffer
		}
	}
	elapsed := time.Since(start)
	accepted := func() float64 { return testutil.ToFloat64(a.m.messages.WithLabelValues("in", "retire")) }
	require.Eventually(t, func() bool { return accepted()+dropped(a, dropRateLimited) >= sent*0.9 }, waitEvent, pollEvery)
	allowed := 100 + 50*elapsed.Seconds() + 10
	t.Logf("%d messages under %d sender names from one source in %v: %.0f accepted, %.0f rate_limited (bucket allows %.0f)",
		sent, sent, elapsed, accepted(), dropped(a, dropRateLimited), allowed)
	require.LessOrEqual(t, accepted(), allowed, "rotating sender names bypassed the rate limit")

	// The honest peer, another source, still gets through.
	b.write(t, crdt.KindPod, "ns/ok", podValue(t, "10.2.1.1"), false)
	requireConverged(t, waitConverge, a, b)
}
