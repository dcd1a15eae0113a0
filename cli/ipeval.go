package cli

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// ipEval decides, with a cluster's NetworkPolicies compiled once, flows
// between a pod of that cluster and a peer known only by its IP (a pod of
// another cluster, or a ClusterIP): the egress of the pod towards the IP, or
// its ingress from the IP. It is what cyclonus' matcher decides for a
// non-internal peer (TestIPEvalMatchesCyclonus), without parsing every
// ipBlock on every flow, so conflicts can afford every service flow.
// Such a peer is matched only by ipBlocks and by rules without peers;
// a rule's named port matches the pod's port name (ingress), never an IP
// destination (egress).
type ipEval struct {
	pols    []*ipPolicy
	targets map[*corev1.Pod][2][]*ipPolicy // by pod: selecting policies, [0] ingress [1] egress
}

type ipPolicy struct {
	np               *networkingv1.NetworkPolicy
	owner            string // "mcnp ORIGIN" or "np NS/NAME"
	sel              labels.Selector
	ingress, egress  bool
	inRules, egRules []ipRule
}

type ipRule struct {
	ports []networkingv1.NetworkPolicyPort
	any   bool // no peers: every source/destination
	// hosts are the single-address ipBlocks (most of what coastguard
	// generates: pod IPs, ClusterIPs), blocks the others.
	hosts  map[netip.Addr]bool
	blocks []ipBlock
}

type ipBlock struct {
	cidr   netip.Prefix
	except []netip.Prefix
}

func newIPEval(nps []networkingv1.NetworkPolicy) *ipEval {
	e := &ipEval{targets: map[*corev1.Pod][2][]*ipPolicy{}}
	for i := range nps {
		np := withTypes(nps[i])
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			sel = labels.Nothing()
		}
		p := &ipPolicy{np: np, sel: sel, owner: "np " + np.Namespace + "/" + np.Name}
		if generated(np) {
			p.owner = "mcnp " + np.Annotations[enforce.AnnotationOrigin]
		}
		for _, t := range np.Spec.PolicyTypes {
			switch t {
			case networkingv1.PolicyTypeIngress:
				p.ingress = true
			case networkingv1.PolicyTypeEgress:
				p.egress = true
			}
		}
		for _, r := range np.Spec.Ingress {
			p.inRules = append(p.inRules, compileIPRule(r.Ports, r.From))
		}
		for _, r := range np.Spec.Egress {
			p.egRules = append(p.egRules, compileIPRule(r.Ports, r.To))
		}
		e.pols = append(e.pols, p)
	}
	return e
}

func compileIPRule(ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer) ipRule {
	r := ipRule{ports: ports, any: len(peers) == 0}
	for _, p := range peers {
		if p.IPBlock == nil {
			continue
		}
		pre, err := netip.ParsePrefix(p.IPBlock.CIDR)
		if err != nil {
			continue
		}
		if pre.IsSingleIP() && len(p.IPBlock.Except) == 0 {
			if r.hosts == nil {
				r.hosts = map[netip.Addr]bool{}
			}
			r.hosts[pre.Addr()] = true
			continue
		}
		b := ipBlock{cidr: pre.Masked()}
		for _, x := range p.IPBlock.Except {
			if xp, err := netip.ParsePrefix(x); err == nil {
				b.except = append(b.except, xp.Masked())
			}
		}
		r.blocks = append(r.blocks, b)
	}
	return r
}

func (e *ipEval) selecting(pod *corev1.Pod, ingress bool) []*ipPolicy {
	t, ok := e.targets[pod]
	if !ok {
		for _, p := range e.pols {
			if p.np.Namespace != pod.Namespace || !p.sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			if p.ingress {
				t[0] = append(t[0], p)
			}
			if p.egress {
				t[1] = append(t[1], p)
			}
		}
		e.targets[pod] = t
	}
	if ingress {
		return t[0]
	}
	return t[1]
}

// ipVerdict is ipEval's answer: allowed, whether some policy isolates the
// pod in that direction, and the owners of the allowing and of the
// isolating policies that do not allow.
type ipVerdict struct {
	allowed, isolated bool
	allowBy, denyBy   []string
}

// eval decides the flow between pod and ip on port (portName: the pod's
// name for it, ingress only) in one direction.
func (e *ipEval) eval(pod *corev1.Pod, ip netip.Addr, port int, portName string, proto corev1.Protocol, ingress bool) ipVerdict {
	pols := e.selecting(pod, ingress)
	v := ipVerdict{isolated: len(pols) > 0, allowed: len(pols) == 0}
	for _, p := range pols {
		rules := p.egRules
		if ingress {
			rules = p.inRules
		}
		ok := false
		for i := range rules {
			if rules[i].admits(ip, port, portName, proto) {
				ok = true
				break
			}
		}
		if ok {
			v.allowed = true
			v.allowBy = append(v.allowBy, p.owner)
		} else {
			v.denyBy = append(v.denyBy, p.owner)
		}
	}
	v.allowBy, v.denyBy = dedup(v.allowBy), dedup(v.denyBy)
	return v
}

func (r *ipRule) admits(ip netip.Addr, port int, portName string, proto corev1.Protocol) bool {
	if !ipPortAdmits(r.ports, port, portName, proto) {
		return false
	}
	if r.any || r.hosts[ip] {
		return true
	}
	for _, b := range r.blocks {
		if b.cidr.Addr().Is4() != ip.Is4() || !b.cidr.Contains(ip) {
			continue
		}
		excepted := false
		for _, x := range b.except {
			if x.Contains(ip) {
				excepted = true
				break
			}
		}
		if !excepted {
			return true
		}
	}
	return false
}

func ipPortAdmits(ports []networkingv1.NetworkPolicyPort, port int, portName string, proto corev1.Protocol) bool {
	return enforce.PortAdmits(ports, proto, int32(port), func(name string) bool { return portName != "" && name == portName })
}
