package kube

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
)

// globalIngressIP builds the object Globalnet creates for a headless
// Service's backend pod.
func globalIngressIP(ns, pod, target, podRef, allocated string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1", "kind": "GlobalIngressIP",
		"metadata": map[string]any{"name": GlobalIngressIPName(pod), "namespace": ns},
		"spec": map[string]any{"target": target, "serviceRef": map[string]any{"name": "coastguard"},
			"podRef": map[string]any{"name": podRef}},
	}}
	if allocated != "" {
		u.Object["status"] = map[string]any{"allocatedIP": allocated}
	}
	return u
}

func TestGlobalIngressIPNameTruncatesAsGlobalnet(t *testing.T) {
	if got := GlobalIngressIPName("coastguard-abcde"); got != "pod-coastguard-abcde" {
		t.Fatalf("name %q", got)
	}
	long := strings.Repeat("x", 70)
	if got := GlobalIngressIPName(long); got != "pod-"+long[:59] || len(got) != 63 {
		t.Fatalf("long name %q (%d chars): want pod- and the first 59 characters (63 in all)", got, len(got))
	}
}

func TestPodGlobalIPChecksTheObject(t *testing.T) {
	global := []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}
	cases := []struct {
		name   string
		obj    *unstructured.Unstructured
		cidrs  []netip.Prefix
		want   string
		reason string
	}{
		{"absent", nil, global, "", GlobalIPNotAllocated},
		{"not allocated yet", globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p0", ""), global, "", GlobalIPNotAllocated},
		{"allocated", globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p0", "242.1.0.7"), global, "242.1.0.7", ""},
		{"another pod's", globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p1", "242.1.0.7"), global, "", GlobalIPWrongTarget},
		{"a ClusterIP Service's", globalIngressIP("cg", "p0", "ClusterIPService", "p0", "242.1.0.7"), global, "", GlobalIPWrongTarget},
		{"garbage", globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p0", "242.1.0"), global, "", GlobalIPInvalid},
		{"loopback", globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p0", "127.0.0.1"), nil, "", GlobalIPInvalid},
		{"outside the global CIDR", globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p0", "242.2.0.7"), global, "", GlobalIPOutsideCIDR},
		{"global CIDR unknown", globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p0", "242.2.0.7"), nil, "242.2.0.7", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ip, err := PodGlobalIP(tc.obj, "cg", "p0", tc.cidrs)
			if tc.reason == "" {
				if err != nil || ip.String() != tc.want {
					t.Fatalf("got %v, %v; want %s", ip, err, tc.want)
				}
				return
			}
			var p *GlobalIPProblem
			if !errors.As(err, &p) || p.Reason != tc.reason {
				t.Fatalf("got %v, %v; want reason %s", ip, err, tc.reason)
			}
			if !strings.Contains(err.Error(), "cg/pod-p0") {
				t.Fatalf("error %q does not name the object", err)
			}
		})
	}
}

func TestPodGlobalIPWatcherFollowsTheObject(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GlobalIngressIPGVR: "GlobalIngressIPList"})
	w, err := NewPodGlobalIPWatcher(PodGlobalIPConfig{Dynamic: dyn, Namespace: "cg", Pod: "p0",
		GlobalCIDRs: []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	// The fake client's watch misses events between its list and its watch.
	cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced)
	time.Sleep(100 * time.Millisecond)
	res := dyn.Resource(GlobalIngressIPGVR).Namespace("cg")
	// Another pod's object in the namespace is not ours.
	if _, err := res.Create(ctx, globalIngressIP("cg", "p1", GlobalIngressTargetHeadlessPod, "p1", "242.1.0.9"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := res.Create(ctx, globalIngressIP("cg", "p0", GlobalIngressTargetHeadlessPod, "p0", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitCurrent(t, w, "", GlobalIPNotAllocated)
	obj.Object["status"] = map[string]any{"allocatedIP": "242.1.0.5"}
	if _, err := res.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCurrent(t, w, "242.1.0.5", "")
	if err := res.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCurrent(t, w, "", GlobalIPNotAllocated)
}

func waitCurrent(t *testing.T, w *PodGlobalIPWatcher, ip, reason string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		got, err := w.Current()
		var p *GlobalIPProblem
		switch {
		case reason == "" && err == nil && got.String() == ip:
			return
		case reason != "" && errors.As(err, &p) && p.Reason == reason:
			return
		}
		select {
		case <-deadline:
			t.Fatalf("watcher has %v, %v; want %q %q", got, err, ip, reason)
		case <-w.Changed():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
