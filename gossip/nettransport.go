package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// netTransport is memberlist's network transport (UDP packets, TCP streams
// on one bind address and port), written here for one reason: memberlist's
// own NetTransport reads every UDP packet into a fresh 64 KiB buffer and
// hands that buffer on, whatever the packet's size (ours are ~100-1400 B).
// That garbage was most of what a node allocates: 63 % of all allocation
// in the 300-member simulator, which shares one heap. It made the garbage
// collector run every ~0.6 s there, and a collection charges mark assists
// to a goroutine in proportion to what it allocates, so the packet readers
// were the goroutines it slowed most: a hop of the push tree then took
// 100-250 ms instead of ~1 ms (docs/PERFORMANCE.md, eighth pass). Here a
// packet is read into one reused buffer and copied out at its own size.
//
// Everything else behaves as memberlist.NetTransport does: TCP and UDP on
// the same port (port 0: the kernel picks it for TCP, and a taken UDP port
// is retried up to 10 times), a 2 MiB UDP receive buffer (halved until the
// kernel accepts it), accept errors backed off from 5 ms to 1 s, and the
// same advertise-address rules (FinalAdvertiseAddr).
type netTransport struct {
	bind     net.IP
	tcp      *net.TCPListener
	udp      *net.UDPConn
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	closed   atomic.Bool
	wg       sync.WaitGroup
	logger   *log.Logger
}

var _ memberlist.NodeAwareTransport = (*netTransport)(nil)

const (
	// maxPacketSize is the largest UDP payload; every read fits in it.
	maxPacketSize = 65536
	udpRecvBuffer = 2 << 20
	// ephemeralTries: with port 0 the UDP side of a kernel-chosen TCP port
	// can be taken already; bind again.
	ephemeralTries = 10
)

// newNetTransport binds TCP and UDP on bindAddr:port (port 0: any free
// port, the same for both) and starts reading.
func newNetTransport(bindAddr string, port int, logger *log.Logger) (*netTransport, error) {
	ip := net.ParseIP(bindAddr)
	if ip == nil {
		return nil, fmt.Errorf("gossip: bind address %q is not an IP address", bindAddr)
	}
	tries := 1
	if port == 0 {
		tries = ephemeralTries
	}
	var err error
	for range tries {
		var t *netTransport
		if t, err = bindNet(ip, port, logger); err == nil {
			t.wg.Add(2)
			go t.readPackets()
			go t.acceptStreams()
			return t, nil
		}
	}
	return nil, err
}

func bindNet(ip net.IP, port int, logger *log.Logger) (*netTransport, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("gossip: TCP listen on %s: %w", net.JoinHostPort(ip.String(), strconv.Itoa(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err == nil {
		err = setReadBuffer(udp)
		if err != nil {
			_ = udp.Close()
		}
	}
	if err != nil {
		_ = tcp.Close()
		return nil, fmt.Errorf("gossip: UDP listen on %s: %w", net.JoinHostPort(ip.String(), strconv.Itoa(port)), err)
	}
	return &netTransport{bind: ip, tcp: tcp, udp: udp, logger: logger,
		packetCh: make(chan *memberlist.Packet), streamCh: make(chan net.Conn), done: make(chan struct{})}, nil
}

// setReadBuffer asks for udpRecvBuffer and halves the request until the
// kernel takes it.
func setReadBuffer(c *net.UDPConn) error {
	var err error
	for size := udpRecvBuffer; size > 0; size /= 2 {
		if err = c.SetReadBuffer(size); err == nil {
			return nil
		}
	}
	return fmt.Errorf("set UDP receive buffer: %w", err)
}

// port is the bound port (the same for TCP and UDP).
func (t *netTransport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr: an explicit ip (with port as given); else, bound to
// the unspecified address, the host's private IP (as memberlist picks it);
// else the bound address. Without an explicit ip the port is the bound one.
func (t *netTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		addr := net.ParseIP(ip)
		if addr == nil {
			return nil, 0, fmt.Errorf("gossip: advertise address %q is not an IP address", ip)
		}
		if v4 := addr.To4(); v4 != nil {
			addr = v4
		}
		return addr, port, nil
	}
	if !t.bind.IsUnspecified() {
		return t.tcp.Addr().(*net.TCPAddr).IP, t.port(), nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("gossip: find a private IP to advertise: %w", err)
	}
	addr := net.ParseIP(private)
	if addr == nil {
		return nil, 0, errors.New("gossip: no private IP address to advertise; set the advertise address")
	}
	return addr, t.port(), nil
}

func (t *netTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends one packet. "ip:port" needs no resolver (and no
// allocation); anything else is resolved as memberlist does.
func (t *netTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if ap, err := netip.ParseAddrPort(a.Addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, ap)
		return time.Now(), err
	}
	ua, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

func (t *netTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }
func (t *netTransport) StreamCh() <-chan net.Conn           { return t.streamCh }

func (t *netTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *netTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

// Shutdown closes both sockets and waits for the readers to stop.
func (t *netTransport) Shutdown() error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.done)
	_ = t.tcp.Close()
	_ = t.udp.Close()
	t.wg.Wait()
	return nil
}

// readPackets reads every UDP packet into one buffer and hands memberlist a
// copy of its own size.
func (t *netTransport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacketSize)
	for {
		n, from, err := t.udp.ReadFrom(buf)
		now := time.Now()
		if err != nil {
			if t.closed.Load() {
				return
			}
			t.logger.Printf("[ERR] memberlist: reading a UDP packet: %v", err)
			continue
		}
		if n < 1 {
			continue // memberlist needs at least the message type
		}
		select {
		case t.packetCh <- &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: from, Timestamp: now}:
		case <-t.done:
			return
		}
	}
}

// acceptStreams hands every inbound TCP connection to memberlist, backing
// off on accept errors (5 ms doubling to 1 s).
func (t *netTransport) acceptStreams() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closed.Load() {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.logger.Printf("[ERR] memberlist: accepting a TCP connection: %v", err)
			select {
			case <-time.After(delay):
			case <-t.done:
				return
			}
			continue
		}
		delay = 0
		select {
		case t.streamCh <- c:
		case <-t.done:
			_ = c.Close()
			return
		}
	}
}
