package gossip

import (
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// NewLoopbackTransport binds the daemon's UDP+TCP transport (netTransport)
// on addr with a kernel-chosen port. Used by tests and the simulator.
//
// Its TCP dials leave from whatever source address the kernel picks. Dialling
// from the bind address (bind before connect, so that members on distinct
// loopback addresses look like distinct hosts) was tried on 2026-11-26: an
// explicit bind cannot reuse an ephemeral port for another destination, and
// the N = 300 simulated mesh, naive baseline included, fell apart (p99
// 12-24 s).
func NewLoopbackTransport(addr string) (memberlist.NodeAwareTransport, error) {
	return newNetTransport(addr, 0, log.New(io.Discard, "", 0))
}

// nodeAware returns t as a memberlist.NodeAwareTransport, addressing by
// "ip:port" when t itself does not know node names.
func nodeAware(t memberlist.Transport) memberlist.NodeAwareTransport {
	if na, ok := t.(memberlist.NodeAwareTransport); ok {
		return na
	}
	return addrTransport{t}
}

type addrTransport struct{ memberlist.Transport }

func (t addrTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

func (t addrTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// FaultTransport wraps a memberlist transport for tests and the simulator
// (a production Node never uses it). It counts wire bytes (every
// UDP packet and every byte written to/read from TCP streams, after
// memberlist's encryption) and can drop traffic to and from chosen peer
// addresses to inject partitions.
//
// Honest limits: blocking is by peer address ("ip:port"). Outgoing packets
// and dials to a blocked address fail; incoming UDP packets from a blocked
// address are dropped. Incoming TCP streams cannot be attributed on loopback
// (ephemeral source port), so a partition must be installed on BOTH sides
// (Partition helpers in the tests do that); memberlist then cannot reach
// across in either direction.
type FaultTransport struct {
	inner   memberlist.Transport
	packets chan *memberlist.Packet
	done    chan struct{}
	once    sync.Once

	streamOnce sync.Once
	streamCh   chan net.Conn

	mu      sync.RWMutex
	blocked map[string]bool

	sentBytes, recvBytes     atomic.Int64
	sentPackets, recvPackets atomic.Int64
	dropped                  atomic.Int64
}

var _ memberlist.NodeAwareTransport = (*FaultTransport)(nil)

// NewFaultTransport wraps inner. inner must not be used by anyone else.
func NewFaultTransport(inner memberlist.Transport) *FaultTransport {
	t := &FaultTransport{
		inner:   inner,
		packets: make(chan *memberlist.Packet, 1024),
		done:    make(chan struct{}),
		blocked: map[string]bool{},
	}
	go t.pump()
	return t
}

func (t *FaultTransport) pump() {
	in := t.inner.PacketCh()
	for {
		select {
		case <-t.done:
			return
		case p := <-in:
			if p == nil {
				continue
			}
			if t.isBlocked(p.From.String()) {
				t.dropped.Add(1)
				continue
			}
			t.recvBytes.Add(int64(len(p.Buf)))
			t.recvPackets.Add(1)
			select {
			case t.packets <- p:
			case <-t.done:
				return
			}
		}
	}
}

// Block drops all traffic to and from the given "ip:port" addresses.
func (t *FaultTransport) Block(addrs ...string) {
	t.mu.Lock()
	for _, a := range addrs {
		t.blocked[a] = true
	}
	t.mu.Unlock()
}

// Unblock removes addresses from the block list.
func (t *FaultTransport) Unblock(addrs ...string) {
	t.mu.Lock()
	for _, a := range addrs {
		delete(t.blocked, a)
	}
	t.mu.Unlock()
}

// UnblockAll heals every partition of this transport.
func (t *FaultTransport) UnblockAll() {
	t.mu.Lock()
	t.blocked = map[string]bool{}
	t.mu.Unlock()
}

func (t *FaultTransport) isBlocked(addr string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.blocked) > 0 && t.blocked[addr]
}

// Stats returns wire counters: bytes and packets sent and received.
func (t *FaultTransport) Stats() (sentBytes, recvBytes, sentPackets, recvPackets int64) {
	return t.sentBytes.Load(), t.recvBytes.Load(), t.sentPackets.Load(), t.recvPackets.Load()
}

// SentBytes returns the bytes written to the wire (UDP + TCP).
func (t *FaultTransport) SentBytes() int64 { return t.sentBytes.Load() }

// Dropped returns how many packets/dials were dropped by a block.
func (t *FaultTransport) Dropped() int64 { return t.dropped.Load() }

var errBlocked = errors.New("faulttransport: address blocked")

// FinalAdvertiseAddr implements memberlist.Transport; the wrapped transport
// answers.
func (t *FaultTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

// WriteTo implements memberlist.Transport. A packet to a blocked address is
// dropped and reported as sent, as on a lossy network; others are counted and
// forwarded.
func (t *FaultTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.isBlocked(addr) {
		t.dropped.Add(1)
		// Pretend success like a lossy network.
		return time.Now(), nil
	}
	t.sentBytes.Add(int64(len(b)))
	t.sentPackets.Add(1)
	return t.inner.WriteTo(b, addr)
}

// WriteToAddress implements memberlist.NodeAwareTransport, blocking and
// counting as WriteTo does.
func (t *FaultTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if na, ok := t.inner.(memberlist.NodeAwareTransport); ok {
		if t.isBlocked(a.Addr) {
			t.dropped.Add(1)
			return time.Now(), nil
		}
		t.sentBytes.Add(int64(len(b)))
		t.sentPackets.Add(1)
		return na.WriteToAddress(b, a)
	}
	return t.WriteTo(b, a.Addr)
}

// PacketCh implements memberlist.Transport: the packets the wrapped transport
// received, counted, without those from blocked addresses.
func (t *FaultTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport. Dialing a blocked address
// fails; other connections count the bytes they carry.
func (t *FaultTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.isBlocked(addr) {
		t.dropped.Add(1)
		return nil, errBlocked
	}
	c, err := t.inner.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, t: t}, nil
}

// DialAddressTimeout implements memberlist.NodeAwareTransport, blocking and
// counting as DialTimeout does.
func (t *FaultTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	na, ok := t.inner.(memberlist.NodeAwareTransport)
	if !ok {
		return t.DialTimeout(a.Addr, timeout)
	}
	if t.isBlocked(a.Addr) {
		t.dropped.Add(1)
		return nil, errBlocked
	}
	c, err := na.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, t: t}, nil
}

// StreamCh implements memberlist.Transport: the wrapped transport's incoming
// streams, counting the bytes they carry (they cannot be blocked; see
// FaultTransport).
func (t *FaultTransport) StreamCh() <-chan net.Conn {
	// Incoming streams are wrapped lazily by a forwarding goroutine.
	return t.streams()
}

func (t *FaultTransport) streams() <-chan net.Conn {
	t.streamOnce.Do(func() {
		t.streamCh = make(chan net.Conn)
		go func() {
			in := t.inner.StreamCh()
			for {
				select {
				case <-t.done:
					return
				case c := <-in:
					if c == nil {
						continue
					}
					select {
					case t.streamCh <- &countingConn{Conn: c, t: t}:
					case <-t.done:
						_ = c.Close()
						return
					}
				}
			}
		}()
	})
	return t.streamCh
}

// Shutdown stops forwarding and shuts the inner transport down. While the
// inner transport stops, its packets and streams are drained here: its
// listener goroutines block on unbuffered channels and would otherwise never
// exit (NetTransport.Shutdown waits for them).
func (t *FaultTransport) Shutdown() error {
	t.once.Do(func() { close(t.done) })
	stopDrain := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		pk, st := t.inner.PacketCh(), t.inner.StreamCh()
		for {
			select {
			case <-pk:
			case c := <-st:
				if c != nil {
					_ = c.Close()
				}
			case <-stopDrain:
				return
			}
		}
	}()
	err := t.inner.Shutdown()
	close(stopDrain)
	<-drained
	return err
}

type countingConn struct {
	net.Conn
	t *FaultTransport
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.t.sentBytes.Add(int64(n))
	return n, err
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.t.recvBytes.Add(int64(n))
	return n, err
}
