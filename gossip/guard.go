package gossip

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Inbound stream limits (issue 15, attack 7). memberlist reads an encrypted
// stream's declared length (up to 20 MiB) and buffers all of it, then
// copies it again per keyring key, BEFORE it can tell that the sender has
// no key: a dozen key-less connections cost hundreds of MiB. The guard
// sits between the transport and memberlist and, before memberlist sees a
// byte, reads the label, message type and declared length of every inbound
// stream and refuses it unless it is an encrypted message no longer than
// MaxStreamBytes; it also caps concurrent inbound streams per source IP and
// in total. Worst case pre-authentication memory is therefore about
// MaxInboundStreams x MaxStreamBytes x 3 (memberlist's copies).
const (
	// MaxStreamBytes bounds one inbound stream: our largest message
	// (MaxMessageBytes) or push/pull state, plus headroom.
	MaxStreamBytes = MaxMessageBytes + 512<<10
	// MaxInboundStreams bounds concurrent inbound streams in total.
	MaxInboundStreams = 32
	// MaxInboundStreamsPerIP bounds concurrent inbound streams per source.
	MaxInboundStreamsPerIP = 4
	// reservedKnownStreams of the MaxInboundStreams slots are kept for the
	// addresses of known members: sources nobody in the member table
	// uses (a key-less slowloris from many IPs) share the rest.
	reservedKnownStreams = 8
	// streamHeaderTimeout bounds how long a stream may take to send its
	// header.
	streamHeaderTimeout = 2 * time.Second
)

const (
	mlEncryptMsg  = 10  // memberlist encryptMsg
	mlHasLabelMsg = 244 // memberlist hasLabelMsg
)

// guardTransport wraps a memberlist transport with the inbound stream
// limits above. Packets (UDP, <= 64 KiB each) pass unchanged.
type guardTransport struct {
	memberlist.NodeAwareTransport
	check         frameCheck
	limitLoopback bool
	// rate is the per-source rate limit of coastguard messages (nil:
	// none), keyed on the source IP, which a sender cannot choose as it
	// chooses the sender name inside its messages (issue 29, item 6).
	rate   *senderLimits
	onDrop func(reason, from string, err error)
	// known reports whether a source IP is a known member's (nil: none
	// is, every source shares the unreserved slots).
	known func(ip string) bool

	once       sync.Once
	out        chan net.Conn
	packetOnce sync.Once
	packets    chan *memberlist.Packet
	done       chan struct{}

	mu    sync.Mutex
	total int
	perIP map[string]int
}

func newGuardTransport(inner memberlist.NodeAwareTransport, check frameCheck, onDrop func(reason, from string, err error)) *guardTransport {
	return &guardTransport{NodeAwareTransport: inner, check: check, onDrop: onDrop,
		out: make(chan net.Conn), packets: make(chan *memberlist.Packet),
		done: make(chan struct{}), perIP: map[string]int{}}
}

// PacketCh hands memberlist every inbound packet that carries no
// compressMsg (inflate.go).
func (g *guardTransport) PacketCh() <-chan *memberlist.Packet {
	g.packetOnce.Do(func() { go g.pumpPackets() })
	return g.packets
}

func (g *guardTransport) pumpPackets() {
	in := g.NodeAwareTransport.PacketCh()
	for {
		select {
		case <-g.done:
			return
		case p := <-in:
			if p == nil {
				continue
			}
			users, err := g.check.packet(p.Buf)
			if err != nil {
				g.onDrop(frameDropReason(err), p.From.String(), err)
				continue
			}
			if users > 0 && !g.allow(p.From, users) {
				g.onDrop(dropRateLimited, p.From.String(), errSourceRate)
				continue
			}
			select {
			case g.packets <- p:
			case <-g.done:
				return
			}
		}
	}
}

var errSourceRate = errors.New("source over its message rate limit")

// sourceKey is what a source is rate-limited by: its IP. On loopback, where
// in-process simulations run every member on one address, the IP and port
// (unless limitLoopback).
func (g *guardTransport) sourceKey(a net.Addr) string {
	s := a.String()
	h, _, err := net.SplitHostPort(s)
	if err != nil {
		return s
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() && !g.limitLoopback {
		return s
	}
	return h
}

// allow takes n tokens of a's bucket.
func (g *guardTransport) allow(a net.Addr, n int) bool {
	if g.rate == nil || a == nil {
		return true
	}
	return g.rate.allowN(g.sourceKey(a), n)
}

// DialAddressTimeout dials a stream whose answer is checked (inflate.go).
func (g *guardTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := g.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &checkedConn{Conn: c, f: g.check, onDrop: g.onDrop}, nil
}

// DialTimeout: as DialAddressTimeout.
func (g *guardTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return g.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (g *guardTransport) StreamCh() <-chan net.Conn {
	g.once.Do(func() { go g.pump() })
	return g.out
}

// Shutdown stops the guard and the wrapped transport. While the latter
// stops, its incoming streams are drained here: its listener blocks on an
// unbuffered channel that nobody else reads once the pump has stopped, and
// NetTransport.Shutdown waits for its listeners.
func (g *guardTransport) Shutdown() error {
	select {
	case <-g.done:
	default:
		close(g.done)
	}
	stopDrain := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		in := g.NodeAwareTransport.StreamCh()
		for {
			select {
			case c := <-in:
				if c != nil {
					_ = c.Close()
				}
			case <-stopDrain:
				return
			}
		}
	}()
	err := g.NodeAwareTransport.Shutdown()
	close(stopDrain)
	<-drained
	return err
}

func (g *guardTransport) pump() {
	in := g.NodeAwareTransport.StreamCh()
	for {
		select {
		case <-g.done:
			return
		case c := <-in:
			if c != nil {
				g.admit(c)
			}
		}
	}
}

func remoteIP(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil {
		if h, _, err := net.SplitHostPort(a.String()); err == nil {
			return h
		}
		return a.String()
	}
	return ""
}

// admit takes a slot for c, or refuses it; the header check runs on its
// own goroutine so a slow sender cannot stall other streams.
func (g *guardTransport) admit(c net.Conn) {
	ip := remoteIP(c)
	totalCap := MaxInboundStreams - reservedKnownStreams
	if g.known != nil && g.known(ip) {
		totalCap = MaxInboundStreams
	}
	g.mu.Lock()
	perIPCap := MaxInboundStreamsPerIP
	if !g.limitLoopback {
		if a := net.ParseIP(ip); a != nil && a.IsLoopback() {
			// In-process simulations run every member on one loopback
			// address; a pod never shares its loopback with a peer.
			perIPCap = MaxInboundStreams
		}
	}
	if g.total >= totalCap || g.perIP[ip] >= perIPCap {
		g.mu.Unlock()
		_ = c.Close()
		g.onDrop(dropStreamLimit, ip, fmt.Errorf("inbound stream limit (%d total, %d per source)", MaxInboundStreams, MaxInboundStreamsPerIP))
		return
	}
	g.total++
	g.perIP[ip]++
	g.mu.Unlock()
	gc := &guardedConn{Conn: c, g: g, ip: ip}
	go func() {
		if err := gc.checkHeader(g.check, g); err != nil {
			_ = gc.Close()
			g.onDrop(frameDropReason(err), ip, err)
			return
		}
		select {
		case g.out <- gc:
		case <-g.done:
			_ = gc.Close()
		}
	}()
}

func (g *guardTransport) release(ip string) {
	g.mu.Lock()
	g.total--
	if g.perIP[ip]--; g.perIP[ip] <= 0 {
		delete(g.perIP, ip)
	}
	g.mu.Unlock()
}

// guardedConn replays the peeked header to memberlist, caps what can be
// read from the stream, and frees its slot on Close.
type guardedConn struct {
	net.Conn
	g      *guardTransport
	ip     string
	r      io.Reader
	closed sync.Once
}

var errStreamRefused = errors.New("stream refused before authentication")

// checkHeader reads [label header] type [length] within the header
// timeout, then (encryption on) the whole declared body at no less than
// minBodyRate, refuses a compressMsg (inflate.go), and sets up the capped
// reader that replays what was read.
func (c *guardedConn) checkHeader(check frameCheck, g *guardTransport) error {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(streamHeaderTimeout))
	br := bufio.NewReaderSize(io.LimitReader(c.Conn, MaxStreamBytes+512), 512)
	off, label := 0, ""
	b, err := br.Peek(1)
	if err != nil {
		return fmt.Errorf("%w: header: %v", errStreamRefused, err)
	}
	if b[0] == mlHasLabelMsg {
		b, err = br.Peek(2)
		if err != nil {
			return fmt.Errorf("%w: label: %v", errStreamRefused, err)
		}
		off = 2 + int(b[1])
		if b, err = br.Peek(off); err != nil {
			return fmt.Errorf("%w: label: %v", errStreamRefused, err)
		}
		label = string(b[2:off])
	}
	if check.keys != nil {
		if b, err = br.Peek(off + 5); err == nil && binary.BigEndian.Uint32(b[off+1:off+5]) <= MaxStreamBytes {
			n := time.Duration(binary.BigEndian.Uint32(b[off+1 : off+5]))
			_ = c.SetReadDeadline(start.Add(streamHeaderTimeout + n*time.Second/minBodyRate))
		}
	}
	frame, typ, err := check.streamMessageType(br, off, label)
	if err != nil {
		return err
	}
	if (typ == mlUserMsg || typ == mlPushPullMsg) && !g.allow(c.RemoteAddr(), 1) {
		return errSourceRate
	}
	_ = c.SetReadDeadline(time.Time{})
	c.r = io.MultiReader(bytes.NewReader(frame), br)
	return nil
}

func (c *guardedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() { c.g.release(c.ip) })
	return err
}
