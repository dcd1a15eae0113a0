package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leaseHolder returns the Lease holder identity of a cluster and the pod
// name it designates (identities are "<pod>_<random>").
func (o *Options) leaseHolder(ctx context.Context, m *member) (holder, pod string, err error) {
	lease, err := m.Client.CoordinationV1().Leases(o.Namespace).Get(ctx, "coastguard-"+m.ID, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("reading the Lease of %s: %w", m.ID, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", "", fmt.Errorf("cluster %s has no leader (the Lease is not held)", m.ID)
	}
	holder = *lease.Spec.HolderIdentity
	pod = holder
	if i := strings.LastIndex(holder, "_"); i > 0 {
		pod = holder[:i]
	}
	return holder, pod, nil
}

func newDecommissionCmd(o *Options) *cobra.Command {
	var context string
	var yes bool
	var port string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "decommission --context CONTEXT",
		Short: "Retire a cluster from the cluster set: finds its Lease holder and, after confirmation, asks it to decommission",
		Long: `decommission finds the coastguardd pod holding the cluster's Lease and, once you
confirm by typing the cluster ID, POSTs /admin/decommission to it through the
apiserver's pod proxy (no port-forward). The cluster's entries are then retired
everywhere and the NetworkPolicies it generated are deleted. This cannot be
undone without deleting the DECOMMISSIONED marker in the daemon's data dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if context == "" {
				return errors.New("--context is required")
			}
			saved := o.Contexts
			o.Contexts = []string{context}
			ms, err := o.connect(ctx)
			o.Contexts = saved
			if err != nil {
				return err
			}
			m := ms[0]
			holder, pod, err := o.leaseHolder(ctx, m)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "cluster %s (context %s): leader %s (pod %s/%s)\n", m.ID, m.Context, holder, o.Namespace, pod)
			if !yes {
				fmt.Fprintf(o.Out, "This retires %s from the cluster set everywhere. Type the cluster ID to confirm: ", m.ID)
				line, _ := bufio.NewReader(o.In).ReadString('\n')
				if strings.TrimSpace(line) != m.ID {
					fmt.Fprintln(o.Out, "aborted: nothing was changed")
					return nil
				}
			}
			cctx, cancel := contextWithTimeout(ctx, timeout)
			defer cancel()
			body, err := m.Client.CoreV1().RESTClient().Post().Namespace(o.Namespace).Resource("pods").
				Name(pod+":"+port).SubResource("proxy").Suffix("admin", "decommission").DoRaw(cctx)
			if err != nil {
				return fmt.Errorf("decommission through the pod proxy of %s failed: %w (%s)", pod, err, strings.TrimSpace(string(body)))
			}
			fmt.Fprint(o.Out, string(body))
			return nil
		},
	}
	cmd.Flags().StringVar(&context, "context", "", "kubeconfig context of the cluster to retire")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().StringVar(&port, "admin-port", "9090", "coastguardd metrics/admin port (container port)")
	cmd.Flags().DurationVar(&timeout, "timeout", 90*time.Second, "how long to wait for the daemon")
	return cmd
}

func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
