// Command probe is a stand-in daemon for testing the harness itself: it
// accepts the coastguardd run flags, listens for TCP and UDP on --bind-addr
// like memberlist does, and serves /healthz, /readyz, /metrics and
// /probe?addr=host:port&proto=tcp|udp on --metrics-addr. /probe reports
// whether a ping to another probe's gossip address got an answer, so a test
// can check that partitions cut exactly the traffic they should.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	bind := fs.String("bind-addr", "", "gossip address (TCP and UDP)")
	metrics := fs.String("metrics-addr", "", "HTTP address")
	// The rest of the coastguardd run flags are accepted so the harness's
	// command line is checked for well-formedness.
	for _, name := range []string{"cluster-id", "kubeconfig", "node-name", "namespace", "advertise-addr", "seeds",
		"gossip-key-file", "gossip-profile", "data-dir", "debounce", "max-delay", "reconnect-timeout", "globalnet-policy", "config",
		"signing-key-file", "trust-bundle-file", "cluster-cidrs", "admin-addr", "metrics-auth", "empty-view-timeout"} {
		fs.String(name, "", "accepted and ignored")
	}
	fs.Bool("insecure-gossip", false, "accepted and ignored")
	if err := fs.Parse(args); err != nil {
		log.Fatal(err)
	}
	if *bind == "" || *metrics == "" {
		log.Fatal("probe: --bind-addr and --metrics-addr are required")
	}
	p, err := newProbe(*bind)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { reply(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { reply(w, "ok\n") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, "# TYPE probe_pings_received_total counter\nprobe_pings_received_total{proto=\"tcp\"} %d\nprobe_pings_received_total{proto=\"udp\"} %d\n",
			p.tcpPings.Load(), p.udpPings.Load())
	})
	mux.HandleFunc("/probe", func(w http.ResponseWriter, r *http.Request) {
		addr, proto := r.URL.Query().Get("addr"), r.URL.Query().Get("proto")
		var err error
		switch proto {
		case "tcp":
			err = p.pingTCP(addr)
		case "udp":
			err = p.pingUDP(addr)
		default:
			http.Error(w, "proto must be tcp or udp", http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		reply(w, "pong\n")
	})
	srv := &http.Server{Addr: *metrics, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	log.Printf("probe listening on %s, http on %s", *bind, *metrics)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	log.Printf("probe stopping")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	p.close()
}

type probe struct {
	tcp      net.Listener
	udp      *net.UDPConn
	seq      atomic.Uint64
	tcpPings atomic.Int64
	udpPings atomic.Int64

	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func newProbe(bind string) (*probe, error) {
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	ua, err := net.ResolveUDPAddr("udp", bind)
	if err != nil {
		return nil, err
	}
	u, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, err
	}
	p := &probe{tcp: l, udp: u, waiting: map[string]chan struct{}{}}
	go p.serveTCP()
	go p.serveUDP()
	return p, nil
}

// reply writes a response. A failed write means the client went away; the
// probe has nobody to tell, so the error is dropped.
func reply(w io.Writer, format string, a ...any) {
	_, _ = fmt.Fprintf(w, format, a...)
}

// close stops the listeners at exit; there is nothing left to do if that fails.
func (p *probe) close() {
	_ = p.tcp.Close()
	_ = p.udp.Close()
}

func (p *probe) serveTCP() {
	for {
		c, err := p.tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }() // the reply is best effort, like the ping
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil && strings.HasPrefix(line, "ping") {
				p.tcpPings.Add(1)
				reply(c, "pong\n")
			}
		}()
	}
}

func (p *probe) serveUDP() {
	buf := make([]byte, 1500)
	for {
		n, from, err := p.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		msg := string(buf[:n])
		switch {
		case strings.HasPrefix(msg, "ping "):
			p.udpPings.Add(1)
			_, _ = p.udp.WriteToUDP([]byte("pong "+strings.TrimPrefix(msg, "ping ")), from)
		case strings.HasPrefix(msg, "pong "):
			id := strings.TrimPrefix(msg, "pong ")
			p.mu.Lock()
			if ch, ok := p.waiting[id]; ok {
				close(ch)
				delete(p.waiting, id)
			}
			p.mu.Unlock()
		}
	}
}

// pingTCP dials without a local address, like memberlist's default
// transport, so the connection leaves from 127.0.0.1.
func (p *probe) pingTCP(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the answer is read below; close only releases it
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprint(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "pong\n" {
		return fmt.Errorf("unexpected answer %q", line)
	}
	return nil
}

// pingUDP sends from the bound gossip socket, like memberlist's packet
// transport, and waits for the answer.
func (p *probe) pingUDP(addr string) error {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	id := strconv.FormatUint(p.seq.Add(1), 10)
	ch := make(chan struct{})
	p.mu.Lock()
	p.waiting[id] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.waiting, id)
		p.mu.Unlock()
	}()
	if _, err := p.udp.WriteToUDP([]byte("ping "+id), ua); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-time.After(time.Second):
		return errors.New("udp ping timed out")
	}
}
