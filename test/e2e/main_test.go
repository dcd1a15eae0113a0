//go:build e2e

// Package e2e runs coastguard against real kube-apiservers (one etcd, one
// apiserver per simulated cluster) and real daemon processes. It needs the
// test binaries from `make testbins` and, for partitions, root and iptables.
// Missing prerequisites fail the tests with the remedy; nothing is skipped.
//
//	go test -tags e2e -count=1 -v ./test/e2e/
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coastguard-mcnp/coastguard/test/harness"
)

var repoRoot string

func TestMain(m *testing.M) {
	root, err := harness.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	repoRoot = root
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}

func repoPath(parts ...string) string {
	return filepath.Join(append([]string{repoRoot}, parts...)...)
}

// crdDir is where controller-gen writes the CRDs (make generate).
func crdDir(t *testing.T) string {
	t.Helper()
	d := repoPath("deploy", "crds")
	m, err := filepath.Glob(filepath.Join(d, "*.yaml"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no CRDs in %s (%v): run `make generate`", d, err)
	}
	return d
}

// probeBinary builds the harness's stand-in daemon once.
func probeBinary(t *testing.T) string {
	t.Helper()
	p, err := harness.Build("./test/harness/internal/probe")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ping asks probe daemon from to reach to's gossip address over proto.
func ping(ctx context.Context, from, to *harness.Daemon, proto string) error {
	u := "http://" + from.MetricsAddr + "/probe?" + url.Values{"addr": {to.GossipAddr}, "proto": {proto}}.Encode()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s -> %s over %s: HTTP %d", from.NodeName, to.NodeName, proto, resp.StatusCode)
	}
	return nil
}
