package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newStoreCmd is `kubectl coastguard store get`: `coastguardd store get
// --daemon` run in the cluster's leader pod through pods/exec (the admin
// endpoint listens on loopback only), so an operator reads the replicated
// entries of one cluster's mirror without a port-forward.
func newStoreCmd(o *Options) *cobra.Command {
	var container string
	var prefix, keysOnly bool
	var limit int
	var timeout time.Duration
	get := &cobra.Command{
		Use:   "get KEY --context CONTEXT [--prefix] [--keys-only] [--limit N]",
		Short: "print replicated entries (/coastguard/<cluster>/<kind>/<name>) from a cluster's daemon, like etcdctl get",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Flags.Context == nil || *o.Flags.Context == "" || len(o.Contexts) > 0 {
				return errors.New("name the one cluster whose daemon to ask with --context (not --contexts)")
			}
			argv := []string{"coastguardd", "store", "get", "--daemon", args[0], "--limit", strconv.Itoa(limit)}
			if prefix {
				argv = append(argv, "--prefix")
			}
			if keysOnly {
				argv = append(argv, "--keys-only")
			}
			return o.execInLeader(cmd, container, timeout, argv)
		},
	}
	get.Flags().BoolVar(&prefix, "prefix", false, "KEY is a prefix")
	get.Flags().BoolVar(&keysOnly, "keys-only", false, "print the keys only")
	get.Flags().IntVar(&limit, "limit", 0, "print at most this many entries (0: all)")
	get.Flags().StringVar(&container, "container", "coastguardd", "name of the coastguardd container in the pod")
	get.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the daemon")
	c := &cobra.Command{Use: "store", Short: "read a cluster's replicated state (its daemon's bbolt mirror)", Args: cobra.NoArgs}
	c.AddCommand(get)
	return c
}

// execInLeader runs argv in the Lease holder's pod of the --context
// cluster and copies its output.
func (o *Options) execInLeader(cmd *cobra.Command, container string, timeout time.Duration, argv []string) error {
	ctx := cmd.Context()
	m, _, pod, err := o.leaderOf(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := contextWithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := o.execInPod(cctx, m, pod, container, argv, &stdout, &stderr); err != nil {
		return fmt.Errorf("%s in pod %s/%s failed: %w (%s)", strings.Join(argv[:3], " "), o.Namespace, pod, err, strings.TrimSpace(stderr.String()))
	}
	_, err = o.Out.Write(stdout.Bytes())
	return err
}
