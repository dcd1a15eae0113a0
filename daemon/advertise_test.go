package daemon

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

type readiness struct {
	mu     sync.Mutex
	checks map[string]error
}

func (r *readiness) set(name string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[name] = err
}

func (r *readiness) get(name string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.checks[name]
	return err, ok
}

func podIngressIP(allocated string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1", "kind": "GlobalIngressIP",
		"metadata": map[string]any{"name": "pod-cg-0", "namespace": "cg"},
		"spec": map[string]any{"target": "HeadlessServicePod", "serviceRef": map[string]any{"name": "coastguard"},
			"podRef": map[string]any{"name": "cg-0"}},
		"status": map[string]any{"allocatedIP": allocated},
	}}
}

// TestAdvertiseGlobalIPFailsClosed: with --advertise-global-ip the daemon
// does not get an address to join with (not ready, metric 0, a problem per
// reason) until its pod's GlobalIngressIP holds an IP of its global CIDR;
// then it advertises exactly that IP; when the IP changes it stops with an
// error naming both addresses.
func TestAdvertiseGlobalIPFailsClosed(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kube.GlobalIngressIPGVR: "GlobalIngressIPList"})
	reg, ready := prometheus.NewRegistry(), &readiness{checks: map[string]error{}}
	d, err := New(Options{ClusterID: "c1", NodeName: "cg-0", Namespace: "cg", Client: fake.NewClientset(), Dynamic: dyn,
		Registry: reg, Ready: ready.set, AdvertiseGlobalIPOf: "cg-0",
		ClusterCIDRs: enforce.Networks{"c1": {GlobalCIDRs: []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.stop = cancel
	// Created before the daemon looks: the fake client's watch misses
	// events between its list and its watch, a real apiserver does not.
	res := dyn.Resource(kube.GlobalIngressIPGVR).Namespace("cg")
	obj, err := res.Create(ctx, podIngressIP("242.2.0.9"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.advertiseGlobalIP(ctx) }()
	eventually(t, func() bool {
		return testutil.ToFloat64(d.advertiseProblems(t, reg, "outside_global_cidr")) == 1
	})
	if err, _ := ready.get(ReadyAdvertise); err == nil || !strings.Contains(err.Error(), "not joining") || !strings.Contains(err.Error(), "cg/pod-cg-0") {
		t.Fatalf("readiness %v should say the daemon does not join and name the object", err)
	}
	time.Sleep(200 * time.Millisecond) // the fake's watch is established
	select {
	case err := <-done:
		t.Fatalf("advertised an address outside the global CIDR (returned %v, addr %q)", err, d.opts.Gossip.AdvertiseAddr)
	default:
	}
	obj.Object["status"] = map[string]any{"allocatedIP": "242.1.0.9"}
	if obj, err = res.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || d.opts.Gossip.AdvertiseAddr != "242.1.0.9" {
			t.Fatalf("advertiseGlobalIP = %v, advertise addr %q; want 242.1.0.9", err, d.opts.Gossip.AdvertiseAddr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the allocated global IP was not taken")
	}
	if err, _ := ready.get(ReadyAdvertise); err != nil {
		t.Fatalf("readiness %v after allocation", err)
	}
	obj.Object["status"] = map[string]any{"allocatedIP": "242.1.0.10"}
	if _, err = res.Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return ctx.Err() != nil })
	if err := d.fatal(); err == nil || !strings.Contains(err.Error(), "242.1.0.9") || !strings.Contains(err.Error(), "242.1.0.10") {
		t.Fatalf("fatal error %v should name the advertised and the new IP", err)
	}
}

// advertiseProblems returns the problems counter of a reason (registered
// by advertiseGlobalIP in reg).
func (d *Daemon) advertiseProblems(t *testing.T, reg *prometheus.Registry, reason string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "coastguard_globalnet_advertise_problems_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				c.Add(m.GetCounter().GetValue())
			}
		}
	}
	return c
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
