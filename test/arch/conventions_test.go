package arch

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// errorKey matches a structured-log attribute named "error" whose value is
// an error variable, e.g. log.Warn("x", "error", err).
var errorKey = regexp.MustCompile(`"error",\s*[A-Za-z_][A-Za-z0-9_.]*\b`)

// TestLogErrorKey keeps one log key for errors: "err". Mixed keys break log
// queries such as `err != ""` in Loki or jq.
func TestLogErrorKey(t *testing.T) {
	hits := grepSource(t, errorKey.MatchString, nil)
	if len(hits) > 0 {
		t.Errorf("log errors under the key \"err\", not \"error\":\n  %s", strings.Join(hits, "\n  "))
	}
	if !errorKey.MatchString(`log.Warn("x", "error", err)`) || errorKey.MatchString(`log.Warn("x", "err", err)`) {
		t.Fatal("errorKey pattern is broken")
	}
}

// metricsRegistration matches a direct Prometheus registration.
var metricsRegistration = regexp.MustCompile(`\.(MustRegister|Register)\(|promauto\.`)

// registersDirectly reports whether a line registers a collector other than
// through internal/metricsreg.
func registersDirectly(line string) bool {
	return metricsRegistration.MatchString(strings.ReplaceAll(line, "metricsreg.Register(", ""))
}

// TestOneMetricsRegistrationPolicy keeps every collector registration in
// internal/metricsreg, whose documented policy (nil registry: none; reuse
// for components created more than once; every error returned, never a
// panic) then holds everywhere.
func TestOneMetricsRegistrationPolicy(t *testing.T) {
	allowed := func(path string) bool {
		return strings.Contains(filepath.ToSlash(path), "internal/metricsreg/") ||
			strings.Contains(filepath.ToSlash(path), "api/") // scheme builders, not metrics
	}
	hits := grepSource(t, registersDirectly, allowed)
	if len(hits) > 0 {
		t.Errorf("register Prometheus collectors through internal/metricsreg (Register or All):\n  %s", strings.Join(hits, "\n  "))
	}
	if !registersDirectly(`reg.MustRegister(c)`) || !registersDirectly(`if err := reg.Register(c); err != nil {`) ||
		registersDirectly(`m.x, err = metricsreg.Register(reg, m.x)`) {
		t.Fatal("metricsRegistration pattern is broken")
	}
}

// grepSource returns path:line: text of every line of the module's non-test
// Go files for which match is true, skipping files for which skip is true.
func grepSource(t *testing.T, match func(string) bool, skip func(string) bool) []string {
	t.Helper()
	var hits []string
	for _, path := range moduleGoFiles(t) {
		if strings.HasSuffix(path, "_test.go") || (skip != nil && skip(path)) {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if match(line) {
				hits = append(hits, path+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
			}
		}
	}
	return hits
}

// moduleGoFiles returns every Go file of the module (tests included), as
// paths from this directory, without .git, caches, the demo's state and
// testdata.
func moduleGoFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", ".demo", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
