//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/test/harness"
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

// A failed run's report prints the daemon lines around each fail-open
// moment and returns: it once took n.mu and then called
// logFailOpenWindows, which takes it again, so the first run with a
// fail-open moment hung until go test's timeout (seed 30006).
func TestNemesisFinishReportsFailOpen(t *testing.T) {
	kept, line := finishFixture(t, true)
	b, err := os.ReadFile(filepath.Join(kept, "coastguardd-cluster1-0.log"))
	require.NoError(t, err, "a failed run keeps its daemon logs")
	require.Equal(t, line, string(b))
}

// A passing run keeps its logs only when asked (make nemesis KEEP_LOGS=1).
func TestNemesisFinishKeepsLogsOnRequest(t *testing.T) {
	t.Setenv("COASTGUARD_NEMESIS_KEEP_LOGS", "")
	kept, _ := finishFixture(t, false)
	require.NoDirExists(t, kept, "a passing run keeps no logs by default")
	t.Setenv("COASTGUARD_NEMESIS_KEEP_LOGS", "1")
	kept, line := finishFixture(t, false)
	b, err := os.ReadFile(filepath.Join(kept, "coastguardd-cluster1-0.log"))
	require.NoError(t, err, "KEEP_LOGS keeps a passing run's daemon logs")
	require.Equal(t, line, string(b))
}

// finishFixture runs finish over a one-daemon run with a fail-open moment
// (failed or not) and returns where the logs would be kept (removed at the
// end of the test) and the daemon's one log line.
func finishFixture(t *testing.T, failed bool) (kept, line string) {
	dir := t.TempDir()
	at := time.Now()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "logs"), 0o755))
	p := filepath.Join(dir, "logs", "coastguardd-cluster1-0.log")
	line = `{"time":"` + at.Add(-time.Second).UTC().Format(time.RFC3339Nano) + `","level":"INFO","msg":"just before"}` + "\n"
	require.NoError(t, os.WriteFile(p, []byte(line), 0o644))
	const seed = 1<<64 - 1 // not a seed any real run uses: its files are removed below
	n := &nemesis{t: t, env: &harness.Env{Dir: dir}, start: at.Add(-time.Minute), nps: map[string]npState{},
		daemons:    map[string][]*harness.Daemon{"cluster1": {{Process: &harness.Process{LogPath: p}}}},
		failOpenAt: []failOpenEvent{{clusters: []string{"cluster1"}, at: at}}}
	done := make(chan struct{})
	go func() { defer close(done); n.finish(seed, time.Second, failed) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("finish did not return: n.mu taken twice")
	}
	require.NoError(t, os.Remove(repoPath(".cache", fmt.Sprintf("nemesis-history-%d.txt", uint64(seed)))))
	require.NoError(t, os.Remove(repoPath(".cache", fmt.Sprintf("nemesis-settle-%d.json", uint64(seed)))))
	kept = repoPath(".cache", fmt.Sprintf("nemesis-logs-%d", uint64(seed)))
	t.Cleanup(func() { _ = os.RemoveAll(kept) })
	return kept, line
}

func TestParseNemesisFaults(t *testing.T) {
	got, err := parseNemesisFaults("")
	require.NoError(t, err)
	require.Nil(t, got, "unset: every fault kind")
	got, err = parseNemesisFaults("upgrade,kill")
	require.NoError(t, err)
	require.Equal(t, []string{"upgrade", "kill"}, got)
	_, err = parseNemesisFaults("upgrade,reboot")
	require.ErrorContains(t, err, `unknown fault "reboot"`)
	require.ErrorContains(t, err, "apiserver", "the error lists the kinds")
}
