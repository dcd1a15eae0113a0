package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coastguard-mcnp/coastguard/internal/version"
)

// Versions is the version document: this plugin's build and the coastguardd
// version each reachable cluster reports for itself.
type Versions struct {
	Client   string            `json:"client"`
	Revision string            `json:"revision"`
	Clusters map[string]string `json:"clusters,omitempty"` // cluster ID -> softwareVersion ("unknown" when not reported)
	Errors   []string          `json:"errors,omitempty"`
}

func newVersionCmd(o *Options) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the coastguardd version of every cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := Versions{Client: version.Get(), Revision: version.GetRevision()}
			if !clientOnly {
				o.serverVersions(cmd.Context(), &v)
			}
			return o.print(v, func(w *strings.Builder) {
				fmt.Fprintf(w, "client: %s (revision %s)\n", v.Client, v.Revision)
				for _, id := range sortedMapKeys(v.Clusters) {
					fmt.Fprintf(w, "cluster %s: coastguardd %s\n", id, v.Clusters[id])
				}
				for _, e := range v.Errors {
					fmt.Fprintf(w, "error: %s\n", e)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the plugin's version only (no apiserver is contacted)")
	return cmd
}

// serverVersions fills in what every reachable cluster reports for itself
// (its local CoastguardCluster's softwareVersion).
func (o *Options) serverVersions(ctx context.Context, v *Versions) {
	rs, err := o.reach(ctx)
	if err != nil {
		v.Errors = append(v.Errors, err.Error())
		return
	}
	v.Clusters = map[string]string{}
	for _, r := range rs {
		switch {
		case r.Err != nil:
			v.Errors = append(v.Errors, r.Err.Error())
			continue
		case r.Member == nil:
			continue // skipped: no coastguard there
		}
		v.Clusters[r.Member.ID] = "unknown"
		ccs, err := listClusters(ctx, r.Member)
		if err != nil {
			v.Errors = append(v.Errors, fmt.Sprintf("%s: %v", r.Member.ID, err))
			continue
		}
		for _, c := range ccs {
			if c.Status.Local && c.Status.SoftwareVersion != "" {
				v.Clusters[r.Member.ID] = c.Status.SoftwareVersion
			}
		}
	}
}

func sortedMapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
