// Command podagent is the process of a simulated pod on the harness's
// dataplane. It runs inside the pod's network namespace (started with
// `ip netns exec`), listens on the pod's container ports and answers every
// TCP connection and UDP datagram with the pod's name and the source IP it
// saw, so a prober learns which pod served it (a Service backend, say) and
// whether its address arrived unchanged.
//
// It is controlled over a unix socket, which is not bound to a network
// namespace: the harness writes one request line
//
//	connect <tcp|udp> <host:port> <timeout>
//
// and reads one reply line, "ok <name of the pod that answered> <source IP
// it saw>" or "fail <reason>". The connection is made from inside the pod's namespace,
// with the pod's IP as source, so it crosses the same rules a real pod's
// traffic crosses.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	name := flag.String("name", "", "pod name reported to probers (namespace/name)")
	listen := flag.String("listen", "", "comma-separated proto:port list, e.g. tcp:8080,udp:53")
	control := flag.String("control", "", "unix socket path for probe requests")
	flag.Parse()
	if *name == "" || *control == "" {
		log.Fatal("podagent: --name and --control are required")
	}
	if err := serve(*name, *listen, *control); err != nil {
		log.Fatalf("podagent: %v", err)
	}
}

// serve runs the listeners and the control socket until SIGTERM.
func serve(name, listen, control string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveListeners(ctx, name, listen); err != nil {
		return err
	}
	_ = os.Remove(control)
	cl, err := net.Listen("unix", control)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	go func() {
		<-ctx.Done()
		_ = cl.Close()
	}()
	log.Printf("podagent %s: listening on %q, control %s", name, listen, control)
	for {
		c, err := cl.Accept()
		if err != nil {
			if ctx.Err() != nil {
				_ = os.Remove(control)
				return nil
			}
			log.Printf("podagent: control accept: %v", err)
			continue
		}
		go handleControl(c)
	}
}

// serveListeners opens every proto:port of spec and answers with name.
func serveListeners(ctx context.Context, name, spec string) error {
	for _, item := range strings.Split(spec, ",") {
		if item == "" {
			continue
		}
		proto, port, ok := strings.Cut(item, ":")
		if _, err := strconv.ParseUint(port, 10, 16); !ok || err != nil {
			return fmt.Errorf("bad listen item %q (want proto:port)", item)
		}
		switch proto {
		case "tcp":
			l, err := net.Listen("tcp4", ":"+port)
			if err != nil {
				return err
			}
			go acceptTCP(ctx, l, name)
		case "udp":
			pc, err := net.ListenPacket("udp4", ":"+port)
			if err != nil {
				return err
			}
			go echoUDP(ctx, pc, name)
		default:
			return fmt.Errorf("unsupported protocol %q in %q", proto, item)
		}
	}
	return nil
}

func acceptTCP(ctx context.Context, l net.Listener, name string) {
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte(name + " " + hostOf(c.RemoteAddr()) + "\n"))
		_ = c.Close()
	}
}

func echoUDP(ctx context.Context, pc net.PacketConn, name string) {
	go func() {
		<-ctx.Done()
		_ = pc.Close()
	}()
	buf := make([]byte, 512)
	for {
		_, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		_, _ = pc.WriteTo([]byte(name+" "+hostOf(addr)+"\n"), addr)
	}
}

func hostOf(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

func handleControl(c net.Conn) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	reply := run(strings.Fields(line))
	_, _ = c.Write([]byte(reply + "\n"))
}

// run executes one request and returns its reply line.
func run(f []string) string {
	if len(f) != 4 || f[0] != "connect" {
		return "fail bad request (want: connect <tcp|udp> <host:port> <timeout>)"
	}
	timeout, err := time.ParseDuration(f[3])
	if err != nil {
		return "fail bad timeout: " + err.Error()
	}
	var answer string
	switch f[1] {
	case "tcp":
		answer, err = connectTCP(f[2], timeout)
	case "udp":
		answer, err = connectUDP(f[2], timeout)
	default:
		err = fmt.Errorf("unsupported protocol %q", f[1])
	}
	if err != nil {
		return "fail " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return "ok " + answer
}

func connectTCP(addr string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("tcp4", addr, timeout)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetReadDeadline(deadline)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("connected but no answer: %w", err)
	}
	return strings.TrimSpace(line), nil
}

func connectUDP(addr string, timeout time.Duration) (string, error) {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("probe\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}
