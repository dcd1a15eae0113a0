package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// grant is one (group, resource, verb, where) the daemon holds.
type grant struct{ group, resource, verb, where string }

// TestOperationsRBACTableMatchesRBACYAML fails when docs/OPERATIONS.md's
// table of the daemon's permissions and deploy/base/rbac.yaml differ in any
// API group, resource, verb or scope.
func TestOperationsRBACTableMatchesRBACYAML(t *testing.T) {
	fromYAML := map[grant]bool{}
	b, err := os.ReadFile("base/rbac.yaml")
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	roles := 0
	for {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		where := "all namespaces"
		switch obj.Kind {
		case "Role":
			where = obj.Metadata.Namespace
		case "ClusterRole":
		default:
			continue
		}
		roles++
		for _, r := range obj.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						fromYAML[grant{g, res, v, where}] = true
					}
				}
			}
		}
	}
	require.Equal(t, 2, roles, "the daemon's ClusterRole and its leader-election Role")

	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "<!-- rbac-table: begin -->")
	require.True(t, ok, "OPERATIONS.md has no rbac-table marker")
	table, _, ok = strings.Cut(table, "<!-- rbac-table: end -->")
	require.True(t, ok)
	fromDoc := map[grant]bool{}
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 4 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "API group" {
			continue
		}
		rows++
		where := strings.TrimSpace(cells[3])
		for _, g := range split(cells[0]) {
			if g == "core" {
				g = ""
			}
			for _, res := range split(cells[1]) {
				for _, v := range split(cells[2]) {
					// Cluster-scoped resources are granted by the ClusterRole.
					w := where
					if w == "cluster" {
						w = "all namespaces"
					}
					fromDoc[grant{g, res, v, w}] = true
				}
			}
		}
	}
	require.Greater(t, rows, 5)
	var missing, extra []string
	for g := range fromYAML {
		if !fromDoc[g] {
			missing = append(missing, g.String())
		}
	}
	for g := range fromDoc {
		if !fromYAML[g] {
			extra = append(extra, g.String())
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	require.Empty(t, missing, "granted in deploy/base/rbac.yaml but not listed in docs/OPERATIONS.md")
	require.Empty(t, extra, "listed in docs/OPERATIONS.md but not granted in deploy/base/rbac.yaml")
}

func split(cell string) []string {
	var out []string
	for _, s := range strings.Split(cell, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (g grant) String() string {
	grp := g.group
	if grp == "" {
		grp = "core"
	}
	return grp + "/" + g.resource + " " + g.verb + " in " + g.where
}
