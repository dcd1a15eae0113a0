package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := execute(args, &out, &errb)
	return rc, out.String(), errb.String()
}

func TestCLIHelpExitsZeroAndShowsDefaults(t *testing.T) {
	rc, out, _ := runCLI("--help")
	require.Equal(t, 0, rc)
	for _, c := range []string{"run", "render", "decommission", "version"} {
		require.Contains(t, out, "\n  "+c+" ", "root help lists %s", c)
	}

	rc, out, _ = runCLI("run", "--help")
	require.Equal(t, 0, rc)
	defaults := defaultStrings()
	n := 0
	for _, o := range options() {
		require.Contains(t, out, "--"+o.flag+" ", "run --help lists --%s", o.flag)
		// pflag prints no default that looks like a zero value ("", "0",
		// "false"), whatever the flag's type.
		if v, ok := o.fileV(&defaults); ok && v != "" && v != "0" && v != "false" {
			if o.kind() == "string" {
				v = `"` + v + `"`
			}
			require.Contains(t, out, `(default `+v+`)`, "run --help shows the default of --%s", o.flag)
			n++
		}
	}
	require.Greater(t, n, 10, "most options have a default")
	require.Contains(t, out, `--gossip-profile string`)
	require.Contains(t, out, `(default "wan")`)
	// Typed: durations and integers show as such, not as "string".
	require.Regexp(t, `--debounce duration\s.*\(default 50ms\)`, out)
	require.Regexp(t, `--max-networkpolicies-per-mcnp int\s`, out)
	require.Regexp(t, `--insecure-gossip\s{2,}`, out)
	require.NotContains(t, out, "boolFlag")

	for _, sub := range []string{"render", "decommission"} {
		rc, _, _ = runCLI(sub, "--help")
		require.Equal(t, 0, rc, "%s --help", sub)
	}
	rc, out, _ = runCLI("version")
	require.Equal(t, 0, rc)
	require.Contains(t, out, "coastguardd ")
}

func TestCLIErrors(t *testing.T) {
	rc, _, errOut := runCLI("--no-such-flag")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "unknown flag: --no-such-flag")
	rc, _, errOut = runCLI("run", "--admin-addr=10.1.2.3:9091", "--node-name=n")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "admin-addr")
	require.Contains(t, errOut, "loopback")
	rc, _, errOut = runCLI("run", "--metrics-auth=basic", "--node-name=n")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "metrics-auth")
	rc, _, _ = runCLI("nosuchcommand")
	require.Equal(t, 2, rc)
}

// Flags parsed by pflag (cobra) keep the precedence default < file < env <
// flag.
func TestConfigFlagsThroughPflag(t *testing.T) {
	env := map[string]string{"COASTGUARD_GOSSIP_PROFILE": "local", "POD_NAME": "pod-a", "COASTGUARD_INSECURE_GOSSIP": "true"}
	getenv := func(k string) string { return env[k] }
	load := func(args ...string) Config {
		cf := newConfigFlags("run", getenv)
		pfs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		pfs.AddGoFlagSet(cf.fs)
		require.NoError(t, pfs.Parse(args))
		cfg, err := cf.load(pfs.Changed)
		require.NoError(t, err)
		return cfg
	}
	require.Equal(t, "local", load().GossipProfile)
	require.Equal(t, "lan", load("--gossip-profile=lan").GossipProfile)
	require.Equal(t, "pod-a", load().NodeName)
	require.Equal(t, "127.0.0.1:9091", load().AdminAddr)
	require.Equal(t, "none", load().MetricsAuth)
}

func TestDefaultToRun(t *testing.T) {
	root := newRootCmd()
	require.Equal(t, []string{"run"}, defaultToRun(root, nil))
	require.Equal(t, []string{"run", "--seeds=x"}, defaultToRun(root, []string{"--seeds=x"}))
	require.Equal(t, []string{"--help"}, defaultToRun(root, []string{"--help"}))
	require.Equal(t, []string{"render", "--input", "x"}, defaultToRun(root, []string{"render", "--input", "x"}))
}

// The /metrics guard fails closed: no token, a rejected token, a review
// error and a denial are refused; the authorised scraper passes, and the
// authorizer sees a non-resource "get /metrics". (The real TokenReview and
// SubjectAccessReview round trip runs against an apiserver in
// test/e2e/packaging_test.go.)
func TestMetricsAuth(t *testing.T) {
	_, err := newMetricsAuth(fake.NewClientset(), slog.Default())
	require.NoError(t, err)

	var seen []authorizer.Attributes
	ma := &metricsAuth{
		log: slog.Default(),
		authn: authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
			switch r.Header.Get("Authorization") {
			case "Bearer scraper-token":
				return &authenticator.Response{User: &user.DefaultInfo{Name: "system:serviceaccount:monitoring:prometheus"}}, true, nil
			case "Bearer other-token":
				return &authenticator.Response{User: &user.DefaultInfo{Name: "alice"}}, true, nil
			case "Bearer error-token":
				return nil, false, errors.New("tokenreview: connection refused")
			}
			return nil, false, nil
		}),
		authz: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			seen = append(seen, a)
			if a.GetUser().GetName() == "system:serviceaccount:monitoring:prometheus" {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "no RBAC rule", nil
		}),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "coastguard_test_total", Help: "x"}))
	srv := newHTTPServer(":0", reg, newHealth(), nil, ma.wrap)
	get := func(path, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		srv.Handler.ServeHTTP(rec, req)
		return rec
	}
	require.Equal(t, http.StatusUnauthorized, get("/metrics", "").Code)
	require.Equal(t, http.StatusUnauthorized, get("/metrics", "forged").Code)
	require.Equal(t, http.StatusUnauthorized, get("/metrics", "error-token").Code)
	rec := get("/metrics", "other-token")
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.NotContains(t, rec.Body.String(), "coastguard_test_total")
	rec = get("/metrics", "scraper-token")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "coastguard_test_total")
	require.Len(t, seen, 2)
	require.False(t, seen[1].IsResourceRequest())
	require.Equal(t, "get", seen[1].GetVerb())
	require.Equal(t, "/metrics", seen[1].GetPath())
	// Probes stay open: the kubelet sends no token.
	require.Equal(t, http.StatusOK, get("/healthz", "").Code)
}

// workqueue.SetProvider takes effect once per process: the registry it
// got is kept for every run of the test (go test -count=N).
var (
	wqProviderOnce sync.Once
	wqProviderReg  *prometheus.Registry
	wqProviderErr  error
	wqQueueRuns    atomic.Int32
)

func TestWorkqueueMetricsProvider(t *testing.T) {
	wqProviderOnce.Do(func() {
		wqProviderReg = prometheus.NewRegistry()
		var wq *workqueueMetrics
		if wq, wqProviderErr = newWorkqueueMetrics(wqProviderReg); wqProviderErr == nil {
			workqueue.SetProvider(wq)
		}
	})
	require.NoError(t, wqProviderErr)
	reg := wqProviderReg
	name := fmt.Sprintf("coastguard-test-%d", wqQueueRuns.Add(1))
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	defer q.ShutDown()
	q.Add("a")
	it, _ := q.Get()
	q.Done(it)
	require.Equal(t, 1.0, testutil.ToFloat64(newAddsFrom(reg, t, name)))
	// a rate-limited add lands after its delay (5 ms for a first retry):
	// counted then, however slow the machine (CI failed once when the
	// assertion above ran after it had landed)
	q.AddRateLimited("b")
	require.Eventually(t, func() bool { return testutil.ToFloat64(newAddsFrom(reg, t, name)) == 2 }, 10*time.Second, 5*time.Millisecond)
}

func newAddsFrom(reg *prometheus.Registry, t *testing.T, name string) prometheus.Collector {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "workqueue_adds_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == name {
					c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x", Help: "x"})
					c.Add(m.GetCounter().GetValue())
					return c
				}
			}
		}
	}
	t.Fatalf("no workqueue_adds_total{name=%s}", name)
	return nil
}

func TestKlogRoutedThroughSlog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	routeKlog(log)
	t.Cleanup(klog.ClearLogger)
	klog.InfoS("leader election lost", "lease", "coastguard")
	klog.Flush()
	require.True(t, strings.Contains(buf.String(), `"msg":"leader election lost"`), buf.String())
	require.Contains(t, buf.String(), `"source":"client-go"`)
	require.Contains(t, buf.String(), `"lease":"coastguard"`)
}
