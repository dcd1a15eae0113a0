package kube

import (
	"bytes"
	"sort"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Snapshot is a set of this cluster's own live (non-deleted) entries by kind
// and name, each with its encoded value.
type Snapshot map[crdt.Kind]map[string][]byte

// Set records one entry, creating the kind's map when needed.
func (s Snapshot) Set(kind crdt.Kind, name string, value []byte) {
	m := s[kind]
	if m == nil {
		m = make(map[string][]byte)
		s[kind] = m
	}
	m[name] = value
}

// Get returns the value of one entry.
func (s Snapshot) Get(kind crdt.Kind, name string) ([]byte, bool) {
	v, ok := s[kind][name]
	return v, ok
}

// Delete removes one entry.
func (s Snapshot) Delete(kind crdt.Kind, name string) {
	if m := s[kind]; m != nil {
		delete(m, name)
	}
}

// Write is one local CRDT write: a new value, or a tombstone when Deleted.
type Write struct {
	Kind    crdt.Kind
	Name    string
	Value   []byte
	Deleted bool
}

// Writer receives this cluster's local writes. store.Replica's Write method
// (wrapped to drop the returned delta) satisfies it.
type Writer interface {
	Write(kind crdt.Kind, name string, value []byte, deleted bool) error
}

// WriterFunc adapts a function to Writer.
type WriterFunc func(kind crdt.Kind, name string, value []byte, deleted bool) error

// Write calls f.
func (f WriterFunc) Write(kind crdt.Kind, name string, value []byte, deleted bool) error {
	return f(kind, name, value, deleted)
}

// Diff returns the writes that turn persisted into desired for the given
// kinds: a value write for every desired entry that is missing or has
// different bytes, and a tombstone for every persisted entry that is no
// longer desired (an object deleted while the daemon was down). Kinds not in
// kinds are ignored on both sides, so entries other components own (reports)
// are never touched. The result is sorted by kind, then name.
func Diff(kinds []crdt.Kind, desired, persisted Snapshot) []Write {
	var out []Write
	seen := make(map[crdt.Kind]bool, len(kinds))
	for _, k := range kinds {
		if seen[k] {
			continue
		}
		seen[k] = true
		want, have := desired[k], persisted[k]
		for name, v := range want {
			if old, ok := have[name]; ok && bytes.Equal(old, v) {
				continue
			}
			out = append(out, Write{Kind: k, Name: name, Value: v})
		}
		for name := range have {
			if _, ok := want[name]; !ok {
				out = append(out, Write{Kind: k, Name: name, Deleted: true})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// OwnSnapshot collects origin's live entries of the given kinds from a
// crdt.State (the daemon calls it inside store.Replica.View to build
// InventoryConfig.Persisted). Tombstones are skipped; values are copied, so
// the snapshot stays valid after the view's lock is released.
func OwnSnapshot(s *crdt.State, origin string, kinds []crdt.Kind) Snapshot {
	out := Snapshot{}
	for _, k := range kinds {
		m := make(map[string][]byte)
		s.Range(origin, k, func(e crdt.Entry) bool {
			if !e.Deleted {
				m[e.Name] = append([]byte(nil), e.Value...)
			}
			return true
		})
		out[k] = m
	}
	return out
}

// fullSyncBatch bounds the writes of one WriteBatch call during a full sync.
const fullSyncBatch = 512

// BatchWriter is optionally implemented by a Writer that can make many
// writes durable at once (store.Replica.WriteMany: one fsync). WriteBatch
// returns one error slot per write (nil = written).
type BatchWriter interface {
	WriteBatch(ws []Write) []error
}
