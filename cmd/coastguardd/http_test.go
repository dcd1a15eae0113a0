package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestHTTPEndpoints(t *testing.T) {
	h := newHealth("state", "enforcement")
	called := 0
	srv := newHTTPServer(":0", prometheus.NewRegistry(), h, nil)
	admin := newAdminServer("127.0.0.1:0", adminHandler{
		decommission: func(context.Context) error { called++; return nil },
		status:       func() any { return map[string]int{"x": 1} },
	}, slog.Default())

	serve := func(s *http.Server, method, path, remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		s.Handler.ServeHTTP(rec, req)
		return rec
	}
	do := func(method, path, remote string) *httptest.ResponseRecorder {
		if strings.HasPrefix(path, "/admin/") || strings.HasPrefix(path, "/debug/") {
			return serve(admin, method, path, remote)
		}
		return serve(srv, method, path, remote)
	}
	require.Equal(t, http.StatusOK, do("GET", "/healthz", "127.0.0.1:1").Code)
	require.Equal(t, http.StatusServiceUnavailable, do("GET", "/readyz", "127.0.0.1:1").Code)
	h.set("state", nil)
	h.set("enforcement", nil)
	require.Equal(t, http.StatusOK, do("GET", "/readyz", "127.0.0.1:1").Code)
	h.set("enforcement", errors.New("standby"))
	rec := do("GET", "/readyz", "127.0.0.1:1")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "standby")

	require.Equal(t, http.StatusMethodNotAllowed, do("GET", "/admin/decommission", "127.0.0.1:1").Code)
	require.Equal(t, http.StatusForbidden, do("POST", "/admin/decommission", "10.1.2.3:5555").Code)
	require.Equal(t, 0, called, "remote callers must not retire the cluster")
	require.Equal(t, http.StatusOK, do("POST", "/admin/decommission", "127.0.0.1:5555").Code)
	require.Equal(t, http.StatusOK, do("POST", "/admin/decommission", "[::1]:5555").Code)
	require.Equal(t, 2, called)
	require.Contains(t, do("GET", "/debug/state", "127.0.0.1:1").Body.String(), `"x":1`)
	require.Equal(t, http.StatusForbidden, do("GET", "/debug/state", "10.0.0.1:1").Code)
	// The network-facing server has no operator endpoints at all.
	for _, p := range []string{"/debug/state", "/admin/decommission"} {
		require.Equal(t, http.StatusNotFound, serve(srv, "GET", p, "127.0.0.1:1").Code, p)
		require.Equal(t, http.StatusNotFound, serve(srv, "POST", p, "127.0.0.1:1").Code, p)
	}
	require.Equal(t, http.StatusOK, serve(srv, "GET", "/metrics", "10.0.0.1:1").Code)
}
