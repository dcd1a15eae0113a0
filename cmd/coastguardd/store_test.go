package main

import (
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/store"
)

// stateFile writes a small state file: two pods, a tombstone and a
// namespace of eu-1, a namespace of eu-10.
func stateFile(t *testing.T) (string, *store.Replica) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	peer := crdt.NewState("eu-1")
	require.NoError(t, peer.SetEpoch(1))
	write := func(st *crdt.State, kind crdt.Kind, name string, v crdt.Value, deleted bool) {
		var b []byte
		if !deleted {
			var err error
			b, err = crdt.EncodeValue(v)
			require.NoError(t, err)
		}
		_, _, err := st.Write(kind, name, b, deleted, 1)
		require.NoError(t, err)
	}
	write(peer, crdt.KindPod, "shop/a", &crdt.PodValue{Labels: map[string]string{"app": "web"}, IPs: []string{"10.1.0.1"}}, false)
	write(peer, crdt.KindPod, "shop/b", &crdt.PodValue{IPs: []string{"10.1.0.2"}}, false)
	write(peer, crdt.KindPod, "shop/gone", &crdt.PodValue{}, false)
	write(peer, crdt.KindPod, "shop/gone", nil, true)
	write(peer, crdt.KindNamespace, "shop", &crdt.NamespaceValue{}, false)
	other := crdt.NewState("eu-10")
	require.NoError(t, other.SetEpoch(1))
	write(other, crdt.KindNamespace, "shop", &crdt.NamespaceValue{}, false)
	r, err := store.OpenReplica(path, "", store.Options{})
	require.NoError(t, err)
	_, err = r.Apply(append(peer.DeltaSince(r.Digest(), 0), other.DeltaSince(r.Digest(), 0)...)...)
	require.NoError(t, err)
	return path, r
}

func TestStoreGetOffline(t *testing.T) {
	path, r := stateFile(t)
	rc, _, errOut := runCLI("store", "get", "--prefix", "/coastguard/eu-1/", "--file", path, "--timeout", "100ms")
	require.Equal(t, 1, rc)
	require.Contains(t, errOut, "locked by another process")
	require.Contains(t, errOut, "--daemon", "the error says what to do")
	require.NoError(t, r.Close())

	rc, out, errOut := runCLI("store", "get", "--prefix", "/coastguard/eu-1/pod/shop/", "--file", path)
	require.Equal(t, 0, rc, errOut)
	require.Equal(t, []string{
		"/coastguard/eu-1/pod/shop/a", `{"version":"1.1","value":{"Format":1,"Labels":{"app":"web"},"IPs":["10.1.0.1"],"Phase":"","HostNetwork":false,"Ports":null,"EgressIPs":null,"NotReady":false}}`,
		"/coastguard/eu-1/pod/shop/b", `{"version":"1.2","value":{"Format":1,"Labels":null,"IPs":["10.1.0.2"],"Phase":"","HostNetwork":false,"Ports":null,"EgressIPs":null,"NotReady":false}}`,
		"/coastguard/eu-1/pod/shop/gone", `{"version":"1.4","deleted":true}`,
	}, nonEmptyLines(out))

	rc, out, _ = runCLI("store", "get", "--prefix", "/coastguard/eu-1", "--keys-only", "--file", path)
	require.Equal(t, 0, rc)
	require.Equal(t, []string{"/coastguard/eu-1/namespace/shop", "/coastguard/eu-1/pod/shop/a", "/coastguard/eu-1/pod/shop/b",
		"/coastguard/eu-1/pod/shop/gone", "/coastguard/eu-10/namespace/shop"}, nonEmptyLines(out), "a byte prefix, as etcd")

	rc, out, _ = runCLI("store", "get", "--prefix", "/coastguard/", "--keys-only", "--limit", "2", "--file", path)
	require.Equal(t, 0, rc)
	require.Len(t, nonEmptyLines(out), 2)

	rc, out, _ = runCLI("store", "get", "/coastguard/eu-1/pod/shop/a", "--keys-only", "--file", path)
	require.Equal(t, 0, rc)
	require.Equal(t, []string{"/coastguard/eu-1/pod/shop/a"}, nonEmptyLines(out), "without --prefix: the exact key")

	rc, _, _ = runCLI("store", "get", "/x", "--limit", "-1", "--file", path)
	require.Equal(t, 2, rc)
	rc, _, errOut = runCLI("store", "get", "/x", "--file", filepath.Join(t.TempDir(), "none.db"))
	require.Equal(t, 1, rc)
	require.Contains(t, errOut, "does not exist")
}

// Through the daemon: the admin endpoint prints what the offline command
// prints, to loopback only.
func TestStoreGetThroughAdminEndpoint(t *testing.T) {
	_, r := stateFile(t)
	defer r.Close()
	admin := newAdminServer("127.0.0.1:0", adminHandler{scan: r.Store().Scan}, slog.Default())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = admin.Serve(ln) }()
	defer admin.Close()

	rc, out, errOut := runCLI("store", "get", "--daemon", "--admin-addr", ln.Addr().String(), "--prefix", "/coastguard/eu-1/pod/", "--limit", "1")
	require.Equal(t, 0, rc, errOut)
	require.Equal(t, []string{"/coastguard/eu-1/pod/shop/a", `{"version":"1.1","value":{"Format":1,"Labels":{"app":"web"},"IPs":["10.1.0.1"],"Phase":"","HostNetwork":false,"Ports":null,"EgressIPs":null,"NotReady":false}}`}, nonEmptyLines(out))

	req, err := http.NewRequest(http.MethodGet, "/admin/store?key=/coastguard/", nil)
	require.NoError(t, err)
	req.RemoteAddr = "10.0.0.1:1234"
	rec := &recorder{header: http.Header{}}
	admin.Handler.ServeHTTP(rec, req)
	require.Equal(t, http.StatusForbidden, rec.code)

	rc, _, errOut = runCLI("store", "get", "--daemon", "--admin-addr", "127.0.0.1:1", "/coastguard/")
	require.Equal(t, 1, rc)
	require.Contains(t, errOut, "cannot reach coastguardd")
}

type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(c int)           { r.code = c }

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
