package cli

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/coastguard-mcnp/coastguard/reach"
)

// Kinds of ServiceHalfOpen.
const (
	// ServiceIngressAllowedAddressDenied: every backend's ingress rules
	// admit the source, but the source's egress denies the ClusterIP.
	ServiceIngressAllowedAddressDenied = "ingress-allowed-address-denied"
	// ServiceAddressAllowedIngressDenied: the source's egress rules admit
	// the ClusterIP, but some backend's ingress denies the source.
	ServiceAddressAllowedIngressDenied = "address-allowed-ingress-denied"
)

// ServiceHalfOpen is a group of service flows (a pod of another cluster to
// an exported Service's ClusterIP on a service port, as in verdict --to
// CLUSTER/NS/service/NAME) that one side explicitly allows and the other
// denies, by source namespace.
type ServiceHalfOpen struct {
	Kind      string `json:"kind"`
	From      string `json:"from"`    // cluster/namespace
	Service   string `json:"service"` // cluster/namespace/name
	ClusterIP string `json:"clusterIP"`
	Port      string `json:"port"` // service port
	Flows     int    `json:"flows"`
	Example   string `json:"example"` // a source pod
	// PodPathOpen (ingress-allowed-address-denied): the source's egress
	// admits every backend by its pod IP on its target port; only the
	// ClusterIP is missing (a client dialling the clusterset name fails).
	PodPathOpen bool `json:"podPathOpen,omitempty"`
	// DeniedAt (address-allowed-ingress-denied): the backends whose
	// ingress denies the example source.
	DeniedAt  []string `json:"deniedAt,omitempty"`
	AllowedBy []string `json:"allowedBy"`
	DeniedBy  []string `json:"deniedBy"`
}

// ConflictsReport is the conflicts document: the reachability engine's
// report (pod flows) plus the service flows.
type ConflictsReport struct {
	reach.Report
	ServiceHalfOpen []ServiceHalfOpen `json:"serviceHalfOpen"`
}

// serviceConflicts evaluates every service flow: each pod of a cluster to
// each exported (non-headless) Service of another cluster with ready
// backends, on each service port, with each cluster's NetworkPolicies
// compiled once (ipEval). It reports the half-open ones (see the kinds above); a
// flow whose egress or ingress merely falls to the default (no isolating
// policy) is never half-open.
func (l *live) serviceConflicts() ([]ServiceHalfOpen, error) {
	cache := map[string]*ipEval{}
	groups := map[string]*ServiceHalfOpen{}
	var svcClusters []string
	for c := range l.services {
		svcClusters = append(svcClusters, c)
	}
	sort.Strings(svcClusters)
	for _, sc := range svcClusters {
		var keys []string
		for k := range l.services[sc] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			svc := l.services[sc][k]
			if svc.Spec.ClusterIP == corev1.ClusterIPNone {
				continue
			}
			for pi := range svc.Spec.Ports {
				l.servicePortFlows(cache, groups, sc, k, svc, &svc.Spec.Ports[pi])
			}
		}
	}
	out := make([]ServiceHalfOpen, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		if a.From != b.From {
			return a.From < b.From
		}
		return a.Kind < b.Kind
	})
	return out, nil
}

// servicePortFlows adds to groups the half-open flows from every other
// cluster's pods to one port of Service k of cluster sc.
func (l *live) servicePortFlows(cache map[string]*ipEval, groups map[string]*ServiceHalfOpen, sc, k string, svc *corev1.Service, sp *corev1.ServicePort) {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	backends, _ := l.serviceBackends(sc, svc, sp)
	if len(backends) == 0 {
		return
	}
	for c, pods := range l.pods {
		if c == sc {
			continue // kube-proxy translates first: pod flows
		}
		for i := range pods {
			p := &pods[i]
			if p.Spec.HostNetwork || p.Status.PodIP == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			cip, ok := clusterIPFor(svc, p.Status.PodIP)
			if !ok {
				continue
			}
			h := l.serviceFlow(cache, c, p, sc, cip, int(sp.Port), proto, backends)
			if h == nil {
				continue
			}
			h.Service, h.ClusterIP = sc+"/"+k, cip
			h.Port = fmt.Sprintf("%d/%s", sp.Port, proto)
			gk := h.Kind + "|" + h.From + "|" + h.Service + "|" + h.Port
			if g := groups[gk]; g != nil {
				g.Flows++
				g.PodPathOpen = g.PodPathOpen && h.PodPathOpen
				continue
			}
			h.Flows = 1
			groups[gk] = h
		}
	}
}

// evalOf returns cluster c's compiled NetworkPolicies.
func (l *live) evalOf(cache map[string]*ipEval, c string) *ipEval {
	e := cache[c]
	if e == nil {
		e = newIPEval(l.netpols[c])
		cache[c] = e
	}
	return e
}

// serviceFlow judges one service flow; nil when it is not half-open. The
// backends are evaluated only as far as the verdict needs them.
func (l *live) serviceFlow(cache map[string]*ipEval, c string, p *corev1.Pod, sc, cip string, port int,
	proto corev1.Protocol, backends []backend) *ServiceHalfOpen {
	srcIP, err1 := netip.ParseAddr(p.Status.PodIP)
	dstIP, err2 := netip.ParseAddr(cip)
	if err1 != nil || err2 != nil {
		return nil
	}
	eg := l.evalOf(cache, c).eval(p, dstIP, port, "", proto, false)
	if eg.allowed && !eg.isolated {
		return nil // only a default: never half-open
	}
	in := l.evalOf(cache, sc)
	from, example := c+"/"+p.Namespace, c+"/"+p.Namespace+"/"+p.Name
	if !eg.allowed {
		// ingress-allowed-address-denied needs every backend to admit
		// the source explicitly
		var allowBy []string
		for _, b := range backends {
			v := in.eval(b.pod, srcIP, b.port, b.portName, proto, true)
			if !v.allowed || !v.isolated {
				return nil
			}
			allowBy = append(allowBy, v.allowBy...)
		}
		podPath := true
		for _, b := range backends {
			bIP, err := netip.ParseAddr(b.pod.Status.PodIP)
			if err != nil || !l.evalOf(cache, c).eval(p, bIP, b.port, "", proto, false).allowed {
				podPath = false
				break
			}
		}
		return &ServiceHalfOpen{Kind: ServiceIngressAllowedAddressDenied, From: from, Example: example,
			PodPathOpen: podPath, AllowedBy: dedup(allowBy), DeniedBy: eg.denyBy}
	}
	var deniedAt, denyBy []string
	for _, b := range backends {
		if v := in.eval(b.pod, srcIP, b.port, b.portName, proto, true); !v.allowed {
			deniedAt = append(deniedAt, sc+"/"+b.pod.Namespace+"/"+b.pod.Name)
			denyBy = append(denyBy, v.denyBy...)
		}
	}
	if len(deniedAt) == 0 {
		return nil
	}
	return &ServiceHalfOpen{Kind: ServiceAddressAllowedIngressDenied, From: from, Example: example,
		DeniedAt: deniedAt, AllowedBy: eg.allowBy, DeniedBy: dedup(denyBy)}
}

func dedup(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

func printServiceConflicts(w *strings.Builder, hs []ServiceHalfOpen) {
	if len(hs) == 0 {
		return
	}
	fmt.Fprintln(w, "\nHALF-OPEN SERVICE FLOWS (to another cluster's exported Service by its ClusterIP)")
	for _, h := range hs {
		fmt.Fprintf(w, "  %s -> service %s (%s) on %s: %d flow(s), %s\n    e.g. %s\n", h.From, h.Service, h.ClusterIP, h.Port, h.Flows, h.Kind, h.Example)
		if h.Kind == ServiceIngressAllowedAddressDenied {
			if h.PodPathOpen {
				fmt.Fprintln(w, "    the egress admits every backend by pod IP, but not the ClusterIP")
			}
		} else {
			fmt.Fprintf(w, "    denied at backends: %s\n", strings.Join(h.DeniedAt, ", "))
		}
		fmt.Fprintf(w, "    allowed by: %s\n    denied by:  %s\n", strings.Join(h.AllowedBy, ", "), strings.Join(h.DeniedBy, ", "))
	}
}
