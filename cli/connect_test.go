package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: reason, Code: int32(code), Message: string(reason)})
}

// coastguardServer is an apiserver of a cluster running coastguard: its
// leader marks CoastguardCluster id local, alive, with a leader.
func coastguardServer(t *testing.T, id string) *httptest.Server {
	srv := httptest.NewServer(coastguardHandler(id))
	t.Cleanup(srv.Close)
	return srv
}

func coastguardHandler(id string) http.Handler {
	gv := v1.SchemeGroupVersion.String()
	cc := v1.CoastguardCluster{TypeMeta: metav1.TypeMeta{APIVersion: gv, Kind: "CoastguardCluster"}, ObjectMeta: metav1.ObjectMeta{Name: id}}
	cc.Status.Local, cc.Status.Leader, cc.Status.AliveMembers, cc.Status.SoftwareVersion = true, "pod-1", 1, "v9.9.9"
	cc.Status.Conditions = []metav1.Condition{{Type: v1.ClusterConditionAlive, Status: metav1.ConditionTrue, Reason: "Alive", LastTransitionTime: metav1.Now()}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list := func(kind string, items ...any) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": gv, "kind": kind, "metadata": map[string]any{}, "items": items})
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/"+v1.CoastguardClusterResource):
			list("CoastguardClusterList", cc)
		case strings.HasSuffix(r.URL.Path, "/"+v1.GroupVersionResource.Resource):
			list("MultiClusterNetworkPolicyList")
		default:
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound)
		}
	})
}

// kubeconfig writes a kubeconfig with one context, cluster and user per
// server, and returns its path.
func kubeconfig(t *testing.T, servers map[string]string) string {
	cfg := clientcmdapi.NewConfig()
	for name, url := range servers {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: url}
		cfg.AuthInfos["user-"+name] = &clientcmdapi.AuthInfo{Token: "t"}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "user-" + name}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

func testOptions(path string) (*Options, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	f := newConfigFlags()
	timeout := "500ms"
	f.KubeConfig, f.Timeout = &path, &timeout
	return &Options{Flags: f, Namespace: "coastguard-system", Output: "text", Out: &out, ErrOut: &errOut}, &out, &errOut
}

// A merged kubeconfig with a context the apiserver refuses (401), one that
// never answers, one without coastguard and one that works: status answers
// within seconds, reports the working cluster, names each failed context
// with its fix, skips the unrelated one, and exits unhealthy.
func TestStatusOnMixedKubeconfig(t *testing.T) {
	var unauthCalls atomic.Int32
	unauth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		unauthCalls.Add(1)
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized)
	}))
	defer unauth.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer hang.Close()
	unrelated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound)
	}))
	defer unrelated.Close()
	good := coastguardServer(t, "eu-1")
	path := kubeconfig(t, map[string]string{"eu-1": good.URL, "eu-2": unauth.URL, "eu-3": hang.URL, "kind-dev": unrelated.URL})
	o, out, _ := testOptions(path)

	start := time.Now()
	err := o.runStatus(context.Background(), false, time.Minute)
	took := time.Since(start)
	assert.Less(t, took, 3*time.Second, "no retries, one timeout per context in parallel")
	assert.Equal(t, int32(1), unauthCalls.Load(), "status without --wait asks once")
	require.Error(t, err)
	assert.Equal(t, ExitUnhealthy, ExitCode(err))
	text := out.String()
	assert.Contains(t, text, "VIEW FROM eu-1 (context eu-1)")
	assert.Contains(t, text, "v9.9.9")
	assert.Contains(t, text, `context eu-2: the apiserver `+unauth.URL+` rejected the credentials of user "user-eu-2" (401 Unauthorized)`)
	assert.Contains(t, text, "unique name")
	assert.Contains(t, text, "context eu-3: the apiserver "+hang.URL+" did not answer within 500ms")
	assert.Contains(t, text, "--request-timeout")
	assert.Contains(t, text, "skipped context kind-dev: no coastguard install")
	assert.Contains(t, text, "\n2 problem(s):\n", "a skipped context is not a problem")

	// The working and the unrelated context alone: healthy, exit 0.
	o, out, _ = testOptions(path)
	o.Contexts = nil
	*o.Flags.KubeConfig = kubeconfig(t, map[string]string{"eu-1": good.URL, "kind-dev": unrelated.URL})
	require.NoError(t, o.runStatus(context.Background(), false, time.Minute))
	assert.Contains(t, out.String(), "cluster set healthy")

	// Naming an unrelated context explicitly makes it an error.
	o, _, _ = testOptions(path)
	o.Contexts = []string{"kind-dev"}
	err = o.runStatus(context.Background(), false, time.Minute)
	assert.Equal(t, ExitUnhealthy, ExitCode(err))
}

// Other commands go on with the contexts that work, warning about the rest;
// with none working they fail fast with every context's reason.
func TestConnectKeepsWorkingContexts(t *testing.T) {
	unauth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized)
	}))
	defer unauth.Close()
	good := coastguardServer(t, "eu-1")
	o, _, errOut := testOptions(kubeconfig(t, map[string]string{"a": good.URL, "b": unauth.URL}))
	ms, err := o.connect(context.Background())
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, "eu-1", ms[0].ID)
	assert.Contains(t, errOut.String(), "warning: context b: the apiserver")

	o, _, _ = testOptions(kubeconfig(t, map[string]string{"b": unauth.URL}))
	start := time.Now()
	_, err = o.connect(context.Background())
	require.ErrorContains(t, err, "context b: the apiserver "+unauth.URL+" rejected the credentials")
	assert.Less(t, time.Since(start), time.Second)
	assert.Equal(t, 1, ExitCode(err))

	o.Contexts = []string{"nope"}
	_, err = o.connect(context.Background())
	require.ErrorContains(t, err, `context "nope" not in kubeconfig (it has: b)`)
}

func TestVerdictExitCode(t *testing.T) {
	assert.NoError(t, verdictExit(&Verdict{Allowed: true}, true))
	assert.NoError(t, verdictExit(&Verdict{Allowed: false}, false))
	err := verdictExit(&Verdict{Allowed: false}, true)
	assert.Equal(t, ExitDenied, ExitCode(err))
	assert.Empty(t, err.Error(), "the verdict is printed already")
	assert.Equal(t, 0, ExitCode(nil))
}

func TestVersionReportsClientAndClusters(t *testing.T) {
	good := coastguardServer(t, "eu-1")
	o, out, _ := testOptions(kubeconfig(t, map[string]string{"eu-1": good.URL}))
	cmd := newVersionCmd(o)
	cmd.SetArgs(nil)
	require.NoError(t, cmd.ExecuteContext(context.Background()))
	assert.Contains(t, out.String(), "client: ")
	assert.Contains(t, out.String(), "cluster eu-1: coastguardd v9.9.9\n")

	o, out, _ = testOptions(filepath.Join(t.TempDir(), "missing"))
	cmd = newVersionCmd(o)
	cmd.SetArgs([]string{"--client"})
	require.NoError(t, cmd.ExecuteContext(context.Background()))
	assert.NotContains(t, out.String(), "cluster")
}

// runPlugin runs the command tree as kubectl-coastguard does, with args.
func runPlugin(args ...string) (out string, err error) {
	var o, e bytes.Buffer
	root := newCommands(&Options{Flags: newConfigFlags(), Out: &o, ErrOut: &e})
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return o.String() + e.String(), err
}

// The kubectl flags apply to every context of the set: --as impersonates
// on each (a 403 names the impersonated user), --context picks one
// context and no other is contacted, --request-timeout bounds each.
func TestKubectlFlags(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // cluster -> Impersonate-User of each request
	record := func(id string, deny bool) http.Handler {
		h := coastguardHandler(id)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[id] = append(seen[id], r.Header.Get("Impersonate-User"))
			mu.Unlock()
			if deny && r.Header.Get("Impersonate-User") != "" {
				writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	eu1, eu2 := httptest.NewServer(record("eu-1", false)), httptest.NewServer(record("eu-2", true))
	defer eu1.Close()
	defer eu2.Close()
	hang := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hang.Close()
	path := kubeconfig(t, map[string]string{"eu-1": eu1.URL, "eu-2": eu2.URL, "eu-3": hang.URL})

	out, err := runPlugin("--kubeconfig", path, "--as", "auditor", "--contexts", "eu-1,eu-2", "status")
	assert.Equal(t, ExitUnhealthy, ExitCode(err))
	assert.Contains(t, out, "VIEW FROM eu-1 (context eu-1)")
	assert.Contains(t, out, `context eu-2: user "auditor (impersonated)" may not read coastguard's objects (403 Forbidden`)
	mu.Lock()
	assert.NotEmpty(t, seen["eu-1"])
	for id, users := range seen {
		for _, u := range users {
			assert.Equal(t, "auditor", u, "every request to %s impersonates", id)
		}
	}
	clear(seen)
	mu.Unlock()

	out, err = runPlugin("--kubeconfig", path, "--context", "eu-1", "status")
	require.NoError(t, err, out)
	assert.Contains(t, out, "cluster set healthy")
	mu.Lock()
	assert.NotEmpty(t, seen["eu-1"])
	assert.Empty(t, seen["eu-2"], "--context selects one context")
	mu.Unlock()

	_, err = runPlugin("--kubeconfig", path, "--context", "eu-1", "--contexts", "eu-1,eu-2", "status")
	require.ErrorContains(t, err, "pass only one of them")

	start := time.Now()
	out, err = runPlugin("--kubeconfig", path, "--request-timeout", "300ms", "--context", "eu-3", "status")
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, ExitUnhealthy, ExitCode(err))
	assert.Contains(t, out, "context eu-3: the apiserver "+hang.URL+" did not answer within 300ms")
}
