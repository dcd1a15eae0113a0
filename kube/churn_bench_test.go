package kube

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// snapReplica keeps only the current own entries (no write log), so heap
// growth in the churn benchmark is the inventory's own.
type snapReplica struct {
	mu  sync.Mutex
	own Snapshot
}

func (s *snapReplica) Write(kind crdt.Kind, name string, value []byte, deleted bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if deleted {
		s.own.Delete(kind, name)
	} else {
		s.own.Set(kind, name, append([]byte(nil), value...))
	}
	return nil
}

func (s *snapReplica) Persisted() (Snapshot, error) { return Snapshot{}, nil }

func (s *snapReplica) pods() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.own[crdt.KindPod])
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkInventoryPodChurn replaces pods one by one (create a new pod,
// delete the oldest) at a constant population of 200 pods, end to end
// through the informer, the workqueue and the writer (in batches of 20,
// the most the fake watch buffers). heap-delta-B is the
// in-use heap after the run minus before it: it must not grow with b.N.
func BenchmarkInventoryPodChurn(b *testing.B) {
	const population = 200
	client := fake.NewClientset()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(), map[schema.GroupVersionResource]string{MCNPResource: "MultiClusterNetworkPolicyList"})
	rep := &snapReplica{own: Snapshot{}}
	inv, err := NewInventory(InventoryConfig{ClusterID: "c1", Client: client, Dynamic: dyn, Writer: rep, Persisted: rep.Persisted})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv.Start(ctx)
	if err := inv.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}
	for !hasWatch(client.Actions(), "pods") {
		time.Sleep(time.Millisecond)
	}
	go func() { _ = inv.RunWriter(ctx) }()
	pods := client.CoreV1().Pods("churn")
	create := func(i int) {
		p := runningPod("churn", fmt.Sprint("p-", i), fmt.Sprintf("10.%d.%d.%d", (i>>16)&255, (i>>8)&255, i&255), map[string]string{"app": "churn", "gen": fmt.Sprint(i % 7)})
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	waitFor := func(n int) {
		deadline := time.Now().Add(30 * time.Second)
		for rep.pods() != n || inv.Pending() != 0 {
			if time.Now().After(deadline) {
				b.Fatalf("inventory did not converge: %d pods replicated, want %d", rep.pods(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// caughtUp waits until the writer has seen pod present (or absent):
	// events are delivered in order, so everything before it was consumed.
	caughtUp := func(name string, present bool) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			rep.mu.Lock()
			_, ok := rep.own.Get(crdt.KindPod, "churn/"+name)
			rep.mu.Unlock()
			if ok == present {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("inventory never caught up with %s", name)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	for i := 0; i < population; i++ {
		create(i)
		if i%20 == 19 {
			caughtUp(fmt.Sprint("p-", i), true)
		}
	}
	waitFor(population)
	client.ClearActions()
	before := heapInUse()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		create(population + i)
		if err := pods.Delete(ctx, fmt.Sprint("p-", i), metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		if i%20 == 19 {
			// the fake's watch channel holds 100 events: let the informer catch up
			caughtUp(fmt.Sprint("p-", i), false)
		}
		if i%1000 == 999 {
			client.ClearActions() // the fake records every action
		}
	}
	waitFor(population)
	b.StopTimer()
	client.ClearActions()
	after := heapInUse()
	b.ReportMetric(float64(int64(after)-int64(before)), "heap-delta-B")
}
