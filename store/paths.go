package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// PathRoot starts the path of every entry.
//
// Entry paths follow the proposal's etcd key scheme: the entries bucket is
// keyed by (origin, kind, name), and a pod's name is "namespace/pod", so
//
//	/coastguard/<origin>/<kind>/<name>     e.g. /coastguard/eu-1/pod/shop/frontend-1
//
// and the proposal's "pods of cluster X in namespace Y" is the prefix
// /coastguard/X/pod/Y/, a range of the primary key order: one seek and a
// cursor walk, no index (docs/ARCHITECTURE.md, "Entry paths").
const PathRoot = "/coastguard/"

// ErrLocked is returned by OpenReadOnly when another process (a running
// coastguardd) holds the file.
var ErrLocked = errors.New("store: file is locked by another process")

// Path returns the path of an entry key.
func Path(k crdt.Key) string {
	return PathRoot + k.Origin + "/" + k.Kind.String() + "/" + k.Name
}

// kindByName is the inverse of crdt.Kind.String, opaque kinds included.
func kindByName(name string) (crdt.Kind, bool) {
	for _, s := range crdt.Kinds() {
		if s.Name == name {
			return s.Kind, true
		}
	}
	if n, ok := strings.CutPrefix(name, "kind("); ok {
		if v, err := strconv.ParseUint(strings.TrimSuffix(n, ")"), 10, 8); err == nil && strings.HasSuffix(n, ")") && v > 0 {
			return crdt.Kind(v), true
		}
	}
	return 0, false
}

// seekPrefix returns the longest prefix of the bbolt entry keys whose
// paths can start with prefix: the scan seeks there and stops at the first
// key without it. Whole components (followed by '/') end in their
// terminator; a partial origin or name is its escaped bytes alone.
func seekPrefix(prefix string) []byte {
	rest, ok := strings.CutPrefix(prefix, PathRoot)
	if !ok {
		return nil // shorter than the root: every entry is a candidate
	}
	origin, rest, whole := strings.Cut(rest, "/")
	if !whole {
		return partialComponent(nil, origin)
	}
	key := appendComponent(nil, origin)
	kindName, name, whole := strings.Cut(rest, "/")
	kind, known := kindByName(kindName)
	if !whole || !known {
		return key // a partial kind name: filter the origin's entries
	}
	key = appendComponent(key, string([]byte{byte(kind)}))
	return partialComponent(key, name)
}

// partialComponent appends c's encoding without its terminator: a prefix
// of the encoding of every component that starts with c.
func partialComponent(dst []byte, c string) []byte {
	dst = appendComponent(dst, c)
	return dst[:len(dst)-termSize]
}

// scanEntries calls fn, in key order (origin, kind number, name), for at
// most limit (0: no limit) stored entries whose Path starts with prefix,
// tombstones included. e.Value and e.Sig alias the transaction's pages and
// are valid only during fn.
func scanEntries(tx *bolt.Tx, prefix string, limit int, fn func(path string, e crdt.Entry) error) error {
	b := tx.Bucket(bucketEntries)
	if b == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketEntries)
	}
	seek := seekPrefix(prefix)
	c := b.Cursor()
	n := 0
	for k, v := c.Seek(seek); k != nil && bytes.HasPrefix(k, seek); k, v = c.Next() {
		key, err := decodeEntryKey(k)
		if err != nil {
			return fmt.Errorf("%w: entry key %x: %v", ErrCorrupt, k, err)
		}
		path := Path(key)
		if !strings.HasPrefix(path, prefix) {
			continue
		}
		e := crdt.Entry{Key: key}
		if err := decodeRecord(k, v, &e); err != nil {
			return fmt.Errorf("%w: entry %s: %v", ErrCorrupt, key, err)
		}
		if err := fn(path, e); err != nil {
			return err
		}
		if n++; limit > 0 && n >= limit {
			return nil
		}
	}
	return nil
}

// Scan calls fn for the stored entries whose Path starts with prefix (see
// scanEntries), in one read transaction, concurrently with commits.
func (s *Store) Scan(prefix string, limit int, fn func(path string, e crdt.Entry) error) (err error) {
	defer s.noteCorrupt(&err)
	defer guardRead(&err)()
	return s.db.View(func(tx *bolt.Tx) error { return scanEntries(tx, prefix, limit, fn) })
}

// ReadOnly is a store file opened for reading only (`coastguardd store
// get`): no check, no load, no writes. bbolt locks the file shared, so it
// can be open in several readers, but not while a daemon holds it.
type ReadOnly struct{ db *bolt.DB }

// OpenReadOnly opens an existing store file read-only, waiting at most
// timeout for the lock. A file held by a running daemon fails with an
// error wrapping ErrLocked.
func OpenReadOnly(path string, timeout time.Duration) (*ReadOnly, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout})
	switch {
	case err == nil:
		return &ReadOnly{db: db}, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s (waited %s)", ErrLocked, path, timeout)
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("store: %s does not exist", path)
	}
	return nil, fmt.Errorf("store: open %s read-only: %w", path, err)
}

// Scan is Store.Scan on the read-only file.
func (r *ReadOnly) Scan(prefix string, limit int, fn func(path string, e crdt.Entry) error) (err error) {
	defer guardRead(&err)()
	return r.db.View(func(tx *bolt.Tx) error { return scanEntries(tx, prefix, limit, fn) })
}

// Close releases the file.
func (r *ReadOnly) Close() error { return r.db.Close() }
