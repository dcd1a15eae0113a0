package gossip

import (
	"bytes"
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

func newTestNet(t testing.TB) *netTransport {
	t.Helper()
	nt, err := newNetTransport("127.0.0.1", 0, log.New(io.Discard, "", 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = nt.Shutdown() })
	return nt
}

func netAddr(nt *netTransport) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(nt.port()))
}

// Packets arrive whole, from the sender's address, in a buffer of their own
// size: the reason this transport exists (memberlist's hands on a 64 KiB
// buffer per packet).
func TestNetTransportPackets(t *testing.T) {
	a, b := newTestNet(t), newTestNet(t)
	for _, size := range []int{1, 120, 1400, 9000} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		p := sendRecv(t, a, b, msg)
		require.Equal(t, msg, p.Buf)
		// its own size (rounded up to an allocation class), not 64 KiB
		require.Less(t, cap(p.Buf), size+1024, "a packet keeps only its own bytes")
		require.Equal(t, netAddr(a), p.From.String())
		require.WithinDuration(t, time.Now(), p.Timestamp, 5*time.Second)
	}
	// a host name is resolved, as memberlist does
	_, err := a.WriteTo([]byte("x"), net.JoinHostPort("localhost", strconv.Itoa(b.port())))
	require.NoError(t, err)
	_, err = a.WriteTo([]byte("x"), "no-port")
	require.Error(t, err)
}

// sendRecv sends msg from one transport to the other and returns the packet
// as received.
func sendRecv(t *testing.T, from, to *netTransport, msg []byte) *memberlist.Packet {
	t.Helper()
	_, err := from.WriteToAddress(msg, memberlist.Address{Addr: netAddr(to)})
	require.NoError(t, err)
	select {
	case p := <-to.PacketCh():
		return p
	case <-time.After(5 * time.Second):
		t.Fatalf("packet of %d bytes from %s to %s not received", len(msg), netAddr(from), netAddr(to))
		return nil
	}
}

// Bound to the unspecified address (the daemon's default), the transport
// exchanges packets with a loopback-bound one both ways.
func TestNetTransportUnspecifiedBind(t *testing.T) {
	wild, err := newNetTransport("0.0.0.0", 0, log.New(io.Discard, "", 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = wild.Shutdown() })
	lo := newTestNet(t)
	require.Equal(t, "to-lo", string(sendRecv(t, wild, lo, []byte("to-lo")).Buf))
	require.Equal(t, "to-wild", string(sendRecv(t, lo, wild, []byte("to-wild")).Buf))
}

// Streams: a dial reaches the other side's StreamCh, both ways of bytes work.
func TestNetTransportStreams(t *testing.T) {
	a, b := newTestNet(t), newTestNet(t)
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: netAddr(b)}, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	select {
	case s := <-b.StreamCh():
		defer s.Close()
		got := make([]byte, 5)
		_, err := io.ReadFull(s, got)
		require.NoError(t, err)
		require.Equal(t, "hello", string(got))
	case <-time.After(5 * time.Second):
		t.Fatal("stream not accepted")
	}
}

// UDP and TCP share the bound port, the advertise rules are memberlist's,
// and bad addresses are clear errors.
func TestNetTransportAddresses(t *testing.T) {
	a := newTestNet(t)
	require.Equal(t, a.port(), a.udp.LocalAddr().(*net.UDPAddr).Port)

	ip, port, err := a.FinalAdvertiseAddr("", 0)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", ip.String())
	require.Equal(t, a.port(), port)

	ip, port, err = a.FinalAdvertiseAddr("10.1.2.3", 7946)
	require.NoError(t, err)
	require.Equal(t, net.IPv4(10, 1, 2, 3).To4(), ip)
	require.Equal(t, 7946, port)

	_, _, err = a.FinalAdvertiseAddr("not-an-ip", 7946)
	require.ErrorContains(t, err, "not an IP address")

	_, err = newNetTransport("gossip.example", 0, log.New(io.Discard, "", 0))
	require.ErrorContains(t, err, "not an IP address")

	// a taken fixed port is an error naming it
	_, err = newNetTransport("127.0.0.1", a.port(), log.New(io.Discard, "", 0))
	require.ErrorContains(t, err, strconv.Itoa(a.port()))
}

// Shutdown stops both readers (it waits for them) and may be repeated; a
// stopped transport sends nothing.
func TestNetTransportShutdown(t *testing.T) {
	a := newTestNet(t)
	b := newTestNet(t)
	done := make(chan struct{})
	go func() {
		require.NoError(t, b.Shutdown())
		require.NoError(t, b.Shutdown())
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown hung")
	}
	_, err := b.WriteTo([]byte("x"), netAddr(a))
	require.Error(t, err)
}

// BenchmarkPacketReceive measures what receiving one 300 B packet
// allocates: here, and on memberlist's NetTransport.
func BenchmarkPacketReceive(b *testing.B) {
	msg := bytes.Repeat([]byte{7}, 300)
	run := func(b *testing.B, rx memberlist.Transport, rxAddr string) {
		tx := newTestNet(b)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := tx.WriteTo(msg, rxAddr); err != nil {
				b.Fatal(err)
			}
			<-rx.PacketCh()
		}
	}
	b.Run("coastguard", func(b *testing.B) {
		rx := newTestNet(b)
		run(b, rx, netAddr(rx))
	})
	b.Run("memberlist", func(b *testing.B) {
		rx, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
		require.NoError(b, err)
		defer rx.Shutdown()
		run(b, rx, net.JoinHostPort("127.0.0.1", strconv.Itoa(rx.GetAutoBindPort())))
	})
}
