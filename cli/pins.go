package cli

import (
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coastguard-mcnp/coastguard/kube"
)

// PinView is the key one cluster trusts for another (its shared pins).
type PinView struct {
	Context string `json:"context"`
	View    string `json:"view"`              // the cluster whose pins these are
	Cluster string `json:"cluster,omitempty"` // the pinned cluster
	Key     string `json:"key,omitempty"`     // base64 Ed25519 public key, as coastguardd keys show prints it
	Reset   bool   `json:"reset,omitempty"`   // reset, not pinned again yet
	Error   string `json:"error,omitempty"`
}

func newPinsCmd(o *Options) *cobra.Command {
	pins := &cobra.Command{
		Use:   "pins",
		Short: "List or reset the signing keys each cluster trusts for the others (its shared pins)",
		Long: `Each cluster trusts one Ed25519 key per other cluster: pinned on first use,
or from a trust bundle (docs/SECURITY.md). The pins are shared by every pod of
the cluster in Secret ` + kube.PinsSecret + `, written by its leader.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pins.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "Print every cluster's pins; a cluster pinned to different keys in different views is an error (exit 1)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.listPins(cmd) },
	})
	pins.AddCommand(&cobra.Command{
		Use:   "bundle",
		Short: "Print the strict-mode trust bundle the set agrees on (one \"<cluster> <key>\" line per cluster, the key the others pin for it) for --trust-bundle-file",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.bundlePins(cmd) },
	})
	pins.AddCommand(&cobra.Command{
		Use:   "delete CLUSTER",
		Short: "Reset CLUSTER's pin in every cluster of the set: its next key is pinned on first use (after it lost its key Secret, or to reuse its ID)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.deletePins(cmd, args[0]) },
	})
	return pins
}

// collectPins reads every cluster's shared pins: the rows to print, and
// per pinned cluster which views pin which key (base64).
func (o *Options) collectPins(cmd *cobra.Command) ([]PinView, map[string]map[string][]string, []string, error) {
	rs, err := o.reach(cmd.Context())
	if err != nil {
		return nil, nil, nil, err
	}
	var out []PinView
	var members []string
	keys := map[string]map[string][]string{} // pinned cluster -> key -> views
	for _, r := range rs {
		switch {
		case r.Err != nil:
			out = append(out, PinView{Context: r.Context, Error: r.Err.Error()})
			continue
		case r.Member == nil:
			continue
		}
		members = append(members, r.Member.ID)
		p, err := kube.ReadPins(cmd.Context(), r.Member.Client, o.Namespace)
		if err != nil {
			out = append(out, PinView{Context: r.Context, View: r.Member.ID, Error: err.Error()})
			continue
		}
		for c, k := range p.Keys {
			b64 := base64.StdEncoding.EncodeToString(k)
			out = append(out, PinView{Context: r.Context, View: r.Member.ID, Cluster: c, Key: b64})
			if keys[c] == nil {
				keys[c] = map[string][]string{}
			}
			keys[c][b64] = append(keys[c][b64], r.Member.ID)
		}
		for c, rs := range p.Unpinned {
			out = append(out, PinView{Context: r.Context, View: r.Member.ID, Cluster: c, Key: base64.StdEncoding.EncodeToString(rs.Key), Reset: true})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].View != out[j].View {
			return out[i].View < out[j].View
		}
		return out[i].Cluster < out[j].Cluster
	})
	sort.Strings(members)
	return out, keys, members, nil
}

// pinConflicts names every cluster pinned to different keys by different
// views.
func pinConflicts(keys map[string]map[string][]string) []string {
	var problems []string
	for c, byKey := range keys {
		if len(byKey) > 1 {
			var parts []string
			for k, views := range byKey {
				sort.Strings(views)
				parts = append(parts, fmt.Sprintf("%s in %s", k, strings.Join(views, ",")))
			}
			sort.Strings(parts)
			problems = append(problems, fmt.Sprintf("cluster %s is pinned to different keys: %s", c, strings.Join(parts, "; ")))
		}
	}
	sort.Strings(problems)
	return problems
}

func (o *Options) listPins(cmd *cobra.Command) error {
	out, keys, _, err := o.collectPins(cmd)
	if err != nil {
		return err
	}
	problems := pinConflicts(keys)
	if err := o.print(out, func(w *strings.Builder) { printPins(w, out, problems) }); err != nil {
		return err
	}
	if len(problems) > 0 {
		return &ExitError{Code: 1}
	}
	return nil
}

// trustBundle is the strict-mode trust bundle the set agrees on: one
// "<cluster> <base64 key>" line per member, the key every other member
// pins for it. It fails when views disagree or a member is pinned nowhere.
func trustBundle(keys map[string]map[string][]string, members []string) (string, error) {
	if problems := pinConflicts(keys); len(problems) > 0 {
		return "", fmt.Errorf("the clusters do not agree: %s", strings.Join(problems, "; "))
	}
	var b strings.Builder
	var missing []string
	for _, m := range members {
		if len(keys[m]) == 0 {
			missing = append(missing, m)
			continue
		}
		for k := range keys[m] {
			fmt.Fprintf(&b, "%s %s\n", m, k)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("no other cluster pins %s yet (wait until the set has converged, or add its line from coastguardd keys show)", strings.Join(missing, ", "))
	}
	return b.String(), nil
}

func (o *Options) bundlePins(cmd *cobra.Command) error {
	_, keys, members, err := o.collectPins(cmd)
	if err != nil {
		return err
	}
	bundle, err := trustBundle(keys, members)
	if err != nil {
		return err
	}
	_, err = io.WriteString(o.Out, bundle)
	return err
}

func printPins(w *strings.Builder, out []PinView, problems []string) {
	fmt.Fprintf(w, "%-12s %-12s %-46s %s\n", "VIEW", "CLUSTER", "KEY", "")
	for _, p := range out {
		switch {
		case p.Error != "":
			fmt.Fprintf(w, "%-12s %s\n", p.Context, "error: "+p.Error)
		case p.Reset:
			fmt.Fprintf(w, "%-12s %-12s %-46s %s\n", p.View, p.Cluster, p.Key, "reset (pinned again on first use)")
		default:
			fmt.Fprintf(w, "%-12s %-12s %-46s\n", p.View, p.Cluster, p.Key)
		}
	}
	for _, p := range problems {
		fmt.Fprintf(w, "PROBLEM: %s\n", p)
	}
}

func (o *Options) deletePins(cmd *cobra.Command, cluster string) error {
	resetID := "cli-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return o.inEveryCluster(cmd, "pins delete "+cluster, func(m *member) (string, bool) {
		was, err := kube.ResetPin(cmd.Context(), m.Client, o.Namespace, cluster, resetID)
		switch {
		case err != nil:
			return err.Error(), false
		case was:
			return "reset", true
		}
		return "not pinned here", true
	})
}
