package cli

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// ServiceAddress is the exactness decision (docs/SEMANTICS.md "Services")
// for one exported Service of another cluster whose backends the generated
// egress rules admit by pod IP, or whose address they admit: whether its
// ClusterIPs are admitted, on which service ports, and why not.
type ServiceAddress struct {
	Service   string   `json:"service"`   // cluster/namespace/name
	Addresses []string `json:"addresses"` // its ClusterIPs
	Admitted  bool     `json:"admitted"`  // some ClusterIP is an egress ipBlock
	// Rules are the generated rules holding the address (networkPolicy
	// egress[i] on PORTS).
	Rules []string `json:"rules,omitempty"`
	// Backends are the pods the Service selects; AdmittedBackends those
	// some generated egress rule admits by pod IP (on some port).
	Backends         []string `json:"backends"`
	AdmittedBackends []string `json:"admittedBackends,omitempty"`
	// Decision says why, naming the Degraded reason when there is one.
	Decision string `json:"decision"`
}

// serviceIndex maps every exported Service's ClusterIP to cluster/ns/name.
func (l *live) serviceIndex() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for c, svcs := range l.services {
		for k, s := range svcs {
			for _, ip := range s.Spec.ClusterIPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					out[a] = c + "/" + k
				}
			}
		}
	}
	return out
}

// degradedFor returns the Degraded reasons among details that name id.
func degradedFor(details []string, id string) []string {
	var out []string
	for _, d := range details {
		reason, rest, _ := strings.Cut(d, ": ")
		list, _, _ := strings.Cut(rest, " ")
		for _, s := range strings.Split(list, ",") {
			if s == id {
				out = append(out, reason)
			}
		}
	}
	return out
}

// serviceAddresses lists the exactness decisions behind the generated
// NetworkPolicies nps of one MCNP in cluster c, from what they render:
// the pod IPs and ClusterIPs of their egress ipBlocks, and the Degraded
// details of the translation.
func (l *live) serviceAddresses(c string, nps []networkingv1.NetworkPolicy, details []string) []ServiceAddress {
	blocks := egressHostBlocks(nps)
	if len(blocks) == 0 {
		return nil
	}
	var out []ServiceAddress
	var clusters []string
	for oc := range l.services {
		clusters = append(clusters, oc)
	}
	sort.Strings(clusters)
	for _, oc := range clusters {
		if oc == c {
			continue // local Services: kube-proxy translates before the policy
		}
		var keys []string
		for k := range l.services[oc] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s := l.services[oc][k]
			if s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Selector) == 0 {
				continue // headless: reached by pod IPs; no selector: no known backends
			}
			if sa, ok := l.serviceAddress(oc, k, s, blocks, details); ok {
				out = append(out, sa)
			}
		}
	}
	return out
}

// egressHostBlocks maps each single-address ipBlock of the egress rules to
// the rules that hold it.
func egressHostBlocks(nps []networkingv1.NetworkPolicy) map[netip.Addr][]string {
	blocks := map[netip.Addr][]string{}
	for i := range nps {
		np := &nps[i]
		for j, r := range np.Spec.Egress {
			for _, p := range r.To {
				if p.IPBlock == nil {
					continue
				}
				pre, err := netip.ParsePrefix(p.IPBlock.CIDR)
				if err != nil || pre.Bits() != pre.Addr().BitLen() {
					continue
				}
				blocks[pre.Addr()] = append(blocks[pre.Addr()], fmt.Sprintf("%s egress[%d] on %s", np.Name, j, portsText(r.Ports)))
			}
		}
	}
	return blocks
}

// serviceAddress explains whether the rules admit Service k of cluster oc
// by its address or its backends; false when they admit neither.
func (l *live) serviceAddress(oc, k string, s *corev1.Service, blocks map[netip.Addr][]string, details []string) (ServiceAddress, bool) {
	id := oc + "/" + k
	sa := ServiceAddress{Service: id}
	for _, ip := range s.Spec.ClusterIPs {
		sa.Addresses = append(sa.Addresses, ip)
		if a, err := netip.ParseAddr(ip); err == nil && blocks[a] != nil {
			sa.Admitted = true
			sa.Rules = append(sa.Rules, blocks[a]...)
		}
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	var notAdmitted []string
	for i := range l.pods[oc] {
		p := &l.pods[oc][i]
		if p.Namespace != s.Namespace || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		name := oc + "/" + p.Namespace + "/" + p.Name
		sa.Backends = append(sa.Backends, name)
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil && blocks[a] != nil {
			sa.AdmittedBackends = append(sa.AdmittedBackends, name)
		} else {
			notAdmitted = append(notAdmitted, name)
		}
	}
	if !sa.Admitted && len(sa.AdmittedBackends) == 0 {
		return sa, false
	}
	sort.Strings(sa.Backends)
	sort.Strings(sa.AdmittedBackends)
	sort.Strings(notAdmitted)
	sa.Decision = strings.Join(serviceDecision(oc, id, sa.Admitted, notAdmitted, details), "; ")
	return sa, true
}

// serviceDecision says why the Service's address is, or is not, admitted.
func serviceDecision(oc, id string, admitted bool, notAdmitted, details []string) []string {
	var why []string
	if admitted {
		why = append(why, "address admitted: an egress rule admits every backend on the port it serves these service ports on")
	}
	for _, r := range degradedFor(details, id) {
		switch r {
		case enforce.ReasonServicePartiallyAdmitted:
			w := "Degraded " + r + ": an egress rule admits only some backends on some service port, so its address is not admitted there (kube-proxy may pick any backend)"
			if len(notAdmitted) > 0 {
				w += "; not admitted by pod IP: " + strings.Join(notAdmitted, ", ")
			}
			why = append(why, w)
		case enforce.ReasonServiceIPNotOwned:
			why = append(why, "Degraded "+r+": its address is outside "+oc+"'s service CIDRs as this cluster knows them (or they are unknown): not rendered")
		default:
			why = append(why, "Degraded "+r)
		}
	}
	if len(why) == 0 {
		why = append(why, "no address rule: no egress rule admits every backend on the port it serves a service port on")
	}
	return why
}

func printServiceAddresses(w *strings.Builder, sas []ServiceAddress) {
	for _, sa := range sas {
		state := "NOT admitted"
		if sa.Admitted {
			state = "admitted by " + strings.Join(sa.Rules, ", ")
		}
		fmt.Fprintf(w, "  service %s (%s): address %s; %d of %d backend(s) admitted by pod IP\n    %s\n",
			sa.Service, strings.Join(sa.Addresses, ","), state, len(sa.AdmittedBackends), len(sa.Backends), sa.Decision)
	}
}
