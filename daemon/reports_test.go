package daemon

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// fakeReports is an own-report store whose write function updates it, so
// the reporter sees its own writes like it does through the replica.
type fakeReports struct {
	entries map[string]crdt.Entry
	writes  []string // "key" or "-key" for a tombstone
}

func (f *fakeReports) Report(key string) (crdt.Entry, bool) {
	e, ok := f.entries[key]
	return e, ok
}

func (f *fakeReports) Live() []string {
	var keys []string
	for k, e := range f.entries {
		if !e.Deleted {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func (f *fakeReports) write(kind crdt.Kind, name string, value []byte, deleted bool) error {
	if kind != crdt.KindReport {
		panic("reporter wrote a non-report")
	}
	f.entries[name] = crdt.Entry{Key: crdt.Key{Origin: "b", Kind: kind, Name: name}, Value: value, Deleted: deleted}
	if deleted {
		name = "-" + name
	}
	f.writes = append(f.writes, name)
	return nil
}

func TestReporterReconciles(t *testing.T) {
	st := &fakeReports{entries: map[string]crdt.Entry{}}
	active := true
	r := newReporter(st, st.write, func() bool { return active }, discard)
	rep := func(gen int64) crdt.ReportValue { return crdt.ReportValue{ObservedGeneration: gen} }

	// incremental: writes and tombstones only the given keys
	r.Publish([]reportWrite{{pref("a/ns/p1"), rep(1), true}, {pref("a/ns/p2"), rep(1), true}, {pref("a/ns/p3"), rep(1), true}}, false)
	require.Equal(t, []string{"a/ns/p1", "a/ns/p2", "a/ns/p3"}, st.writes)

	// same content again: no write
	st.writes = nil
	r.Publish([]reportWrite{{pref("a/ns/p1"), rep(1), true}}, false)
	require.Empty(t, st.writes)

	// full reconciliation: p1 changed, p2 no longer selects us, p3 vanished
	r.Publish([]reportWrite{{pref("a/ns/p1"), rep(2), true}, {pref("a/ns/p2"), crdt.ReportValue{}, false}}, true)
	require.Equal(t, []string{"a/ns/p1", "-a/ns/p2", "-a/ns/p3"}, st.writes)
	require.Equal(t, []string{"a/ns/p1"}, st.Live())

	// tombstoning what is already gone writes nothing
	st.writes = nil
	r.Publish([]reportWrite{{pref("a/ns/p1"), rep(2), true}}, true)
	r.Publish([]reportWrite{{pref("a/ns/p9"), crdt.ReportValue{}, false}}, false)
	require.Empty(t, st.writes)

	// a standby (or a decommissioned cluster) writes no reports
	active = false
	r.Publish([]reportWrite{{pref("a/ns/p4"), rep(1), true}}, true)
	require.Empty(t, st.writes)
	require.Equal(t, []string{"a/ns/p1"}, st.Live())
}
