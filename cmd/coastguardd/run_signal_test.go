package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A SIGTERM while the daemon is still starting (here: its apiserver never
// answers) is a clean stop: run returns nil (exit 0) and says what it
// interrupted, as the kubelet's stop of a starting pod expects.
func TestSignalDuringStartupIsCleanStop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, ln.Addr())), 0o600))
	cfg, err := parseConfig("run", []string{"--kubeconfig", kc, "--node-name", "n", "--cluster-id", "c1", "--insecure-gossip",
		"--data-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0", "--admin-addr", ""}, envMap(nil))
	require.NoError(t, err)
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(cfg, slog.New(slog.NewTextHandler(&logs, nil))) }()
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon never dialled its apiserver")
	}
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "a signal during start-up is not a failure")
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not stop on SIGTERM during start-up")
	}
	require.Contains(t, logs.String(), "stopped by a signal")
}
