package kube

import (
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// ServiceExportResource is the MCS API's ServiceExport (as Lighthouse uses
// it): a Service with a ServiceExport of the same namespace/name is
// replicated as a KindService entry.
var ServiceExportResource = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceexports"}

// ServiceToValue converts an exported Service into its replicated value:
// cluster IPs (none when headless), ports with their targetPorts (numeric
// or named), the selector and publishNotReadyAddresses. Its Globalnet
// global ingress IPs are the caller's to fill in (ServiceGlobalIPsFrom). A cluster IP that is not an IP address, or a
// port without a port number, is an error.
func ServiceToValue(s *corev1.Service) (crdt.ServiceValue, error) {
	v := crdt.ServiceValue{Selector: copyLabels(s.Spec.Selector), PublishNotReady: s.Spec.PublishNotReadyAddresses}
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 && s.Spec.ClusterIP != "" {
		ips = []string{s.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip == corev1.ClusterIPNone {
			v.Headless = true
			continue
		}
		if msgs := validation.IsValidIP(nil, ip); len(msgs) > 0 {
			return v, fmt.Errorf("service %s/%s: spec.clusterIPs: %q is not an IP address", s.Namespace, s.Name, ip)
		}
		v.ClusterIPs = append(v.ClusterIPs, ip)
	}
	for _, p := range s.Spec.Ports {
		if p.Port <= 0 {
			return v, fmt.Errorf("service %s/%s: port %q has no port number", s.Namespace, s.Name, p.Name)
		}
		sp := crdt.ServicePort{Name: p.Name, Port: p.Port}
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			sp.Protocol = string(p.Protocol)
		}
		switch {
		case p.TargetPort.Type == intstr.String && p.TargetPort.StrVal != "":
			sp.TargetPortName = p.TargetPort.StrVal
		case p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal > 0:
			sp.TargetPort = p.TargetPort.IntVal
		default:
			sp.TargetPort = p.Port // targetPort defaults to port
		}
		v.Ports = append(v.Ports, sp)
	}
	return v, nil
}

func watchServices(inv *Inventory) (cache.SharedIndexInformer, error) {
	return inv.factory.Core().V1().Services().Informer(), nil
}

func bindServices(inv *Inventory, idx cache.Indexer) {
	inv.services = corelisters.NewServiceLister(idx)
}

// serviceNames lists the Services that have a ServiceExport; none until
// the ServiceExport resource is served and watched.
func serviceNames(inv *Inventory) ([]string, error) {
	inv.mu.Lock()
	exports := inv.exports
	inv.mu.Unlock()
	if exports == nil {
		return nil, nil
	}
	objs, err := exports.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		k, err := cache.MetaNamespaceKeyFunc(o)
		if err != nil {
			continue
		}
		ns, n, _ := cache.SplitMetaNamespaceKey(k)
		if _, err := inv.services.Services(ns).Get(n); err == nil {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

func serviceEntry(inv *Inventory, name string) ([]byte, bool, error) {
	inv.mu.Lock()
	exports := inv.exports
	inv.mu.Unlock()
	if exports == nil {
		return nil, false, nil
	}
	if _, err := exports.Get(name); apierrors.IsNotFound(err) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	ns, n, err := cache.SplitMetaNamespaceKey(name)
	if err != nil {
		return nil, false, err
	}
	s, err := inv.services.Services(ns).Get(n)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := ServiceToValue(s)
	if err != nil {
		return nil, false, err
	}
	if inv.cfg.ServiceGlobalIPs != nil && !v.Headless {
		if v.GlobalIPs, err = inv.cfg.ServiceGlobalIPs(ns, n); err != nil {
			return nil, false, err
		}
	}
	return encodeEntry(&v)
}

// ServiceChanged queues a rewrite of the Service entry namespace/name (call
// it when ServiceGlobalIPs may have changed for it).
func (inv *Inventory) ServiceChanged(namespace, name string) {
	inv.queue.Add(InventoryKey{Kind: crdt.KindService, Name: PodName(namespace, name)})
}

// globalIngressIPTargetService is the spec.target of a GlobalIngressIP that
// allocates a global IP to a ClusterIP Service (Submariner Globalnet).
const globalIngressIPTargetService = "ClusterIPService"

// ServiceGlobalIPsFrom returns the global ingress IPs (sorted, unique) that
// the GlobalIngressIPs of namespace ns allocate to the ClusterIP Service
// called name (spec.target ClusterIPService, spec.serviceRef.name; the
// converter behind SubmarinerWatcher.ServiceGlobalIPs and `coastguardd
// render`). An allocatedIP that is not an IP address is an error naming
// the object: the Service entry then keeps its last replicated value.
func ServiceGlobalIPsFrom(objs []*unstructured.Unstructured, ns, name string) ([]string, error) {
	var out []string
	for _, u := range objs {
		if u.GetNamespace() != ns {
			continue
		}
		target, _, _ := unstructured.NestedString(u.Object, "spec", "target")
		ref, _, _ := unstructured.NestedString(u.Object, "spec", "serviceRef", "name")
		if target != globalIngressIPTargetService || ref != name {
			continue
		}
		ip, _, _ := unstructured.NestedString(u.Object, "status", "allocatedIP")
		if ip == "" {
			continue // not allocated yet
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" || a.Is4In6() {
			return nil, fmt.Errorf("GlobalIngressIP %s/%s: status.allocatedIP: %q is not an IP address", u.GetNamespace(), u.GetName(), ip)
		}
		out = append(out, a.String())
	}
	return sortedUnique(out), nil
}

// ensureServiceExports starts the ServiceExport informer once the
// resource is served (like ClusterProperty); its events rewrite the
// Service entry of the same name.
func (inv *Inventory) ensureServiceExports() {
	inv.mu.Lock()
	have, stop := inv.exports != nil, inv.stopCh
	inv.mu.Unlock()
	if have {
		return
	}
	ok, err := ResourceServed(inv.cfg.Discovery, ServiceExportResource)
	if err != nil {
		inv.log.Warn("discovery of ServiceExport failed; will retry", "err", err)
		return
	}
	if !ok {
		return
	}
	inf := inv.dynFactory.ForResource(ServiceExportResource)
	_ = inf.Informer().SetTransform(stripManagedFields) // fails only once started; then it is already set
	if _, err := inf.Informer().AddEventHandler(inv.handler(crdt.KindService)); err != nil {
		inv.log.Warn("cannot watch ServiceExport", "err", err)
		return
	}
	inv.mu.Lock()
	inv.exports, inv.exportsSynced = inf.Lister(), inf.Informer().HasSynced
	inv.mu.Unlock()
	if stop != nil {
		inv.dynFactory.Start(stop)
	}
	inv.log.Info("watching ServiceExport")
}
