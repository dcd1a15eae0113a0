package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// health tracks what /healthz and /readyz report.
type health struct {
	mu      sync.Mutex
	checks  map[string]error // readiness checks; nil error = ok
	started time.Time
}

func newHealth(names ...string) *health {
	h := &health{checks: map[string]error{}, started: time.Now()}
	for _, n := range names {
		h.checks[n] = errors.New("not yet")
	}
	return h
}

func (h *health) set(name string, err error) {
	h.mu.Lock()
	h.checks[name] = err
	h.mu.Unlock()
}

func (h *health) ready() (bool, map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ok := true
	out := make(map[string]string, len(h.checks))
	for n, err := range h.checks {
		if err != nil {
			ok = false
			out[n] = err.Error()
		} else {
			out[n] = "ok"
		}
	}
	return ok, out
}

// adminHandler serves the operator actions of the running daemon.
type adminHandler struct {
	decommission func(ctx context.Context) error
	status       func() any
	scan         scanFunc // the replica's store (store get --daemon)
}

// newHTTPServer serves the network-facing endpoints: /metrics (wrapped by
// metricsGuard, e.g. Kubernetes authn/authz, when not nil), /healthz and
// /readyz. healthy is /healthz (liveness): nil when the store is writable and
// the daemon's loops make progress. The operator endpoints live on the
// loopback admin server (newAdminServer), never here.
func newHTTPServer(addr string, reg *prometheus.Registry, h *health, healthy func() error, metricsGuard func(http.Handler) http.Handler) *http.Server {
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	if metricsGuard != nil {
		metrics = metricsGuard(metrics)
	}
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if healthy != nil {
			if err := healthy(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, detail := h.ready()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(detail)
	})
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// newAdminServer serves /debug/state and /admin/* on the loopback admin
// address (Config.Validate refuses any other), so only a process inside the
// pod (kubectl exec) reaches them. Requests from a non-loopback peer are
// refused as well, in case the listener is ever reachable otherwise.
func newAdminServer(addr string, admin adminHandler, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/state", func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r.RemoteAddr) {
			http.Error(w, "the admin endpoints are only served to loopback (kubectl exec into the daemon)", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if admin.status == nil {
			http.Error(w, "not available", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(admin.status())
	})
	mux.HandleFunc("/admin/store", func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r.RemoteAddr) {
			http.Error(w, "the admin endpoints are only served to loopback (kubectl exec into the daemon)", http.StatusForbidden)
			return
		}
		serveStoreGet(w, r, admin.scan)
	})
	mux.HandleFunc("/admin/decommission", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		if !fromLoopback(r.RemoteAddr) {
			// retiring a cluster is an operator action: only from inside the
			// pod (kubectl exec ... coastguardd decommission)
			http.Error(w, "decommission is only accepted from loopback (kubectl exec into the daemon)", http.StatusForbidden)
			return
		}
		if admin.decommission == nil {
			http.Error(w, "not available", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
		defer cancel()
		if err := admin.decommission(ctx); err != nil {
			log.Error("decommission failed", "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("decommissioned\n"))
	})
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

func fromLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveHTTP listens synchronously (so a bad address fails start-up) and then
// serves in the background.
func serveHTTP(srv *http.Server, log *slog.Logger) error {
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return err
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	}()
	return nil
}
