// Package harness runs real Kubernetes control planes (one etcd, N
// kube-apiservers, optionally kube-controller-managers) and real coastguardd
// processes on one machine, for the e2e suite, the demo and benchmarks.
//
// Nothing here is a fake: every cluster is a real kube-apiserver binary built by
// hack/build-testbins.sh (make testbins). A missing binary is a hard error that
// names the remedy; the harness never skips.
//
// Layout: one etcd (--unsafe-no-fsync, random ports) shared by N apiservers
// with distinct --etcd-prefix and --service-cluster-ip-range, each with its
// own CA, serving certificate, admin client certificate (system:masters),
// service-account key pair and kubeconfig; RBAC authorization. Cluster i's
// daemons gossip on the loopback alias 127.0.0.(10+i) and run with their own
// primary group, which Partition matches with iptables owner rules.
//
// Typical use in a test:
//
//	env := harness.Start(t, harness.Options{Clusters: 3})
//	require.NoError(t, env.InstallCRDs(ctx, "deploy/crds"))
//	bin, _ := harness.Build("./cmd/coastguardd")
//	a, _ := env.StartDaemon(env.Clusters[0], harness.DaemonOptions{Binary: bin})
//	b, _ := env.StartDaemon(env.Clusters[1], harness.DaemonOptions{Binary: bin}) // seeds: a
//	_, _ = env.Clusters[0].RunPod(ctx, "shop", "web-0", "10.244.1.5", map[string]string{"app": "web"})
//	_ = env.Partition(env.Clusters[0], env.Clusters[1]) // ... env.Heal()
//	_ = a.Kill(); _ = a.Restart()
//
// Everything started is stopped in t.Cleanup (process groups, SIGKILL after a
// grace period, iptables chain removed), also shortly before the test binary's
// -timeout; children die with the test binary (parent-death signal) even if
// it is killed. With Options.Detach the processes outlive the program instead
// (make demo) and Down(dir) stops them.
package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Names of the test binaries built by hack/build-testbins.sh.
const (
	BinEtcd              = "etcd"
	BinKubeAPIServer     = "kube-apiserver"
	BinKubeControllerMgr = "kube-controller-manager"
	BinKubectl           = "kubectl"
	// BinKubeRouter is the dataplane's NetworkPolicy engine (test only).
	BinKubeRouter = "kube-router"
	// BinKubeProxy is the dataplane's Service proxy.
	BinKubeProxy = "kube-proxy"
)

// EnvTestbinDir overrides where the test binaries are looked up.
const EnvTestbinDir = "TESTBIN_DIR"

// RepoRoot returns the repository root (the directory holding go.mod of this
// module), found from this source file's location, falling back to walking up
// from the working directory.
func RepoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(file)
		if root, ok := findModuleRoot(dir); ok {
			return root, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("harness: locating repository root: %w", err)
	}
	if root, ok := findModuleRoot(wd); ok {
		return root, nil
	}
	return "", fmt.Errorf("harness: no go.mod of github.com/coastguard-mcnp/coastguard above %s", wd)
}

func findModuleRoot(dir string) (string, bool) {
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module github.com/coastguard-mcnp/coastguard") {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// TestbinDir returns $TESTBIN_DIR, or <repo>/.cache/bin.
func TestbinDir() (string, error) {
	if d := os.Getenv(EnvTestbinDir); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "bin"), nil
}

// ErrMissingBinary is wrapped by Binary when a test binary is absent.
var ErrMissingBinary = errors.New("test binary missing")

// Binary returns the absolute path of a test binary in dir (TestbinDir when dir
// is empty). A missing or non-executable file is an error naming the remedy.
func Binary(dir, name string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = TestbinDir(); err != nil {
			return "", err
		}
	}
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found in %s (%v); build the test binaries with `make testbins` "+
			"(hack/build-testbins.sh, about 10 minutes the first time) or point %s at a directory holding "+
			"etcd, kube-apiserver, kube-controller-manager and kubectl", ErrMissingBinary, name, dir, err, EnvTestbinDir)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file; rebuild with `make testbins`", ErrMissingBinary, p)
	}
	return p, nil
}

var builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]string
}

// Build compiles a main package of this module (for example
// "./cmd/coastguardd") once per process with `go build -o` into a temporary
// directory and returns the binary's path. Later calls for the same package
// return the cached path. RemoveBuilds deletes the directory.
func Build(pkg string) (string, error) { return build(pkg, "build") }

// BuildTest compiles pkg's test binary (go test -c), for an agent that a
// package's TestMain runs instead of its tests (the gossip package's rogue
// member, say). Cached like Build.
func BuildTest(pkg string) (string, error) { return build(pkg, "test") }

func build(pkg, mode string) (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	id := mode + " " + pkg
	if p, ok := builds.done[id]; ok {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "coastguard-build-")
		if err != nil {
			return "", fmt.Errorf("harness: build dir: %w", err)
		}
		builds.dir = d
		builds.done = map[string]string{}
	}
	out := filepath.Join(builds.dir, strings.NewReplacer("/", "_", ".", "_").Replace(strings.Trim(pkg, "./")))
	args := []string{"build", "-o", out, pkg}
	if mode == "test" {
		out += ".test"
		args = []string{"test", "-c", "-o", out, pkg}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("harness: go %s %s: %v\n%s", mode, pkg, err, b)
	}
	builds.done[id] = out
	return out, nil
}

// RemoveBuilds deletes the binaries made by Build. Call it from TestMain after
// m.Run.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
		builds.dir = ""
		builds.done = nil
	}
}

// BuildAt compiles package pkg (for example "./cmd/coastguardd") as it was
// at git revision rev, in a temporary worktree, for mixed-version and
// rolling-upgrade tests. The binary lives with Build's and is removed by
// RemoveBuilds.
func BuildAt(rev, pkg string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("harness: git revision %q: %w", rev, err)
	}
	commit := strings.TrimSpace(string(out))
	wt, err := os.MkdirTemp("", "coastguard-rev-")
	if err != nil {
		return "", err
	}
	defer func() {
		_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", wt).Run()
		_ = os.RemoveAll(wt)
	}()
	if b, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", wt, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("harness: worktree at %s: %v: %s", commit, err, b)
	}
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "coastguard-build-")
		if err != nil {
			return "", fmt.Errorf("harness: build dir: %w", err)
		}
		builds.dir = d
		builds.done = map[string]string{}
	}
	bin := filepath.Join(builds.dir, "rev-"+commit+"-"+strings.NewReplacer("/", "_", ".", "_").Replace(strings.Trim(pkg, "./")))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = wt
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("harness: go build %s at %s: %v\n%s", pkg, commit, err, b)
	}
	return bin, nil
}
