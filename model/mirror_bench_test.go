package model

import (
	"fmt"
	"testing"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// BenchmarkMirrorPodRelabel is the mirror's cost of one remote pod update
// (a label change, old value replaced): decode, inventory update and the
// enforce.Change with the labels before and after (which the inventory
// returns; the old value is not decoded again).
func BenchmarkMirrorPodRelabel(b *testing.B) {
	const pods = 1000
	m := NewMirror("self")
	entry := func(i, gen int) *crdt.Entry {
		v, err := crdt.EncodeValue(&crdt.PodValue{IPs: []string{fmt.Sprintf("10.2.%d.%d", i/250, i%250)}, Phase: "Running",
			Labels: map[string]string{"app": "web", "team": fmt.Sprintf("t%d", i%10), "gen": fmt.Sprint(gen % 2)}})
		if err != nil {
			b.Fatal(err)
		}
		return &crdt.Entry{Key: crdt.Key{Origin: "c1", Kind: crdt.KindPod, Name: fmt.Sprintf("shop/web-%d", i)},
			Version: crdt.MakeVersion(1, uint64(gen*pods+i+1)), Value: v}
	}
	cur := make([]*crdt.Entry, pods)
	for i := range cur {
		cur[i] = entry(i, 0)
		m.Apply([]crdt.Change{{Key: cur[i].Key, New: cur[i]}})
	}
	next := make([][]*crdt.Entry, 2)
	for g := range next {
		next[g] = make([]*crdt.Entry, pods)
		for i := range next[g] {
			next[g][i] = entry(i, g+1)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		i, g := n%pods, (n/pods)%2
		e := next[g][i]
		m.Apply([]crdt.Change{{Key: e.Key, Old: cur[i], New: e}})
		cur[i] = e
	}
}
