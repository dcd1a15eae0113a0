// Package cli implements `kubectl coastguard` (cmd/kubectl-coastguard) and
// the same commands mounted under `coastguardd`: cluster-set status,
// explain, verdict, what-if, conflicts and decommission. Every command reads
// the clusters through their apiservers (kubeconfig contexts); nothing needs
// a port-forward. Translation reuses enforce/ (the daemon's code), verdicts
// use cyclonus' NetworkPolicy matcher, conflicts use reach/.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Options are the flags shared by every command.
type Options struct {
	Kubeconfig string
	Contexts   []string
	Namespace  string // coastguard's namespace (Lease, DaemonSet)
	Output     string // text, json, yaml
	// ClusterCIDRs: trusted CIDRs per cluster (--cluster-cidrs, as on
	// coastguardd), merged with Submariner's Cluster objects, so that
	// computed policies match what the daemons render (pod-IP ownership).
	ClusterCIDRs []string
	// RequestTimeout bounds each request to an apiserver, and finding a
	// context's cluster ID (--request-timeout; 0 = DefaultRequestTimeout).
	RequestTimeout time.Duration
	// ConsentFile: the consent applied in every cluster (--consent-file);
	// empty reads each cluster's from its ConfigMap labelled ConsentLabel.
	ConsentFile string
	Out         io.Writer
	ErrOut      io.Writer
	In          io.Reader
}

// NewCommands returns the command tree. Mount it as the root of
// kubectl-coastguard, or add its subcommands to another root (coastguardd).
func NewCommands() *cobra.Command {
	o := &Options{Out: os.Stdout, ErrOut: os.Stderr, In: os.Stdin}
	root := &cobra.Command{
		Use:   "kubectl-coastguard",
		Short: "Inspect and operate a coastguard cluster set through the Kubernetes API",
		Long: `kubectl coastguard reads every cluster of a coastguard cluster set through its
apiserver (one kubeconfig context per cluster) and answers: is the set healthy,
where is an MCNP enforced and why, is this flow allowed, what would this change
do, and which policies conflict.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	root.PersistentFlags().StringSliceVar(&o.Contexts, "contexts", nil, "kubeconfig contexts of the cluster set (default: every context that reaches a coastguard install; others are skipped with a note)")
	root.PersistentFlags().DurationVar(&o.RequestTimeout, "request-timeout", DefaultRequestTimeout, "bound of each request to a context's apiserver")
	root.PersistentFlags().StringVar(&o.Namespace, "coastguard-namespace", "coastguard-system", "namespace of coastguardd (Lease, pods)")
	root.PersistentFlags().StringVarP(&o.Output, "output", "o", "text", "output format: text, json or yaml")
	root.PersistentFlags().StringSliceVar(&o.ClusterCIDRs, "cluster-cidrs", nil, "trusted CIDRs per cluster, as given to coastguardd (<cluster>[:pod|:service|:global]=<cidr>,...); merged with Submariner's Cluster objects")
	root.PersistentFlags().StringVar(&o.ConsentFile, "consent-file", "", "consent applied in every cluster, as given to coastguardd (default: each cluster's ConfigMap labelled "+ConsentLabel+"=true in the coastguard namespace, as the Helm chart installs it)")
	root.AddCommand(newStatusCmd(o), newExplainCmd(o), newVerdictCmd(o), newWhatIfCmd(o), newConflictsCmd(o), newDecommissionCmd(o), newReleaseLostCmd(o), newPinsCmd(o), newVersionCmd(o), newStoreCmd(o))
	return root
}

// print writes v as JSON or YAML, or for the text format renders it with
// text into a buffer and writes that in one call, so a failed write to Out
// (a closed pipe, a full disk) is returned instead of lost.
func (o *Options) print(v any, text func(b *strings.Builder)) error {
	switch o.Output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(o.Out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	case "text", "":
		var b strings.Builder
		text(&b)
		_, err := io.WriteString(o.Out, b.String())
		return err
	}
	return fmt.Errorf("unknown output format %q (want text, json or yaml)", o.Output)
}

// warnf writes a warning to ErrOut. A warning that cannot be written must not
// fail the command, whose answer goes to Out, so its write error is dropped.
func (o *Options) warnf(format string, a ...any) {
	_, _ = fmt.Fprintf(o.ErrOut, "warning: "+format+"\n", a...)
}
