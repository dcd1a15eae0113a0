package harness

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	require.NotNil(t, blk)
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c
}

func TestCertificates(t *testing.T) {
	dir := t.TempDir()
	pki, err := newClusterPKI(dir, "c1")
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(pki.ca.Cert)

	srvPEM, err := os.ReadFile(pki.serverCert)
	require.NoError(t, err)
	srv := parseCert(t, srvPEM)
	_, err = srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.NoError(t, err, "serving cert valid for 127.0.0.1")
	_, err = srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"})
	assert.NoError(t, err)
	_, err = srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"})
	assert.Error(t, err)

	admin := parseCert(t, pki.adminCert.CertPEM)
	assert.Equal(t, []string{"system:masters"}, admin.Subject.Organization)
	_, err = admin.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.NoError(t, err)
	_, err = admin.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	assert.Error(t, err, "client cert must not serve")

	// Another cluster's CA does not trust this cluster's certs.
	other, err := NewCA("other", time.Hour)
	require.NoError(t, err)
	op := x509.NewCertPool()
	op.AddCert(other.Cert)
	_, err = admin.Verify(x509.VerifyOptions{Roots: op, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	assert.Error(t, err)

	key, err := os.ReadFile(pki.saKeyFile)
	require.NoError(t, err)
	assert.Contains(t, string(key), "EC PRIVATE KEY")
	st, err := os.Stat(pki.saKeyFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "private keys are not world-readable")
	pub, err := os.ReadFile(pki.saPubFile)
	require.NoError(t, err)
	blk, _ := pem.Decode(pub)
	require.NotNil(t, blk)
	_, err = x509.ParsePKIXPublicKey(blk.Bytes)
	assert.NoError(t, err)

	_, err = pki.ca.Issue(CertRequest{CommonName: "nothing"})
	assert.Error(t, err, "a certificate must be for client or server use")
}

func TestBinaryMissingNamesRemedy(t *testing.T) {
	dir := t.TempDir()
	_, err := Binary(dir, BinKubeAPIServer)
	require.ErrorIs(t, err, ErrMissingBinary)
	assert.Contains(t, err.Error(), "make testbins")
	assert.Contains(t, err.Error(), EnvTestbinDir)

	require.NoError(t, os.WriteFile(filepath.Join(dir, BinEtcd), []byte("x"), 0o644))
	_, err = Binary(dir, BinEtcd)
	require.ErrorIs(t, err, ErrMissingBinary, "a non-executable file is not a binary")

	require.NoError(t, os.Chmod(filepath.Join(dir, BinEtcd), 0o755))
	p, err := Binary(dir, BinEtcd)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, BinEtcd), p)

	// New fails (never skips) without binaries, and leaves no directory.
	root := filepath.Join(t.TempDir(), "env")
	_, err = New(context.Background(), Options{BinDir: dir, Dir: root})
	require.ErrorIs(t, err, ErrMissingBinary)
	_, statErr := os.Stat(root)
	assert.True(t, os.IsNotExist(statErr), "New created %s before checking binaries", root)

	t.Setenv(EnvTestbinDir, dir)
	d, err := TestbinDir()
	require.NoError(t, err)
	assert.Equal(t, dir, d)
}

func TestOptionsValidation(t *testing.T) {
	for _, o := range []Options{
		{Names: []string{"a", "a"}},
		{Names: []string{"Upper"}},
		{Names: []string{"bad_name"}},
		{Clusters: MaxClusters + 1},
	} {
		_, err := New(context.Background(), o)
		assert.Error(t, err, "%+v", o)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	assert.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "test", "harness", "harness_test.go"))
	assert.NoError(t, err)
}

func TestNetworkHelpers(t *testing.T) {
	ip, err := LoopbackAlias(10, 2)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.12", ip)
	_, err = LoopbackAlias(250, 10)
	assert.Error(t, err)

	port, err := FreePort(ip, true)
	require.NoError(t, err)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
	require.NoError(t, err, "loopback aliases work without setup")
	u, err := net.ListenPacket("udp", net.JoinHostPort(ip, fmt.Sprint(port)))
	require.NoError(t, err)
	u.Close()
	l.Close()

	assert.Equal(t, []string{"-m", "owner", "--gid-owner", "1000042", "-d", "127.0.0.11/32", "-j", "DROP"}, dropRule(1000042, "127.0.0.11"))
}

func testProc(t *testing.T, script string) *Process {
	t.Helper()
	p, err := startProcess(procSpec{name: "sh", path: "/bin/sh", args: []string{"-c", script}, logPath: filepath.Join(t.TempDir(), "sh.log")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Kill() })
	return p
}

// A stopped group whose last member is a zombie nobody has reaped yet (a
// slow init in a CI container) is gone, not a leak; a live member is not.
func TestGroupAliveIgnoresZombies(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	// Not reaped yet: the exited child is a zombie in its own group.
	require.Eventually(t, func() bool { _, st, ok := procGroup(pid); return ok && st == 'Z' }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, syscall.Kill(-pid, 0), "the kernel still counts the zombie's group")
	assert.False(t, groupAlive(pid), "a zombie-only group counts as alive")
	assert.True(t, waitGroupGone(pid, time.Second))
	require.NoError(t, cmd.Wait())

	live := exec.Command("/bin/sh", "-c", "sleep 30")
	live.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, live.Start())
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	assert.True(t, groupAlive(live.Process.Pid))
	assert.False(t, waitGroupGone(live.Process.Pid, 100*time.Millisecond))
}

func TestProcessLifecycle(t *testing.T) {
	// The child forks a grandchild in the same process group: Stop must take
	// down the whole group.
	p := testProc(t, `echo started; sleep 300 & echo "grandchild $!"; trap 'echo bye; kill $!; exit 0' TERM; wait`)
	require.Eventually(t, func() bool {
		s, _ := p.TailLog(10)
		return regexp.MustCompile(`(?m)^grandchild \d+$`).MatchString(s)
	}, 5*time.Second, 20*time.Millisecond)
	assert.True(t, p.Running())
	rss, err := p.RSS()
	require.NoError(t, err)
	assert.Greater(t, rss, uint64(0))
	pid := p.Pid()
	require.NoError(t, p.Stop(5*time.Second))
	assert.False(t, p.Running())
	assert.Eventually(t, func() bool { return !groupAlive(pid) }, 5*time.Second, 20*time.Millisecond, "process group survives Stop")
	log, err := p.TailLog(10)
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^bye$`, log, "SIGTERM reached the process")

	require.NoError(t, p.Restart())
	assert.NotEqual(t, pid, p.Pid())
	assert.Error(t, p.Restart(), "restart of a running process")
	var tail string
	if !assert.Eventually(t, func() bool {
		tail, _ = p.TailLog(100)
		return strings.Count(tail, "\nstarted\n") == 2
	}, 5*time.Second, 20*time.Millisecond, "the restarted process appends to the same log") {
		t.Fatalf("log:\n%s", tail)
	}
	require.NoError(t, p.Kill())
	assert.False(t, p.Running())
	log, err = p.TailLog(100)
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(log, "=== harness: starting sh"))

	// Stop escalates to SIGKILL when SIGTERM is ignored.
	q := testProc(t, `trap '' TERM; echo up; while :; do sleep 1; done`)
	require.Eventually(t, func() bool { s, _ := q.TailLog(5); return regexp.MustCompile(`(?m)^up$`).MatchString(s) }, 5*time.Second, 20*time.Millisecond)
	began := time.Now()
	require.NoError(t, q.Stop(300*time.Millisecond))
	assert.Less(t, time.Since(began), 10*time.Second)
	assert.False(t, q.Running())

	// A failing process reports its exit status.
	f := testProc(t, `exit 3`)
	<-f.Done()
	var ee interface{ ExitCode() int }
	require.True(t, errors.As(f.ExitErr(), &ee))
	assert.Equal(t, 3, ee.ExitCode())
}

func TestWaitReadyReportsEarlyExit(t *testing.T) {
	p := testProc(t, `echo "fatal: port in use"; exit 1`)
	err := waitReady(context.Background(), p, 10*time.Second, func(context.Context) error { return errors.New("not yet") })
	require.ErrorIs(t, err, errExited)
	assert.Contains(t, err.Error(), "port in use", "the log tail explains the failure")

	q := testProc(t, `sleep 30`)
	err = waitReady(context.Background(), q, 300*time.Millisecond, func(context.Context) error { return errors.New("still starting") })
	require.Error(t, err)
	assert.NotErrorIs(t, err, errExited)
	assert.Contains(t, err.Error(), "still starting")
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	s, err := tailFile(path, 3)
	require.NoError(t, err)
	assert.Equal(t, "line 997\nline 998\nline 999", s)
	s, err = tailFile(path, 5000)
	require.NoError(t, err)
	assert.Equal(t, 1000, strings.Count(s, "\n")+1)

	// Larger than the read window: the cut first line is dropped.
	big := strings.Repeat("x", 3<<20) + "\nlast\n"
	require.NoError(t, os.WriteFile(path, []byte(big), 0o644))
	s, err = tailFile(path, 10)
	require.NoError(t, err)
	assert.Equal(t, "last", s)
	_, err = tailFile(filepath.Join(t.TempDir(), "missing"), 1)
	assert.Error(t, err)
}

func TestMetricValue(t *testing.T) {
	text := `# TYPE coastguard_clusters gauge
coastguard_clusters{state="reachable"} 2
coastguard_clusters{state="unreachable"} 1
# TYPE coastguard_gossip_dropped_total counter
coastguard_gossip_dropped_total{reason="decrypt"} 4
coastguard_gossip_dropped_total{reason="origin"} 1
`
	fams, err := parseMetrics(text)
	require.NoError(t, err)
	v, ok := MetricValue(fams, "coastguard_clusters", map[string]string{"state": "unreachable"})
	assert.True(t, ok)
	assert.Equal(t, 1.0, v)
	v, ok = MetricValue(fams, "coastguard_gossip_dropped_total", nil)
	assert.True(t, ok)
	assert.Equal(t, 5.0, v, "samples are summed")
	_, ok = MetricValue(fams, "coastguard_clusters", map[string]string{"state": "gone"})
	assert.False(t, ok)
	_, ok = MetricValue(fams, "nope", nil)
	assert.False(t, ok)
	_, err = parseMetrics("garbage{")
	assert.Error(t, err)
}

func TestDownStopsDetachedProcesses(t *testing.T) {
	dir := t.TempDir()
	envDir := filepath.Join(dir, "env")
	require.NoError(t, os.MkdirAll(envDir, 0o755))
	p, err := startProcess(procSpec{name: "sleeper", path: "/bin/sleep", args: []string{"300"}, logPath: filepath.Join(dir, "sleep.log"), detach: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Kill() })
	// A recorded pid that now runs another binary must not be signalled.
	other := testProc(t, "sleep 300")
	st := state{Dir: envDir, Processes: []stateProcess{
		{Name: "sleeper", Pid: p.Pid(), Path: "/bin/sleep"},
		{Name: "recycled", Pid: other.Pid(), Path: "/usr/bin/not-this"},
	}}
	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(envDir, StateFile), b, 0o644))

	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	require.NoError(t, err)
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	assert.Equal(t, fmt.Sprint(p.Pid()), fields[3], "detached processes lead their own session")

	require.NoError(t, Down(envDir))
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Down did not stop the detached process")
	}
	assert.True(t, other.Running(), "Down signalled a pid that runs another binary")
	_, err = os.Stat(envDir)
	assert.True(t, os.IsNotExist(err))
	assert.Error(t, Down(envDir), "nothing to stop")
}

// FreePort never hands out a port twice in one process, and never one from
// the kernel's ephemeral range, where outgoing connections pick their
// source ports (a daemon then failed with "address already in use").
func TestFreePortOutsideEphemeralRangeAndUnique(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := FreePort("127.0.0.1", true)
		require.NoError(t, err)
		require.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		require.GreaterOrEqual(t, p, portLow)
		require.Less(t, p, portHigh)
		require.Less(t, p, 32768, "inside Linux's default ephemeral range")
	}
}

// setArg replaces a flag for the next start, appends a missing one and
// removes one given no value (a restarted daemon gets the Env's current
// peers as --seeds).
func TestProcessSetArg(t *testing.T) {
	p := testProc(t, `echo "$@"; exit 0`)
	p.spec.args = []string{"-c", `echo "args: $*"`, "sh", "--seeds=a", "--x=1"}
	p.setArg("--seeds=", "b,c")
	assert.Equal(t, []string{"-c", `echo "args: $*"`, "sh", "--x=1", "--seeds=b,c"}, p.Args)
	require.Eventually(t, func() bool { return !p.Running() }, 5*time.Second, 20*time.Millisecond)
	require.NoError(t, p.Restart())
	require.Eventually(t, func() bool {
		s, _ := p.TailLog(5)
		return strings.Contains(s, "args: --x=1 --seeds=b,c")
	}, 5*time.Second, 20*time.Millisecond, "the restart uses the new argument")
	p.setArg("--seeds=", "")
	assert.Equal(t, []string{"-c", `echo "args: $*"`, "sh", "--x=1"}, p.Args)
}
