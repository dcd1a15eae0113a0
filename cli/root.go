// Package cli implements `kubectl coastguard` (cmd/kubectl-coastguard) and
// the same commands mounted under `coastguardd`: cluster-set status,
// explain, verdict, what-if, conflicts and decommission. Every command reads
// the clusters through their apiservers (kubeconfig contexts); nothing needs
// a port-forward. Translation reuses enforce/ (the daemon's code), verdicts
// use cyclonus' NetworkPolicy matcher (its successor policy-assistant is
// not importable: docs/DAY2.md), conflicts use reach/.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"
)

// Options are the flags shared by every command.
type Options struct {
	// Flags are kubectl's kubeconfig flags (--kubeconfig, --context,
	// --user, --as, --request-timeout, ...). They apply to every context
	// of the set; --context alone selects one context.
	Flags *genericclioptions.ConfigFlags
	// Contexts: the kubeconfig contexts of the cluster set (--contexts).
	Contexts  []string
	Namespace string // coastguard's namespace (Lease, DaemonSet)
	Output    string // text, json, yaml
	// ClusterCIDRs: trusted CIDRs per cluster (--cluster-cidrs, as on
	// coastguardd), merged with Submariner's Cluster objects, so that
	// computed policies match what the daemons render (pod-IP ownership).
	ClusterCIDRs []string
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
	return newCommands(&Options{Flags: newConfigFlags(), Out: os.Stdout, ErrOut: os.Stderr, In: os.Stdin})
}

func newCommands(o *Options) *cobra.Command {
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
	o.Flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringSliceVar(&o.Contexts, "contexts", nil, "kubeconfig contexts of the cluster set (default: --context if given, else every context that reaches a coastguard install; others are skipped with a note)")
	root.PersistentFlags().StringVar(&o.Namespace, "coastguard-namespace", "coastguard-system", "namespace of coastguardd (Lease, pods)")
	root.PersistentFlags().StringVarP(&o.Output, "output", "o", "text", "output format: text, json or yaml")
	root.PersistentFlags().StringSliceVar(&o.ClusterCIDRs, "cluster-cidrs", nil, "trusted CIDRs per cluster, as given to coastguardd (<cluster>[:pod|:service|:global]=<cidr>,...); merged with Submariner's Cluster objects")
	root.PersistentFlags().StringVar(&o.ConsentFile, "consent-file", "", "consent applied in every cluster, as given to coastguardd (default: each cluster's ConfigMap labelled "+ConsentLabel+"=true in the coastguard namespace, as the Helm chart installs it)")
	root.AddCommand(newStatusCmd(o), newExplainCmd(o), newVerdictCmd(o), newWhatIfCmd(o), newConflictsCmd(o), newDecommissionCmd(o), newReleaseLostCmd(o), newPinsCmd(o), newVersionCmd(o), newStoreCmd(o))
	return root
}

// newConfigFlags returns kubectl's kubeconfig flags as the plugin uses them:
// --request-timeout defaults to DefaultRequestTimeout (a context that does
// not answer costs seconds, not minutes); no --namespace (explain's -n names
// an MCNP's namespace, --coastguard-namespace coastguard's) and no
// --cache-dir (the plugin does no discovery).
func newConfigFlags() *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(false)
	timeout := DefaultRequestTimeout.String()
	f.Timeout = &timeout
	f.Namespace, f.CacheDir = nil, nil
	return f
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
