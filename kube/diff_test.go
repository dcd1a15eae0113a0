package kube

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

var inventoryKinds = []crdt.Kind{crdt.KindCluster, crdt.KindNamespace, crdt.KindPod, crdt.KindPolicy}

func TestDiff(t *testing.T) {
	cases := []struct {
		name      string
		kinds     []crdt.Kind
		desired   Snapshot
		persisted Snapshot
		want      []Write
	}{
		{name: "both empty", kinds: inventoryKinds},
		{name: "nil maps", kinds: inventoryKinds, desired: nil, persisted: nil},
		{
			name: "first start writes everything", kinds: inventoryKinds,
			desired: Snapshot{crdt.KindPod: {"a/p2": []byte("2"), "a/p1": []byte("1")}, crdt.KindCluster: {"": []byte("c")}},
			want: []Write{
				{Kind: crdt.KindCluster, Name: "", Value: []byte("c")},
				{Kind: crdt.KindPod, Name: "a/p1", Value: []byte("1")},
				{Kind: crdt.KindPod, Name: "a/p2", Value: []byte("2")},
			},
		},
		{
			name: "unchanged is a no-op", kinds: inventoryKinds,
			desired:   Snapshot{crdt.KindPod: {"a/p1": []byte("1")}, crdt.KindNamespace: {"a": []byte("n")}},
			persisted: Snapshot{crdt.KindPod: {"a/p1": []byte("1")}, crdt.KindNamespace: {"a": []byte("n")}},
		},
		{
			name: "deleted while down becomes tombstone", kinds: inventoryKinds,
			desired:   Snapshot{crdt.KindPod: {"a/p1": []byte("1")}},
			persisted: Snapshot{crdt.KindPod: {"a/p1": []byte("1"), "a/gone": []byte("g")}, crdt.KindNamespace: {"a": []byte("n")}},
			want: []Write{
				{Kind: crdt.KindNamespace, Name: "a", Deleted: true},
				{Kind: crdt.KindPod, Name: "a/gone", Deleted: true},
			},
		},
		{
			name: "changed while down is rewritten", kinds: inventoryKinds,
			desired:   Snapshot{crdt.KindPolicy: {"a/pol": []byte("v2")}},
			persisted: Snapshot{crdt.KindPolicy: {"a/pol": []byte("v1")}},
			want:      []Write{{Kind: crdt.KindPolicy, Name: "a/pol", Value: []byte("v2")}},
		},
		{
			name: "empty value differs from absent", kinds: inventoryKinds,
			desired: Snapshot{crdt.KindPod: {"a/p": []byte{}}},
			want:    []Write{{Kind: crdt.KindPod, Name: "a/p", Value: []byte{}}},
		},
		{
			name: "kinds outside the list are left alone", kinds: []crdt.Kind{crdt.KindPod},
			desired:   Snapshot{crdt.KindNamespace: {"new": []byte("n")}},
			persisted: Snapshot{crdt.KindReport: {"c2/a/p": []byte("r")}, crdt.KindNamespace: {"old": []byte("o")}, crdt.KindPod: {"a/x": []byte("x")}},
			want:      []Write{{Kind: crdt.KindPod, Name: "a/x", Deleted: true}},
		},
		{
			name: "duplicate kinds are handled once", kinds: []crdt.Kind{crdt.KindPod, crdt.KindPod},
			desired: Snapshot{crdt.KindPod: {"a/p": []byte("1")}},
			want:    []Write{{Kind: crdt.KindPod, Name: "a/p", Value: []byte("1")}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Diff(tc.kinds, tc.desired, tc.persisted)
			assert.Equal(t, tc.want, got)
		})
	}
}

// applyWrites replays writes on a snapshot, as the replica would.
func applyWrites(s Snapshot, ws []Write) {
	for _, w := range ws {
		if w.Deleted {
			s.Delete(w.Kind, w.Name)
		} else {
			s.Set(w.Kind, w.Name, w.Value)
		}
	}
}

func TestDiffConverges(t *testing.T) {
	desired, persisted := Snapshot{}, Snapshot{}
	for i := 0; i < 200; i++ {
		n := fmt.Sprintf("ns/p%03d", i)
		if i%3 != 0 {
			desired.Set(crdt.KindPod, n, []byte(fmt.Sprint(i)))
		}
		if i%2 == 0 {
			persisted.Set(crdt.KindPod, n, []byte(fmt.Sprint(i%5)))
		}
	}
	persisted.Set(crdt.KindReport, "x", []byte("r"))
	ws := Diff(inventoryKinds, desired, persisted)
	applyWrites(persisted, ws)
	assert.Empty(t, Diff(inventoryKinds, desired, persisted), "second diff must be empty")
	assert.Equal(t, desired[crdt.KindPod], persisted[crdt.KindPod])
	_, ok := persisted.Get(crdt.KindReport, "x")
	assert.True(t, ok)
}

func BenchmarkDiff(b *testing.B) {
	desired, persisted := Snapshot{}, Snapshot{}
	for i := 0; i < 10000; i++ {
		n := fmt.Sprintf("ns%d/pod-%d", i%50, i)
		v := []byte(fmt.Sprintf("value-%d-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", i))
		desired.Set(crdt.KindPod, n, v)
		if i%100 != 0 {
			persisted.Set(crdt.KindPod, n, v)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(Diff(inventoryKinds, desired, persisted)) != 100 {
			b.Fatal("unexpected diff")
		}
	}
}

func TestOwnSnapshotFromState(t *testing.T) {
	s := crdt.NewState("c1")
	require.NoError(t, s.SetEpoch(s.MinEpoch()))
	write := func(kind crdt.Kind, name, v string, del bool) {
		var b []byte
		if !del {
			b = []byte(v)
		}
		_, _, err := s.Write(kind, name, b, del, 1)
		require.NoError(t, err)
	}
	write(crdt.KindPod, "a/p1", "1", false)
	write(crdt.KindPod, "a/p2", "2", false)
	write(crdt.KindPod, "a/p2", "", true)
	write(crdt.KindNamespace, "a", "n", false)
	write(crdt.KindReport, "c2/a/x", "r", false)
	snap := OwnSnapshot(s, "c1", InventoryKinds)
	assert.Equal(t, map[string][]byte{"a/p1": []byte("1")}, snap[crdt.KindPod], "tombstones skipped")
	assert.Equal(t, map[string][]byte{"a": []byte("n")}, snap[crdt.KindNamespace])
	assert.NotContains(t, snap, crdt.KindReport)
	assert.Empty(t, OwnSnapshot(s, "other", InventoryKinds)[crdt.KindPod])
	// the join flow on real state: p1 vanished, p3 appeared
	ws := Diff(InventoryKinds, Snapshot{crdt.KindPod: {"a/p3": []byte("3")}, crdt.KindNamespace: {"a": []byte("n")}}, snap)
	assert.Equal(t, []Write{{Kind: crdt.KindPod, Name: "a/p1", Deleted: true}, {Kind: crdt.KindPod, Name: "a/p3", Value: []byte("3")}}, ws)
}
