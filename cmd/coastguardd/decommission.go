package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newDecommissionCmd) }

// newDecommissionCmd asks the running daemon of this cluster (through its
// loopback admin endpoint) to retire the cluster from the cluster set: it
// stops writing, gossips a Retire record for every entry this cluster ever
// wrote, and deletes the NetworkPolicies it generated locally. Every other
// cluster then drops this cluster's pods from its policies and deletes the
// policies this cluster's MCNPs caused. Run it on the leader, e.g.
//
//	kubectl -n coastguard-system exec ds/coastguard -- coastguardd decommission
func newDecommissionCmd() *cobra.Command {
	var addr string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "decommission [--admin-addr ADDR] [--timeout DURATION]",
		Short: "retire this cluster from the cluster set (run inside a daemon pod)",
		Long: "Ask the running coastguardd of this cluster, through its loopback admin endpoint, to retire the " +
			"cluster from the cluster set: it stops writing, retires every entry this cluster wrote and deletes " +
			"the NetworkPolicies it generated. Run it in the leader's pod: " +
			"kubectl -n coastguard-system exec ds/coastguard -- coastguardd decommission",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return decommission(cmd, addr, timeout)
		},
	}
	cmd.Flags().StringVar(&addr, "admin-addr", envOr("COASTGUARD_ADMIN_ADDR", "127.0.0.1:9091"), "loopback admin address of the running coastguardd (its --admin-addr; env COASTGUARD_ADMIN_ADDR)")
	cmd.Flags().DurationVar(&timeout, "timeout", 90*time.Second, "how long to wait for the daemon")
	return cmd
}

func decommission(cmd *cobra.Command, addr string, timeout time.Duration) error {
	if timeout <= 0 {
		return usageError(cmd, "--timeout must be positive")
	}
	host := addr
	if strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+host+"/admin/decommission", nil)
	if err != nil {
		return usageError(cmd, err.Error())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return failed(cmd, 1, fmt.Errorf("cannot reach coastguardd at %s: %w", host, err))
	}
	// The body is read below; closing it only releases the connection.
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return failed(cmd, 1, fmt.Errorf("decommission failed (%s): %s", resp.Status, body))
	}
	_, err = cmd.OutOrStdout().Write(body)
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
