//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The fail-open explanation shows the daemon lines inside the window
// (DEBUG and non-JSON lines left out), the last ones when capped.
func TestNemesisLogWindow(t *testing.T) {
	p := filepath.Join(t.TempDir(), "coastguardd-c1-0.log")
	lines := "=== harness: starting\n" +
		`{"time":"2026-11-28T10:00:00Z","level":"INFO","msg":"before"}` + "\n" +
		`{"time":"2026-11-28T10:00:01Z","level":"INFO","msg":"a"}` + "\n" +
		`{"time":"2026-11-28T10:00:02Z","level":"DEBUG","msg":"noise"}` + "\n" +
		`{"time":"2026-11-28T10:00:02.5Z","level":"WARN","msg":"b"}` + "\n" +
		`{"time":"2026-11-28T10:00:03Z","level":"INFO","msg":"c"}` + "\n" +
		`{"time":"2026-11-28T10:00:09Z","level":"INFO","msg":"after"}` + "\n"
	require.NoError(t, os.WriteFile(p, []byte(lines), 0o644))
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	got := logWindow(p, at.Add(time.Second), at.Add(3*time.Second), 10)
	require.Len(t, got, 3)
	require.Contains(t, got[0], `"msg":"a"`)
	require.Contains(t, got[2], `"msg":"c"`)
	got = logWindow(p, at.Add(time.Second), at.Add(3*time.Second), 2)
	require.Equal(t, "(1 earlier lines left out)", got[0])
	require.Contains(t, got[2], `"msg":"c"`)
}
