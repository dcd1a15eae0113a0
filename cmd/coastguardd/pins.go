package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/coastguard-mcnp/coastguard/kube"
)

// newKeysPinsCmd is `coastguardd keys pins list|delete`: this cluster's
// shared pins (Secret coastguard-pins), from inside a coastguardd pod
// (in-cluster credentials) or with --kubeconfig. `kubectl coastguard pins`
// does the same in every cluster of the set at once.
func newKeysPinsCmd() *cobra.Command {
	var kubeconfig, ns string
	pins := &cobra.Command{
		Use:   "pins",
		Short: "list or reset the keys this cluster trusts for the others (Secret " + kube.PinsSecret + ")",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pins.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default: in-cluster)")
	pins.PersistentFlags().StringVar(&ns, "namespace", envOr("POD_NAMESPACE", "coastguard-system"), "coastguard's namespace (env POD_NAMESPACE)")
	client := func() (kubernetes.Interface, error) {
		rc, err := restConfig(kubeconfig)
		if err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(rc)
	}
	pins.AddCommand(&cobra.Command{
		Use:   "list",
		Short: `print "<cluster> <base64 key>" per pinned cluster ("reset" for one reset and not pinned again yet)`,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return failed(cmd, 1, err)
			}
			p, err := kube.ReadPins(cmd.Context(), c, ns)
			if err != nil {
				return failed(cmd, 1, err)
			}
			return failed(cmd, 1, printLocalPins(cmd.OutOrStdout(), p))
		},
	})
	pins.AddCommand(&cobra.Command{
		Use:   "delete CLUSTER",
		Short: "reset CLUSTER's pin in this cluster: its next key is pinned on first use",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return failed(cmd, 1, err)
			}
			was, err := kube.ResetPin(cmd.Context(), c, ns, args[0], "keys-"+strconv.FormatInt(time.Now().UnixNano(), 36))
			if err != nil {
				return failed(cmd, 1, err)
			}
			msg := "reset"
			if !was {
				msg = "not pinned here"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], msg)
			return failed(cmd, 1, err)
		},
	})
	return pins
}

func printLocalPins(w io.Writer, p kube.Pins) error {
	var lines []string
	for c, k := range p.Keys {
		lines = append(lines, c+" "+base64.StdEncoding.EncodeToString(k))
	}
	for c, r := range p.Unpinned {
		lines = append(lines, c+" "+base64.StdEncoding.EncodeToString(r.Key)+" reset")
	}
	sort.Strings(lines)
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}
