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
	var hits []string
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
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if errorKey.MatchString(line) {
				hits = append(hits, path+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) > 0 {
		t.Errorf("log errors under the key \"err\", not \"error\":\n  %s", strings.Join(hits, "\n  "))
	}
	if !errorKey.MatchString(`log.Warn("x", "error", err)`) || errorKey.MatchString(`log.Warn("x", "err", err)`) {
		t.Fatal("errorKey pattern is broken")
	}
}
