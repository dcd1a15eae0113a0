package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// GlobalIngressIPGVR is Submariner Globalnet's GlobalIngressIP resource.
// For every backend pod of an exported headless Service, Globalnet creates
// one (named GlobalIngressIPName(pod), in the pod's namespace, with
// spec.target HeadlessServicePod and spec.podRef naming the pod), writes the
// global IP it allocated into status.allocatedIP and DNATs that IP to the
// pod's IP at the gateway (and SNATs the pod's traffic to other clusters to
// it). Lighthouse then resolves the headless Service's clusterset name to
// those global IPs.
var GlobalIngressIPGVR = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "globalingressips"}

// GlobalIngressTargetHeadlessPod is spec.target of a per-pod GlobalIngressIP.
const GlobalIngressTargetHeadlessPod = "HeadlessServicePod"

// GlobalIngressIPName is the name Globalnet gives the GlobalIngressIP of a
// headless Service's backend pod: "pod-" and the first 59 characters of
// the pod name.
func GlobalIngressIPName(pod string) string { return fmt.Sprintf("pod-%.59s", pod) }

// Reasons a GlobalIngressIP object is not usable as this pod's gossip
// address (label values of coastguard_globalnet_advertise_problems_total).
const (
	GlobalIPNotAllocated = "not_allocated" // no object yet, or no status.allocatedIP yet
	GlobalIPWrongTarget  = "wrong_target"  // not a HeadlessServicePod object for this pod
	GlobalIPInvalid      = "invalid_ip"    // status.allocatedIP does not parse
	GlobalIPOutsideCIDR  = "outside_global_cidr"
)

// GlobalIPProblem is why a GlobalIngressIP cannot be advertised (yet).
type GlobalIPProblem struct {
	Reason string // one of the GlobalIP* reasons
	Msg    string
}

func (p *GlobalIPProblem) Error() string { return p.Msg }

// PodGlobalIP returns the global IP that obj allocates to pod. obj nil means
// the object does not exist (yet). The IP must lie in one of globalCIDRs
// when any are given (the cluster's Globalnet CIDR as this cluster knows it).
// A *GlobalIPProblem error says why there is no usable address.
func PodGlobalIP(obj *unstructured.Unstructured, ns, pod string, globalCIDRs []netip.Prefix) (netip.Addr, error) {
	name := ns + "/" + GlobalIngressIPName(pod)
	if obj == nil {
		return netip.Addr{}, &GlobalIPProblem{GlobalIPNotAllocated, fmt.Sprintf(
			"no GlobalIngressIP %s yet: export the headless Service that selects pod %s (ServiceExport) so that Globalnet allocates one", name, pod)}
	}
	target, _, _ := unstructured.NestedString(obj.Object, "spec", "target")
	ref, _, _ := unstructured.NestedString(obj.Object, "spec", "podRef", "name")
	if target != GlobalIngressTargetHeadlessPod || ref != pod {
		return netip.Addr{}, &GlobalIPProblem{GlobalIPWrongTarget, fmt.Sprintf(
			"GlobalIngressIP %s has target %q for pod %q, want %q for pod %q", name, target, ref, GlobalIngressTargetHeadlessPod, pod)}
	}
	raw, _, _ := unstructured.NestedString(obj.Object, "status", "allocatedIP")
	if raw == "" {
		return netip.Addr{}, &GlobalIPProblem{GlobalIPNotAllocated, fmt.Sprintf("GlobalIngressIP %s has no status.allocatedIP yet", name)}
	}
	ip, err := netip.ParseAddr(raw)
	if err != nil || !ip.IsGlobalUnicast() {
		return netip.Addr{}, &GlobalIPProblem{GlobalIPInvalid, fmt.Sprintf("GlobalIngressIP %s: status.allocatedIP %q is not a unicast IP address", name, raw)}
	}
	ip = ip.Unmap()
	for _, c := range globalCIDRs {
		if c.Contains(ip) {
			return ip, nil
		}
	}
	if len(globalCIDRs) > 0 {
		return netip.Addr{}, &GlobalIPProblem{GlobalIPOutsideCIDR, fmt.Sprintf(
			"GlobalIngressIP %s: status.allocatedIP %s is outside this cluster's global CIDRs %v", name, ip, globalCIDRs)}
	}
	return ip, nil
}

// PodGlobalIPWatcher watches the GlobalIngressIP of one pod and reports
// every change of its usable global IP (or of the problem) to OnChange.
type PodGlobalIPWatcher struct {
	cfg      PodGlobalIPConfig
	mu       sync.Mutex
	ip       netip.Addr
	problem  error
	changed  chan struct{}
	informer cache.SharedIndexInformer
}

// PodGlobalIPConfig configures a PodGlobalIPWatcher.
type PodGlobalIPConfig struct {
	Dynamic     dynamic.Interface
	Namespace   string // the pod's namespace
	Pod         string
	GlobalCIDRs []netip.Prefix
	Logger      *slog.Logger
}

// NewPodGlobalIPWatcher returns a watcher on the one GlobalIngressIP of
// cfg.Pod (a field selector on its name: list and watch of that object only).
func NewPodGlobalIPWatcher(cfg PodGlobalIPConfig) (*PodGlobalIPWatcher, error) {
	if cfg.Dynamic == nil || cfg.Namespace == "" || cfg.Pod == "" {
		return nil, errors.New("globalnet advertise: a dynamic client, the pod's namespace and its name are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &PodGlobalIPWatcher{cfg: cfg, changed: make(chan struct{}, 1)}
	_, w.problem = PodGlobalIP(nil, cfg.Namespace, cfg.Pod, cfg.GlobalCIDRs)
	sel := fields.OneTermEqualSelector("metadata.name", GlobalIngressIPName(cfg.Pod)).String()
	w.informer = dynamicinformer.NewFilteredDynamicInformer(cfg.Dynamic, GlobalIngressIPGVR, cfg.Namespace, 0,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.FieldSelector = sel }).Informer()
	_, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.refresh() },
		UpdateFunc: func(any, any) { w.refresh() },
		DeleteFunc: func(any) { w.refresh() },
	})
	if err != nil {
		return nil, fmt.Errorf("globalnet advertise: %w", err)
	}
	return w, nil
}

// Run watches until ctx ends.
func (w *PodGlobalIPWatcher) Run(ctx context.Context) { w.informer.Run(ctx.Done()) }

// Changed is signalled (coalesced) whenever Current may have changed.
func (w *PodGlobalIPWatcher) Changed() <-chan struct{} { return w.changed }

// Current returns the usable global IP, or the problem that there is none.
func (w *PodGlobalIPWatcher) Current() (netip.Addr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ip, w.problem
}

func (w *PodGlobalIPWatcher) refresh() {
	var obj *unstructured.Unstructured
	for _, o := range w.informer.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetName() == GlobalIngressIPName(w.cfg.Pod) {
			obj = u
		}
	}
	ip, err := PodGlobalIP(obj, w.cfg.Namespace, w.cfg.Pod, w.cfg.GlobalCIDRs)
	w.mu.Lock()
	w.ip, w.problem = ip, err
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}
