package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

type ruleFile struct {
	Spec struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// TestAlertsHaveRunbooks: every alert of the PrometheusRule has a section in
// docs/RUNBOOK.md and a runbook_url pointing at it, and the chart ships the
// same rules as the kustomize component.
func TestAlertsHaveRunbooks(t *testing.T) {
	b, err := os.ReadFile("components/monitoring/prometheusrule.yaml")
	require.NoError(t, err)
	var rf ruleFile
	require.NoError(t, yaml.Unmarshal(b, &rf))
	runbook, err := os.ReadFile("../docs/RUNBOOK.md")
	require.NoError(t, err)
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(runbook), -1) {
		sections[m[1]] = true
	}
	n := 0
	for _, g := range rf.Spec.Groups {
		for _, r := range g.Rules {
			n++
			require.True(t, sections[r.Alert], "docs/RUNBOOK.md has no section ## %s", r.Alert)
			require.Equal(t, "https://github.com/coastguard-mcnp/coastguard/blob/main/docs/RUNBOOK.md#"+strings.ToLower(r.Alert),
				r.Annotations["runbook_url"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		}
	}
	require.Equal(t, len(sections), n, "one runbook section per alert, no stale sections")

	chart, err := os.ReadFile("../charts/coastguard/files/prometheusrule-spec.yaml")
	require.NoError(t, err)
	var fromChart, fromKustomize map[string]any
	require.NoError(t, yaml.Unmarshal(chart, &fromChart))
	var whole map[string]any
	require.NoError(t, yaml.Unmarshal(b, &whole))
	fromKustomize = whole["spec"].(map[string]any)
	require.Equal(t, fromKustomize, fromChart, "charts/coastguard/files/prometheusrule-spec.yaml is the kustomize rule's spec")
}
