package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/daemon"
	"github.com/coastguard-mcnp/coastguard/store"
)

func init() { commands = append(commands, newStoreCmd) }

// storeQuery is one `store get`: a key or a prefix, and the output shape.
type storeQuery struct {
	key      string
	prefix   bool
	keysOnly bool
	limit    int
}

// newStoreCmd is `coastguardd store get`: the local bbolt mirror read like
// etcd (`etcdctl get --prefix`), offline on the file or through the running
// daemon's loopback admin endpoint (docs/OPERATIONS.md, "Reading the local
// state").
func newStoreCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "store",
		Short: "read the local state file (the bbolt mirror of the replicated entries)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(newStoreGetCmd())
	return c
}

func newStoreGetCmd() *cobra.Command {
	var q storeQuery
	var dataDir, file, addr string
	var fromDaemon bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "get KEY [--prefix] [--keys-only] [--limit N] [--daemon]",
		Short: "print the entries at KEY (/coastguard/<cluster>/<kind>/<name>), or under it with --prefix",
		Long: "Print replicated entries as their key and their decoded value (JSON), like etcdctl get. " +
			"Keys are /coastguard/<cluster>/<kind>/<name>: e.g. --prefix /coastguard/eu-1/pod/shop/ lists the pods of " +
			"namespace shop in cluster eu-1. Without --daemon the state file is opened read-only; a running daemon " +
			"holds it locked, so inside a daemon pod use --daemon (its loopback admin endpoint).",
		Example: "  coastguardd store get --prefix /coastguard/eu-1/pod/shop/ --data-dir /var/lib/coastguard\n" +
			"  kubectl -n coastguard-system exec ds/coastguard -- coastguardd store get --daemon --prefix /coastguard/ --keys-only",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q.key = args[0]
			if q.limit < 0 {
				return usageError(cmd, "--limit must not be negative")
			}
			if fromDaemon {
				return failed(cmd, 1, storeGetFromDaemon(cmd.Context(), cmd.OutOrStdout(), addr, q, timeout))
			}
			if file == "" {
				file = filepath.Join(dataDir, daemon.StateFile)
			}
			return failed(cmd, 1, storeGetFromFile(cmd.OutOrStdout(), file, q, timeout))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&q.prefix, "prefix", false, "KEY is a prefix: print every entry whose key starts with it")
	f.BoolVar(&q.keysOnly, "keys-only", false, "print the keys only")
	f.IntVar(&q.limit, "limit", 0, "print at most this many entries (0: all)")
	f.StringVar(&dataDir, "data-dir", envOr("COASTGUARD_DATA_DIR", "/var/lib/coastguard"), "the daemon's data directory (env COASTGUARD_DATA_DIR)")
	f.StringVar(&file, "file", "", "the state file (default <data-dir>/"+daemon.StateFile+")")
	f.BoolVar(&fromDaemon, "daemon", false, "ask the running daemon (its admin endpoint) instead of opening the file")
	f.StringVar(&addr, "admin-addr", envOr("COASTGUARD_ADMIN_ADDR", "127.0.0.1:9091"), "loopback admin address of the running coastguardd (with --daemon; env COASTGUARD_ADMIN_ADDR)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the file lock, or for the daemon")
	return cmd
}

// storeGetFromFile answers q from a read-only open of the state file.
func storeGetFromFile(w io.Writer, file string, q storeQuery, timeout time.Duration) error {
	ro, err := store.OpenReadOnly(file, timeout)
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%w: a running coastguardd holds it; ask it with --daemon (from inside its pod)", err)
	}
	if err != nil {
		return err
	}
	// Read-only: closing cannot lose anything.
	defer func() { _ = ro.Close() }()
	return writeEntries(w, ro.Scan, q)
}

// storeGetFromDaemon answers q through the daemon's /admin/store endpoint,
// which writes the same output as writeEntries.
func storeGetFromDaemon(ctx context.Context, w io.Writer, addr string, q storeQuery, timeout time.Duration) error {
	host := addr
	if strings.HasPrefix(host, ":") {
		host = "127.0.0.1" + host
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/admin/store?"+q.values().Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach coastguardd at %s: %w", host, err)
	}
	// The body is read below; closing it only releases the connection.
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("store get failed (%s): %s", resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// values encodes q for /admin/store.
func (q storeQuery) values() url.Values {
	v := url.Values{"key": {q.key}}
	if q.prefix {
		v.Set("prefix", "1")
	}
	if q.keysOnly {
		v.Set("keys-only", "1")
	}
	if q.limit > 0 {
		v.Set("limit", strconv.Itoa(q.limit))
	}
	return v
}

// parseStoreQuery decodes values.
func parseStoreQuery(v url.Values) (storeQuery, error) {
	q := storeQuery{key: v.Get("key"), prefix: v.Get("prefix") == "1", keysOnly: v.Get("keys-only") == "1"}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return q, fmt.Errorf("bad limit %q", l)
		}
		q.limit = n
	}
	return q, nil
}

// scanFunc is store.Store.Scan or store.ReadOnly.Scan.
type scanFunc func(prefix string, limit int, fn func(path string, e crdt.Entry) error) error

// entryJSON is the printed value of an entry.
type entryJSON struct {
	Version string `json:"version"`
	Deleted bool   `json:"deleted,omitempty"`
	Value   any    `json:"value,omitempty"`
	// Undecoded says why Value is missing from a live entry (a kind this
	// build does not know, or bytes that do not decode).
	Undecoded string `json:"undecoded,omitempty"`
}

// writeEntries prints the answer to q, etcdctl style: per entry its key,
// then (unless keysOnly) its version and decoded value as one JSON line.
func writeEntries(w io.Writer, scan scanFunc, q storeQuery) error {
	limit := q.limit
	if !q.prefix {
		limit = 0 // the exact key is filtered below
	}
	return scan(q.key, limit, func(path string, e crdt.Entry) error {
		if !q.prefix && path != q.key {
			return nil
		}
		if _, err := fmt.Fprintln(w, path); err != nil || q.keysOnly {
			return err
		}
		b, err := json.Marshal(entryValue(e))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	})
}

// entryValue decodes e for printing.
func entryValue(e crdt.Entry) entryJSON {
	out := entryJSON{Version: e.Version.String(), Deleted: e.Deleted}
	if e.Deleted {
		return out
	}
	v, err := crdt.DecodeKind(e.Kind, e.Value)
	if err != nil {
		out.Undecoded = err.Error()
		return out
	}
	out.Value = v
	return out
}

// serveStoreGet answers GET /admin/store?key=K[&prefix=1][&keys-only=1][&limit=N]
// with writeEntries' output. An error after the first entry can only end
// the body early, so the answer is built first and sent whole.
func serveStoreGet(w http.ResponseWriter, r *http.Request, scan scanFunc) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	if scan == nil {
		http.Error(w, "not available", http.StatusServiceUnavailable)
		return
	}
	q, err := parseStoreQuery(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var buf strings.Builder
	if err := writeEntries(&buf, scan, q); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, buf.String())
}
