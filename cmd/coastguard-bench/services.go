package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
)

// The cost of the exported-Service kind (docs/SEMANTICS.md "Services"):
// bytes per Service update, heap per Service entry in the daemon's model,
// and translation time with svcTotal exported Services across svcClusters
// clusters, against the same inventory without them.
const (
	svcClusters = 10
	svcNS       = 10
	svcBackends = 3
)

// svcValue is a typical exported Service: one ClusterIP, two ports (one
// named targetPort), a two-label selector.
func svcValue(c, i int) *crdt.ServiceValue {
	return &crdt.ServiceValue{
		ClusterIPs: []string{fmt.Sprintf("100.%d.%d.%d", c, i/250, i%250+1)},
		Selector:   map[string]string{"app": fmt.Sprintf("svc%04d", i), "tier": "backend"},
		Ports: []crdt.ServicePort{{Name: "http", Port: 80, TargetPortName: "http"},
			{Name: "metrics", Port: 9100, TargetPort: 9100}},
	}
}

type svcWorld struct {
	writers []*crdt.State
	mirror  *model.Mirror
	stamp   int64
}

func (w *svcWorld) write(c int, kind crdt.Kind, name string, v any) (int, error) {
	var b []byte
	var err error
	if v != nil {
		if b, err = crdt.EncodeValue(v); err != nil {
			return 0, err
		}
	}
	w.stamp++
	d, ch, err := w.writers[c].Write(kind, name, b, v == nil, w.stamp)
	if err != nil {
		return 0, err
	}
	if res := w.mirror.Apply(ch); len(res.Errors) > 0 {
		return 0, res.Errors[0]
	}
	wire, err := crdt.EncodeDelta(d)
	return len(wire), err
}

// newSvcWorld: svcClusters clusters with svcNS namespaces, perCluster
// Services each with svcBackends backend pods, and one egress MCNP per
// namespace in c000 admitting every backend of every cluster on http.
func newSvcWorld(perCluster int) (*svcWorld, error) {
	w := &svcWorld{mirror: model.NewMirror(origin(0))}
	var cidrs []string
	for c := 0; c < svcClusters; c++ {
		cidrs = append(cidrs, fmt.Sprintf("%s=10.%d.0.0/16", origin(c), c), fmt.Sprintf("%s:service=100.%d.0.0/16", origin(c), c))
	}
	nets, err := enforce.ParseClusterCIDRs(cidrs)
	if err != nil {
		return nil, err
	}
	w.mirror.SetNetworks(nets)
	for c := 0; c < svcClusters; c++ {
		s := crdt.NewState(origin(c))
		if err := s.SetEpoch(1); err != nil {
			return nil, err
		}
		w.writers = append(w.writers, s)
		// its cluster entry: a cluster whose labels are unknown matches
		// no clusterSelector but one naming it (docs/SEMANTICS.md)
		if _, err := w.write(c, crdt.KindCluster, "", &crdt.ClusterValue{}); err != nil {
			return nil, err
		}
		for n := 0; n < svcNS; n++ {
			if _, err := w.write(c, crdt.KindNamespace, nsName(n), &crdt.NamespaceValue{}); err != nil {
				return nil, err
			}
		}
		for i := 0; i < perCluster*svcBackends; i++ {
			svc := i / svcBackends
			v := &crdt.PodValue{Labels: map[string]string{"app": fmt.Sprintf("svc%04d", svc), "tier": "backend"},
				IPs: []string{fmt.Sprintf("10.%d.%d.%d", c, i/250, i%250+1)}, Phase: "Running",
				Ports: []crdt.NamedPort{{Name: "http", Port: 8080}, {Name: "metrics", Port: 9100}}}
			if _, err := w.write(c, crdt.KindPod, fmt.Sprintf("%s/p%05d", nsName(svc%svcNS), i), v); err != nil {
				return nil, err
			}
		}
	}
	http := intstr.FromString("http")
	for n := 0; n < svcNS; n++ {
		spec := apiv1.MultiClusterNetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []apiv1.MultiClusterNetworkPolicyEgressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Port: &http}},
				To: []apiv1.MultiClusterNetworkPolicyPeer{{ClusterSelector: &metav1.LabelSelector{},
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "backend"}}}}}},
		}
		b, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		if _, err := w.write(0, crdt.KindPolicy, nsName(n)+"/egress", &crdt.PolicyValue{UID: "u", Generation: 1, Spec: b}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// medianTranslate returns the median full translation time and the
// number of Service address ipBlocks (100.x) generated.
func medianTranslate(inv *enforce.Inventory, runs int) (float64, int) {
	var t []float64
	n := 0
	for i := 0; i < runs; i++ {
		began := time.Now()
		nps := enforce.Translate(origin(0), inv)
		t = append(t, ms(time.Since(began)))
		n = 0
		for _, np := range nps {
			for _, r := range np.Spec.Egress {
				for _, peer := range r.To {
					if peer.IPBlock != nil && strings.HasPrefix(peer.IPBlock.CIDR, "100.") {
						n++
					}
				}
			}
		}
	}
	return median(t), n
}

func runServices(ctx context.Context, cfg *config, rec *recorder) error {
	perCluster, runs := 100, 7
	if cfg.quick {
		perCluster, runs = 20, 3
	}
	total := perCluster * svcClusters
	w, err := newSvcWorld(perCluster)
	if err != nil {
		return err
	}
	p := map[string]any{"services": total, "clusters": svcClusters, "backends_per_service": svcBackends, "mcnps": svcNS}
	without, _ := medianTranslate(w.mirror.Inventory(), runs)
	before := heapInUse()
	wire := 0
	for c := 0; c < svcClusters; c++ {
		for i := 0; i < perCluster; i++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n, err := w.write(c, crdt.KindService, fmt.Sprintf("%s/svc%04d", nsName(i%svcNS), i), svcValue(c, i))
			if err != nil {
				return err
			}
			wire += n
		}
	}
	after := heapInUse()
	with, addrs := medianTranslate(w.mirror.Inventory(), runs)
	// every remote Service is admitted by the MCNP of its namespace
	if want := (svcClusters - 1) * perCluster; addrs != want {
		return fmt.Errorf("services: %d address ipBlocks generated, want %d", addrs, want)
	}
	val, err := crdt.EncodeValue(svcValue(1, 1))
	if err != nil {
		return err
	}
	rec.add("service_value_bytes", float64(len(val)), "bytes", map[string]any{"shape": "1 ClusterIP, 2 ports, 2-label selector"}, "", nil)
	rec.add("service_delta_bytes_per_update", float64(wire)/float64(total), "bytes", p, "", nil)
	rec.add("service_heap_bytes_per_entry", float64(int64(after)-int64(before))/float64(total), "bytes", merge(p, map[string]any{"path": "origin crdt.State + model.Mirror"}), "", nil)
	rec.add("service_translate_full_ms", with, "ms", merge(p, map[string]any{"path": "enforce.Translate", "address_ipblocks": addrs}), "", nil)
	rec.add("service_translate_full_without_services_ms", without, "ms", merge(p, map[string]any{"path": "enforce.Translate"}), "", nil)
	rec.add("service_translate_overhead_ratio", ratio(with, without), "ratio", p, "", nil)
	return nil
}
