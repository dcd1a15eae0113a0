package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func init() { subcommands["decommission"] = runDecommission }

// runDecommission asks the running daemon of this cluster (through its admin
// endpoint on the metrics address) to retire the cluster from the cluster set:
// it stops writing, gossips a Retire record for every entry this cluster ever
// wrote, and deletes the NetworkPolicies it generated locally. Every other
// cluster then drops this cluster's pods from its policies and deletes the
// policies this cluster's MCNPs caused. Run it on the leader, e.g.
//
//	kubectl -n coastguard-system exec ds/coastguard -- coastguardd decommission
func runDecommission(args []string) int {
	fs := flag.NewFlagSet("decommission", flag.ContinueOnError)
	addr := fs.String("admin-addr", envOr("COASTGUARD_ADMIN_ADDR", "127.0.0.1:9091"), "loopback admin address of the running coastguardd (its --admin-addr)")
	timeout := fs.Duration("timeout", 90*time.Second, "how long to wait for the daemon")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	host := *addr
	if strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+host+"/admin/decommission", nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "decommission: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "decommission: cannot reach coastguardd at %s: %v\n", host, err)
		return 1
	}
	// The body is read below; closing it only releases the connection.
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "decommission failed (%s): %s", resp.Status, body)
		return 1
	}
	fmt.Print(string(body))
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
