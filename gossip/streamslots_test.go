package gossip

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// Issue 29, item 6: a key-less sender holding streams from many source
// IPs takes at most the unreserved slots; a known member's stream is
// still admitted.
func TestStreamSlotsReservedForKnownMembers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	refused := map[string]int{}
	g := newGuardTransport(nil, frameCheck{}, func(reason, from string, _ error) {
		if reason == dropStreamLimit {
			mu.Lock()
			refused[from]++
			mu.Unlock()
		}
	})
	g.limitLoopback = true
	g.known = func(ip string) bool { return ip == "127.0.0.2" }
	t.Cleanup(func() { close(g.done) })

	// dial from src and hand the accepted side to the guard, as the
	// transport's listener does
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	admit := func(src string) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		s, err := ln.Accept()
		require.NoError(t, err)
		held = append(held, c, s)
		g.admit(s)
	}
	count := func() (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range refused {
			n += v
		}
		return n
	}

	start := time.Now()
	for i := 0; i < 8; i++ { // 8 unknown sources, 4 streams each
		for j := 0; j < MaxInboundStreamsPerIP; j++ {
			admit("127.0.0." + strconv.Itoa(10+i))
		}
	}
	require.Equal(t, reservedKnownStreams, count(), "unknown sources share the unreserved slots")
	admit("127.0.0.2")
	require.Equal(t, reservedKnownStreams, count(), "a known member's stream is admitted")
	admit("127.0.0.99")
	require.Equal(t, reservedKnownStreams+1, count(), "another unknown source is not")
	require.Less(t, time.Since(start), streamHeaderTimeout, "slots were released by the header timeout during the test")
	require.Zero(t, refused["127.0.0.2"])
}

func TestMembersKnownIP(t *testing.T) {
	ms := newMembers("self", false)
	node := func(name, ip string) *memberlist.Node {
		return &memberlist.Node{Name: name, Addr: net.ParseIP(ip), Port: 7946}
	}
	ms.observe(node("self", "10.0.0.1"), "c1", "", 0, true, time.Unix(1, 0))
	ms.observe(node("b", "10.0.0.2"), "c2", "", 0, true, time.Unix(1, 0))
	ms.observe(node("c", "10.0.0.3"), "c3", "", 0, false, time.Unix(1, 0))
	ms.observe(node("d", "10.0.0.4"), "c4", "", metaLeaving, false, time.Unix(1, 0))
	require.False(t, ms.knownIP("10.0.0.1"), "self")
	require.True(t, ms.knownIP("10.0.0.2"), "alive member")
	require.True(t, ms.knownIP("10.0.0.3"), "suspected dead, not left: still rejoinable")
	require.False(t, ms.knownIP("10.0.0.4"), "left")
	require.False(t, ms.knownIP("10.0.0.9"))
	require.False(t, ms.knownIP("not an ip"))
}

// A Node's stream guard reserves its slots for the members of its own
// member table (the wiring a merge once dropped: the guard tests above
// build the guard by hand).
func TestNodeGuardKnowsItsMembers(t *testing.T) {
	a := startNode(t, "a", "c1", nil, nil)
	b := startNode(t, "b", "c2", nil, nil)
	joinAll(t, a, b)
	require.NotNil(t, a.guard.known, "the node's guard has its member table")
	require.Eventually(t, func() bool { return a.guard.known("127.0.0.1") }, 10*time.Second, 20*time.Millisecond,
		"b, a member on 127.0.0.1, is known to a's guard")
}
