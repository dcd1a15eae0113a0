package deploy

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

var metricNameRE = regexp.MustCompile(`^coastguard_[a-z0-9_]+$`)

// exportedMetrics is every coastguard_* metric name written as a string
// literal in the daemon's code (tests, the test harness, the benchmarks and
// the tools are left out: they export nothing).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	skip := map[string]bool{"../test": true, "../hack": true, "../cmd/coastguard-bench": true, "../tools": true, "../.cache": true, "../bench": true}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[path] || strings.HasPrefix(d.Name(), ".") && path != ".." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && metricNameRE.MatchString(s) {
					names[s] = true
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(names), 30, "the scan found the daemon's metrics")
	return names
}

var queryMetricRE = regexp.MustCompile(`\b(coastguard_[a-z0-9_]+|process_[a-z0-9_]+|go_[a-z0-9_]+)\b`)

// checkQuery fails for a metric in expr that nothing exports: a coastguard_*
// name the daemon does not define (histograms also as _bucket, _sum and
// _count), or a Go or process metric outside what client_golang's
// collectors (registered by coastguardd run) export.
func checkQuery(t *testing.T, where, expr string, exported map[string]bool) {
	t.Helper()
	runtime := map[string]bool{"process_resident_memory_bytes": true, "process_cpu_seconds_total": true,
		"process_open_fds": true, "go_goroutines": true, "go_memstats_heap_alloc_bytes": true}
	for _, m := range queryMetricRE.FindAllString(expr, -1) {
		if strings.HasPrefix(m, "coastguard_") {
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suf); ok && exported[b] {
					base = b
				}
			}
			require.True(t, exported[base], "%s: %s names metric %s, which coastguardd does not export", where, expr, m)
			continue
		}
		require.True(t, runtime[m], "%s: %s names %s, not one of the runtime metrics coastguardd exports", where, expr, m)
	}
}

// TestDashboardAndAlertsNameExportedMetrics: every query of the Grafana
// dashboard and every alert expression names a metric coastguardd exports,
// so a renamed metric cannot leave a silent panel or an alert that never
// fires.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)

	b, err := os.ReadFile("../charts/coastguard/files/dashboard.json")
	require.NoError(t, err)
	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.Equal(t, "coastguard", dash.UID)
	queries := 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			checkQuery(t, "dashboard panel "+strconv.Quote(p.Title), tg.Expr, exported)
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok {
			checkQuery(t, "dashboard variable "+v.Name, q, exported)
		}
	}
	require.Greater(t, queries, 10)

	rb, err := os.ReadFile("components/monitoring/prometheusrule.yaml")
	require.NoError(t, err)
	var rf ruleFile
	require.NoError(t, yaml.Unmarshal(rb, &rf))
	for _, g := range rf.Spec.Groups {
		for _, r := range g.Rules {
			checkQuery(t, "alert "+r.Alert, r.Expr, exported)
		}
	}
}

// The checker itself catches a misspelt metric.
func TestCheckQueryCatchesAnUnknownMetric(t *testing.T) {
	exported := map[string]bool{"coastguard_leader": true, "coastguard_x_seconds": true}
	ft := &testing.T{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		checkQuery(ft, "test", `sum(coastguard_leaders) + rate(coastguard_x_seconds_bucket[5m])`, exported)
	}()
	<-done
	require.True(t, ft.Failed(), "coastguard_leaders is not exported")
}
