package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
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
	var yes bool
	var container string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "decommission --context CONTEXT",
		Short: "Retire a cluster from the cluster set: finds its Lease holder and, after confirmation, asks it to decommission",
		Long: `decommission finds the coastguardd pod holding the cluster's Lease and, once you
confirm by typing the cluster ID, runs "coastguardd decommission" in that pod
through the apiserver (pods/exec, no port-forward): the daemon's admin
endpoint listens on loopback only. The cluster's entries are then retired
everywhere and the NetworkPolicies it generated are deleted. This cannot be
undone without deleting the DECOMMISSIONED marker in the daemon's data dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if o.Flags.Context == nil || *o.Flags.Context == "" || len(o.Contexts) > 0 {
				return errors.New("name the one cluster to retire with --context (not --contexts)")
			}
			m, holder, pod, err := o.leaderOf(ctx)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(o.Out, "cluster %s (context %s): leader %s (pod %s/%s)\n", m.ID, m.Context, holder, o.Namespace, pod); err != nil {
				return err
			}
			if ok, err := o.confirmRetire(m.ID, yes); !ok || err != nil {
				return err
			}
			cctx, cancel := contextWithTimeout(ctx, timeout)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err = o.execInPod(cctx, m, pod, container, []string{"coastguardd", "decommission"}, &stdout, &stderr)
			if err != nil {
				return fmt.Errorf("decommission in pod %s/%s failed: %w (%s)", o.Namespace, pod, err, strings.TrimSpace(stderr.String()))
			}
			_, err = io.WriteString(o.Out, stdout.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().StringVar(&container, "container", "coastguardd", "name of the coastguardd container in the pod")
	cmd.Flags().DurationVar(&timeout, "timeout", 90*time.Second, "how long to wait for the daemon")
	return cmd
}

// leaderOf connects to the one cluster --context names and finds its Lease
// holder and the pod it designates.
func (o *Options) leaderOf(ctx context.Context) (m *member, holder, pod string, err error) {
	ms, err := o.connect(ctx)
	if err != nil {
		return nil, "", "", err
	}
	holder, pod, err = o.leaseHolder(ctx, ms[0])
	return ms[0], holder, pod, err
}

// confirmRetire asks the user to type the cluster ID (unless yes); false:
// aborted, and said so.
func (o *Options) confirmRetire(id string, yes bool) (bool, error) {
	if yes {
		return true, nil
	}
	if _, err := fmt.Fprintf(o.Out, "This retires %s from the cluster set everywhere. Type the cluster ID to confirm: ", id); err != nil {
		return false, err
	}
	line, _ := bufio.NewReader(o.In).ReadString('\n')
	if strings.TrimSpace(line) != id {
		_, err := fmt.Fprintln(o.Out, "aborted: nothing was changed")
		return false, err
	}
	return true, nil
}

// execInPod runs argv in a container of a pod through the apiserver's
// pods/exec subresource and waits for it; a non-zero exit is an error.
func (o *Options) execInPod(ctx context.Context, m *member, pod, container string, argv []string, stdout, stderr io.Writer) error {
	req := m.Client.CoreV1().RESTClient().Post().Namespace(o.Namespace).Resource("pods").
		Name(pod).SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: container, Command: argv, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(m.Config, "POST", req.URL())
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
