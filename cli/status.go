package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// ClusterRow is one cluster as one cluster sees it.
type ClusterRow struct {
	Cluster         string `json:"cluster"`
	Alive           bool   `json:"alive"`
	Stale           bool   `json:"stale"`
	Retired         bool   `json:"retired"`
	SanityOK        bool   `json:"sanityOK"`
	SanityMessage   string `json:"sanityMessage,omitempty"`
	Members         int32  `json:"aliveMembers"`
	Leader          string `json:"leader,omitempty"`
	Version         string `json:"version,omitempty"`
	Lag             string `json:"lag"` // entries behind the cluster's own view, or "epoch behind"/"unknown"
	SoftwareVersion string `json:"softwareVersion,omitempty"`
	LastSeen        string `json:"lastSeen,omitempty"`
	// OriginLost: the cluster was lost (retired without a decommission)
	// and some of its MCNPs stay enforced in the viewing cluster.
	OriginLost        bool   `json:"originLost,omitempty"`
	OriginLostMessage string `json:"originLostMessage,omitempty"`
}

// View is one cluster's CoastguardCluster objects.
type View struct {
	Context  string       `json:"context"`
	Cluster  string       `json:"cluster"`
	Error    string       `json:"error,omitempty"`
	Clusters []ClusterRow `json:"clusters"`
}

// PolicyRow is the enforcement of one MCNP.
type PolicyRow struct {
	Policy   string            `json:"policy"` // origin/namespace/name
	Enforced string            `json:"enforced"`
	Ready    bool              `json:"ready"`
	Message  string            `json:"message,omitempty"`
	Clusters map[string]string `json:"clusters"` // cluster -> "applied"/"pending"/error/degraded reason
}

// Status is the status document.
type Status struct {
	Healthy     bool        `json:"healthy"`
	Problems    []string    `json:"problems,omitempty"`
	Skipped     []string    `json:"skipped,omitempty"` // contexts without a coastguard install
	VersionSkew []string    `json:"versionSkew,omitempty"`
	Views       []View      `json:"views"`
	Policies    []PolicyRow `json:"policies"`
}

func newStatusCmd(o *Options) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Cluster-set health: clusters, members, leaders, staleness, lag, version skew, MCNP enforcement",
		Long: `status reads every context that reaches a coastguard install and reports the
cluster set's health. It exits 0 when the set is healthy, 2 when it is not, and
1 on any other error. Without --wait it reads once and never retries.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.runStatus(cmd.Context(), wait, timeout)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every view knows every cluster alive with a leader and no lag, and every MCNP is Ready")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long --wait waits")
	return cmd
}

func (o *Options) runStatus(ctx context.Context, wait bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := o.status(ctx)
		if err != nil && !wait {
			return err
		}
		if err == nil && (st.Healthy || !wait || time.Now().After(deadline)) {
			if perr := o.printStatus(st); perr != nil {
				return perr
			}
			if st.Healthy {
				return nil
			}
			msg := fmt.Sprintf("cluster set not healthy: %d problem(s)", len(st.Problems))
			if wait {
				msg = fmt.Sprintf("cluster set not healthy after %s: %s", timeout, strings.Join(st.Problems, "; "))
			}
			return &ExitError{Code: ExitUnhealthy, Msg: msg}
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (o *Options) status(ctx context.Context) (*Status, error) {
	rs, err := o.reach(ctx)
	if err != nil {
		return nil, err
	}
	st := &Status{Healthy: true}
	var ms []*member
	for _, r := range rs {
		switch {
		case r.Member != nil:
			ms = append(ms, r.Member)
		case r.Skipped != "":
			st.Skipped = append(st.Skipped, r.Context+": "+r.Skipped)
		default:
			st.Views = append(st.Views, View{Context: r.Context, Error: r.Err.Error()})
			st.Problems = append(st.Problems, r.Err.Error())
		}
	}
	if len(ms) == 0 && len(st.Problems) == 0 {
		return nil, errors.New("no kubeconfig context reaches a coastguard install; pass --kubeconfig or --contexts")
	}
	views, own := st.listViews(ctx, ms)
	versions := map[string][]string{}
	for _, m := range ms {
		if ccs, ok := views[m.ID]; ok {
			st.addView(m, ms, ccs, own, versions)
		}
	}
	st.Problems = append(st.Problems, keyMismatches(views)...)
	if len(versions) > 1 {
		for ver, cs := range versions {
			sort.Strings(cs)
			st.VersionSkew = append(st.VersionSkew, ver+": "+strings.Join(cs, ","))
		}
		sort.Strings(st.VersionSkew)
	}
	for _, m := range ms {
		st.addPolicies(ctx, m)
	}
	st.Healthy = len(st.Problems) == 0
	return st, nil
}

// listViews lists every member's CoastguardClusters (its view of the set)
// and collects each cluster's own object (Status.Local); a member whose
// list fails is a problem.
func (st *Status) listViews(ctx context.Context, ms []*member) (views map[string][]v1.CoastguardCluster, own map[string]v1.CoastguardCluster) {
	own = map[string]v1.CoastguardCluster{}
	views = map[string][]v1.CoastguardCluster{}
	for _, m := range ms {
		ccs, err := listClusters(ctx, m)
		if err != nil {
			st.Views = append(st.Views, View{Context: m.Context, Cluster: m.ID, Error: err.Error()})
			st.Problems = append(st.Problems, fmt.Sprintf("%s: cannot list coastguardclusters: %v", m.ID, err))
			continue
		}
		views[m.ID] = ccs
		for _, c := range ccs {
			if c.Status.Local {
				own[c.Name] = c
			}
		}
	}
	return views, own
}

// addView adds member m's view of the set (ccs) with its problems, and the
// software version each cluster reports of itself.
func (st *Status) addView(m *member, ms []*member, ccs []v1.CoastguardCluster, own map[string]v1.CoastguardCluster, versions map[string][]string) {
	v := View{Context: m.Context, Cluster: m.ID}
	seen := map[string]bool{}
	for _, c := range ccs {
		seen[c.Name] = true
		r := clusterRow(c, own)
		if r.OriginLost {
			st.Problems = append(st.Problems, fmt.Sprintf("%s keeps enforcing MCNPs of lost cluster %s: %s", m.ID, c.Name, r.OriginLostMessage))
		}
		if c.Status.Local && c.Status.SoftwareVersion != "" {
			versions[c.Status.SoftwareVersion] = append(versions[c.Status.SoftwareVersion], c.Name)
		}
		st.Problems = append(st.Problems, rowProblems(m.ID, r)...)
		v.Clusters = append(v.Clusters, r)
	}
	for _, other := range ms {
		if !seen[other.ID] {
			st.Problems = append(st.Problems, fmt.Sprintf("%s does not know %s yet", m.ID, other.ID))
		}
	}
	st.Views = append(st.Views, v)
}

// clusterRow is one cluster as a member sees it; the lag compares its
// version with the cluster's own object.
func clusterRow(c v1.CoastguardCluster, own map[string]v1.CoastguardCluster) ClusterRow {
	r := ClusterRow{Cluster: c.Name, Members: c.Status.AliveMembers, Leader: c.Status.Leader, Version: c.Status.Version,
		SoftwareVersion: c.Status.SoftwareVersion, Lag: "unknown",
		Alive:    meta.IsStatusConditionTrue(c.Status.Conditions, v1.ClusterConditionAlive),
		Stale:    meta.IsStatusConditionTrue(c.Status.Conditions, v1.ClusterConditionStale),
		Retired:  meta.IsStatusConditionTrue(c.Status.Conditions, v1.ClusterConditionRetired),
		SanityOK: !meta.IsStatusConditionFalse(c.Status.Conditions, v1.ClusterConditionSanityOK)}
	if sc := meta.FindStatusCondition(c.Status.Conditions, v1.ClusterConditionSanityOK); sc != nil && sc.Status == "False" {
		r.SanityMessage = sc.Message
	}
	if lc := meta.FindStatusCondition(c.Status.Conditions, v1.ClusterConditionOriginLost); lc != nil && lc.Status == metav1.ConditionTrue {
		r.OriginLost, r.OriginLostMessage = true, lc.Message
	}
	if c.Status.LastSeen != nil {
		r.LastSeen = c.Status.LastSeen.UTC().Format(time.RFC3339)
	}
	if o, ok := own[c.Name]; ok {
		switch {
		case o.Status.Epoch == c.Status.Epoch:
			r.Lag = fmt.Sprint(max(o.Status.Sequence-c.Status.Sequence, 0))
		case o.Status.Epoch > c.Status.Epoch:
			r.Lag = "epoch behind"
		default:
			r.Lag = "0"
		}
	}
	return r
}

// rowProblems are the problems member id's row r shows.
func rowProblems(id string, r ClusterRow) []string {
	var ps []string
	if !r.Retired && (!r.Alive || r.Stale) {
		ps = append(ps, fmt.Sprintf("%s sees %s not alive", id, r.Cluster))
	}
	if !r.Retired && r.Alive && r.Leader == "" {
		ps = append(ps, fmt.Sprintf("%s sees no leader for %s", id, r.Cluster))
	}
	if r.Lag != "0" && r.Lag != "unknown" {
		ps = append(ps, fmt.Sprintf("%s is behind %s (lag %s)", id, r.Cluster, r.Lag))
	}
	if !r.SanityOK {
		ps = append(ps, fmt.Sprintf("%s reports a sanity problem for %s: %s", id, r.Cluster, r.SanityMessage))
	}
	return ps
}

// addPolicies adds member m's MCNPs, each with its per-cluster state.
func (st *Status) addPolicies(ctx context.Context, m *member) {
	mc, err := listMCNPs(ctx, m)
	if err != nil {
		st.Problems = append(st.Problems, fmt.Sprintf("%s: cannot list MCNPs: %v", m.ID, err))
		return
	}
	for _, p := range mc {
		row := PolicyRow{Policy: m.ID + "/" + p.Namespace + "/" + p.Name, Enforced: p.Status.EnforcedSummary, Clusters: map[string]string{}}
		if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady); c != nil {
			row.Ready = c.Status == "True" && p.Status.ObservedGeneration == p.Generation
			row.Message = c.Message
		}
		for _, c := range p.Status.Clusters {
			row.Clusters[c.Cluster] = clusterPolicyState(c, p.Generation)
		}
		if !row.Ready {
			st.Problems = append(st.Problems, fmt.Sprintf("MCNP %s not Ready (%s)", row.Policy, row.Enforced))
		}
		st.Policies = append(st.Policies, row)
	}
}

// clusterPolicyState is one enforcing cluster's state of an MCNP.
func clusterPolicyState(c v1.ClusterEnforcementStatus, generation int64) string {
	switch {
	case c.Error != "":
		return "error: " + c.Error
	case c.ObservedGeneration < generation:
		return "pending"
	case strings.HasPrefix(c.Degraded, kube.ReasonNamespaceMissing):
		return "namespace missing (not enforced)"
	case c.Degraded != "":
		return "degraded: " + c.Degraded
	}
	return "applied"
}

func yn(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (o *Options) printStatus(st *Status) error {
	return o.print(st, func(w *strings.Builder) {
		// The tables go through tabwriter into w. Writes into a
		// strings.Builder cannot fail, so neither can the tabwriter's.
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		tprintf := func(format string, a ...any) { _, _ = fmt.Fprintf(tw, format, a...) }
		for _, v := range st.Views {
			if v.Cluster == "" {
				tprintf("CONTEXT %s\n", v.Context)
			} else {
				tprintf("VIEW FROM %s (context %s)\n", v.Cluster, v.Context)
			}
			if v.Error != "" {
				tprintf("  error: %s\n", v.Error)
				continue
			}
			tprintf("  CLUSTER\tALIVE\tSTALE\tRETIRED\tSANITY\tMEMBERS\tLEADER\tVERSION\tLAG\tSOFTWARE\n")
			for _, r := range v.Clusters {
				sw := r.SoftwareVersion
				if sw == "" {
					sw = "-"
				}
				tprintf("  %s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Cluster, yn(r.Alive), yn(r.Stale), yn(r.Retired),
					map[bool]string{true: "ok", false: "PROBLEM"}[r.SanityOK], r.Members, r.Leader, r.Version, r.Lag, sw)
			}
		}
		if len(st.Policies) > 0 {
			tprintf("\nMCNP\tENFORCED\tREADY\tPER CLUSTER\n")
			for _, p := range st.Policies {
				var cs []string
				for c, s := range p.Clusters {
					cs = append(cs, c+"="+s)
				}
				sort.Strings(cs)
				tprintf("%s\t%s\t%s\t%s\n", p.Policy, p.Enforced, yn(p.Ready), strings.Join(cs, " "))
			}
		}
		_ = tw.Flush()
		for _, sk := range st.Skipped {
			fmt.Fprintf(w, "\nskipped context %s", sk)
		}
		if len(st.Skipped) > 0 {
			fmt.Fprintln(w)
		}
		if len(st.VersionSkew) > 0 {
			fmt.Fprintf(w, "\nversion skew: %s\n", strings.Join(st.VersionSkew, "; "))
		}
		if st.Healthy {
			fmt.Fprintln(w, "\ncluster set healthy")
		} else {
			fmt.Fprintf(w, "\n%d problem(s):\n", len(st.Problems))
			for _, p := range st.Problems {
				fmt.Fprintf(w, "  - %s\n", p)
			}
		}
	})
}

// keyMismatches names every cluster whose signing-key fingerprint differs
// across views (each view shows its own key for itself and the key it
// trusts for the others): someone claims that cluster's ID, or it lost its
// key and the others still trust the old one. A view that has no key for a
// cluster yet is not a mismatch.
func keyMismatches(views map[string][]v1.CoastguardCluster) []string {
	byCluster := map[string]map[string][]string{} // cluster -> fingerprint -> views
	for view, ccs := range views {
		for _, c := range ccs {
			fp := c.Status.SigningKeyFingerprint
			if fp == "" {
				continue
			}
			if byCluster[c.Name] == nil {
				byCluster[c.Name] = map[string][]string{}
			}
			byCluster[c.Name][fp] = append(byCluster[c.Name][fp], view)
		}
	}
	var out []string
	for cluster, fps := range byCluster {
		if len(fps) < 2 {
			continue
		}
		var parts []string
		for fp, vs := range fps {
			sort.Strings(vs)
			parts = append(parts, fp+" in "+strings.Join(vs, ","))
		}
		sort.Strings(parts)
		out = append(out, fmt.Sprintf("cluster %s's signing key differs across views: %s (a cluster claims its ID, or it lost its key: kubectl coastguard pins list, docs/SECURITY.md)",
			cluster, strings.Join(parts, "; ")))
	}
	sort.Strings(out)
	return out
}
