package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/enforce"
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

// policySet holds a cluster's NetworkPolicies compiled once for cyclonus.
func (l *live) policySet(cache map[string]*matcher.Policy, cluster string) *matcher.Policy {
	if p, ok := cache[cluster]; ok {
		return p
	}
	var all []*networkingv1.NetworkPolicy
	for i := range l.netpols[cluster] {
		all = append(all, withTypes(l.netpols[cluster][i]))
	}
	p := matcher.BuildNetworkPolicies(false, all)
	cache[cluster] = p
	return p
}

// owners names the policies of targets: "mcnp ORIGIN" for generated ones,
// "np NS/NAME" for the user's.
func owners(ts []*matcher.Target) []string {
	seen := map[string]bool{}
	for _, t := range ts {
		for _, np := range t.SourceRules {
			if generated(np) {
				seen["mcnp "+np.Annotations[enforce.AnnotationOrigin]] = true
			} else {
				seen["np "+np.Namespace+"/"+np.Name] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// serviceConflicts evaluates every service flow: each pod of a cluster to
// each exported (non-headless) Service of another cluster with ready
// backends, on each service port, with each cluster's NetworkPolicies
// compiled once. It reports the half-open ones (see the kinds above); a
// flow whose egress or ingress merely falls to the default (no isolating
// policy) is never half-open.
func (l *live) serviceConflicts() (out []ServiceHalfOpen, err error) {
	defer func() {
		if r := recover(); r != nil { // the matcher panics on malformed policies
			out, err = nil, fmt.Errorf("evaluating service flows: %v", r)
		}
	}()
	cache := map[string]*matcher.Policy{}
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
				sp := &svc.Spec.Ports[pi]
				proto := sp.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				backends, _ := l.serviceBackends(sc, svc, sp)
				if len(backends) == 0 {
					continue
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
		}
	}
	out = make([]ServiceHalfOpen, 0, len(groups))
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

// serviceFlow judges one service flow; nil when it is not half-open.
func (l *live) serviceFlow(cache map[string]*matcher.Policy, c string, p *corev1.Pod, sc, cip string, port int,
	proto corev1.Protocol, backends []backend) *ServiceHalfOpen {
	src := l.trafficPeer(c, p, true)
	eg := l.policySet(cache, c).IsIngressOrEgressAllowed(&matcher.Traffic{Source: src,
		Destination: &matcher.TrafficPeer{IP: cip}, ResolvedPort: port, Protocol: proto}, false)
	egIsolated := len(eg.AllowingTargets)+len(eg.DenyingTargets) > 0
	remote := l.trafficPeer(c, p, false)
	allExplicit, podPath := true, true
	var deniedAt, inAllow, inDeny []string
	for _, b := range backends {
		in := l.policySet(cache, sc).IsIngressOrEgressAllowed(&matcher.Traffic{Source: remote,
			Destination: l.trafficPeer(sc, b.pod, true), ResolvedPort: b.port, ResolvedPortName: b.portName, Protocol: proto}, true)
		if !in.IsAllowed() {
			deniedAt = append(deniedAt, sc+"/"+b.pod.Namespace+"/"+b.pod.Name)
			inDeny = append(inDeny, owners(in.DenyingTargets)...)
			allExplicit = false
			continue
		}
		if len(in.AllowingTargets) == 0 {
			allExplicit = false
		}
		inAllow = append(inAllow, owners(in.AllowingTargets)...)
		if !eg.IsAllowed() && podPath {
			pe := l.policySet(cache, c).IsIngressOrEgressAllowed(&matcher.Traffic{Source: src,
				Destination: &matcher.TrafficPeer{IP: b.pod.Status.PodIP}, ResolvedPort: b.port, Protocol: proto}, false)
			podPath = pe.IsAllowed()
		}
	}
	from := c + "/" + p.Namespace
	switch {
	case !eg.IsAllowed() && allExplicit:
		return &ServiceHalfOpen{Kind: ServiceIngressAllowedAddressDenied, From: from, Example: c + "/" + p.Namespace + "/" + p.Name,
			PodPathOpen: podPath, AllowedBy: dedup(inAllow), DeniedBy: owners(eg.DenyingTargets)}
	case eg.IsAllowed() && egIsolated && len(deniedAt) > 0:
		return &ServiceHalfOpen{Kind: ServiceAddressAllowedIngressDenied, From: from, Example: c + "/" + p.Namespace + "/" + p.Name,
			DeniedAt: deniedAt, AllowedBy: owners(eg.AllowingTargets), DeniedBy: dedup(inDeny)}
	}
	return nil
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
