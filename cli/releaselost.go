package cli

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// ReleaseResult is what release-lost did in one cluster.
type ReleaseResult struct {
	Context string `json:"context"`
	Cluster string `json:"cluster,omitempty"`
	Result  string `json:"result"` // released, not-lost-here, or an error
}

func newReleaseLostCmd(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "release-lost CLUSTER",
		Short: "Stop enforcing the MCNPs of a lost cluster in every reachable cluster (an explicit, audited action)",
		Long: `A cluster retired because it disappeared (not decommissioned) is "lost": the
MCNPs it had originated stay enforced in every other cluster from their
last-known state, so that their protection does not leave with it (its
CoastguardCluster shows OriginLost=True, and kubectl coastguard status lists
it). release-lost annotates that CoastguardCluster object, in each reachable
cluster where it is lost, with ` + v1.AnnotationReleaseLostOrigin + `=<the
epoch it was lost at, its status.epoch>; the daemons there then stop
enforcing those MCNPs. The apiserver's audit log records who released what.
A later loss of the same cluster (at a newer epoch) is not released by this
annotation.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lost := args[0]
			return o.inEveryCluster(cmd, "release-lost "+lost, func(m *member) (string, bool) {
				res := releaseIn(cmd, m, lost)
				return res, res == "released" || res == "not lost here"
			})
		},
	}
}

// inEveryCluster runs act in every reachable cluster of the set, prints
// one result line per context and fails naming the contexts where it
// failed (act reports ok) or that could not be reached.
func (o *Options) inEveryCluster(cmd *cobra.Command, what string, act func(m *member) (result string, ok bool)) error {
	rs, err := o.reach(cmd.Context())
	if err != nil {
		return err
	}
	var out []ReleaseResult
	var failed []string
	for _, r := range rs {
		res := ReleaseResult{Context: r.Context}
		switch {
		case r.Err != nil:
			res.Result = r.Err.Error()
			failed = append(failed, r.Context)
		case r.Member == nil:
			continue // no coastguard there
		default:
			var ok bool
			res.Cluster = r.Member.ID
			if res.Result, ok = act(r.Member); !ok {
				failed = append(failed, r.Context)
			}
		}
		out = append(out, res)
	}
	if err := o.print(out, func(w *strings.Builder) {
		for _, r := range out {
			fmt.Fprintf(w, "%s (%s): %s\n", r.Context, r.Cluster, r.Result)
		}
	}); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s failed in %s", what, strings.Join(failed, ", "))
	}
	return nil
}

// releaseIn annotates the lost cluster's CoastguardCluster in one cluster
// when that cluster reports it lost.
func releaseIn(cmd *cobra.Command, m *member, lost string) string {
	ctx := cmd.Context()
	ccs, err := listClusters(ctx, m)
	if err != nil {
		return err.Error()
	}
	for _, c := range ccs {
		if c.Name != lost {
			continue
		}
		if !meta.IsStatusConditionTrue(c.Status.Conditions, v1.ClusterConditionOriginLost) {
			return "not lost here"
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			v1.AnnotationReleaseLostOrigin: strconv.FormatInt(c.Status.Epoch, 10)}}})
		if _, err := m.Dynamic.Resource(v1.CoastguardClusterGVR).Patch(ctx, lost, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Sprintf("annotating coastguardcluster %s: %v", lost, err)
		}
		return "released"
	}
	return "not lost here"
}
