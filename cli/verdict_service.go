package cli

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// Results of a verdict (Verdict.Result).
const (
	ResultAllowed = "ALLOWED"
	ResultDenied  = "DENIED"
	// ResultPartial: a flow to a Service whose egress is allowed and whose
	// backends' ingress admits it on some backends only. The load balancer
	// may pick any backend, so the flow counts as denied (Allowed false).
	ResultPartial = "PARTIAL"
)

// Target is verdict's destination: a pod (CLUSTER/NAMESPACE/POD) or an
// exported Service (CLUSTER/NAMESPACE/service/NAME).
type Target struct {
	Endpoint
	Service bool // Endpoint.Pod is then the Service's name
}

// ParseTarget parses CLUSTER/NAMESPACE/POD or CLUSTER/NAMESPACE/service/NAME
// (svc is accepted for service).
func ParseTarget(s string) (Target, error) {
	p := strings.Split(s, "/")
	if len(p) == 4 && (p[2] == "service" || p[2] == "svc") {
		if p[0] == "" || p[1] == "" || p[3] == "" {
			return Target{}, fmt.Errorf("%q: want CLUSTER/NAMESPACE/service/NAME", s)
		}
		return Target{Endpoint: Endpoint{p[0], p[1], p[3]}, Service: true}, nil
	}
	e, err := ParseEndpoint(s)
	if err != nil {
		return Target{}, fmt.Errorf("%q: want CLUSTER/NAMESPACE/POD or CLUSTER/NAMESPACE/service/NAME", s)
	}
	return Target{Endpoint: e}, nil
}

// ServiceTarget is the Service a flow is sent to.
type ServiceTarget struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// ClusterIP is the destination address the source's cluster sees
	// (Lighthouse answers it for NAME.NAMESPACE.svc.clusterset.local).
	ClusterIP string `json:"clusterIP"`
	// Port is the service port (PORT/PROTO); TargetPort its targetPort as
	// the Service spells it (a number or a container port name).
	Port       string `json:"port"`
	TargetPort string `json:"targetPort"`
	// Selector is the Service's selector (key=value,...).
	Selector string `json:"selector"`
}

// BackendVerdict is the verdict for one backend of a Service.
type BackendVerdict struct {
	Pod     string `json:"pod"` // cluster/ns/pod
	IP      string `json:"ip"`
	Port    string `json:"port"` // the port the backend serves the service port on, PORT/PROTO
	Allowed bool   `json:"allowed"`
	// Egress is the source's egress towards this backend as a pod; only
	// when the Service is in the source's own cluster (kube-proxy there
	// translates the ClusterIP before the NetworkPolicies see the packet).
	Egress  *Side `json:"egress,omitempty"`
	Ingress Side  `json:"ingress"`
}

func (t *ServiceTarget) String() string {
	return "service " + t.Cluster + "/" + t.Namespace + "/" + t.Name
}

// service returns an exported Service of a cluster.
func (l *live) service(cluster, ns, name string) (*corev1.Service, error) {
	if s := l.services[cluster][ns+"/"+name]; s != nil {
		return s, nil
	}
	var have []string
	for k := range l.services[cluster] {
		if strings.HasPrefix(k, ns+"/") {
			have = append(have, strings.TrimPrefix(k, ns+"/"))
		}
	}
	sort.Strings(have)
	msg := "none"
	if len(have) > 0 {
		msg = strings.Join(have, ", ")
	}
	return nil, fmt.Errorf("service %s/%s is not exported from cluster %s (no such Service, or no ServiceExport for it; exported in %s: %s)",
		ns, name, cluster, ns, msg)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// backendPort resolves a service port's targetPort on a pod as the
// EndpointSlice controller does: a number as is, a name through the pod's
// container ports of the same protocol (false when it has none). It also
// returns the container port's name (for named ports in NetworkPolicies).
func backendPort(sp *corev1.ServicePort, p *corev1.Pod) (int, string, bool) {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	named := func(port int) string {
		for _, cp := range kube.ServingPorts(p) {
			pr := cp.Protocol
			if pr == "" {
				pr = corev1.ProtocolTCP
			}
			if int(cp.ContainerPort) == port && pr == proto {
				return cp.Name
			}
		}
		return ""
	}
	switch {
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		for _, cp := range kube.ServingPorts(p) {
			pr := cp.Protocol
			if pr == "" {
				pr = corev1.ProtocolTCP
			}
			if cp.Name == sp.TargetPort.StrVal && pr == proto {
				return int(cp.ContainerPort), cp.Name, true
			}
		}
		return 0, "", false
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal > 0:
		return int(sp.TargetPort.IntVal), named(int(sp.TargetPort.IntVal)), true
	default:
		return int(sp.Port), named(int(sp.Port)), true
	}
}

// clusterIPFor picks the Service's cluster IP of the source's address
// family.
func clusterIPFor(s *corev1.Service, srcIP string) (string, bool) {
	src, err := netip.ParseAddr(srcIP)
	if err != nil {
		return "", false
	}
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 && s.Spec.ClusterIP != "" {
		ips = []string{s.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && a.Is4() == src.Is4() {
			return ip, true
		}
	}
	return "", false
}

// verdictService is the verdict for a flow from a pod to an exported
// Service's ClusterIP on a service port (docs/DAY2.md "verdict to a
// Service"). In another cluster, the source's egress is evaluated for the
// ClusterIP on the service port (the source's CNI sees the packet before
// the exporting cluster's kube-proxy translates it) and every ready
// backend's ingress for the source's pod IP on the port it serves (remote
// sources are not masqueraded); in the source's own cluster both ends are
// evaluated per backend, as pods. Allowed only when the egress and every
// backend admit the flow.
func verdictService(l *live, src Endpoint, dst Endpoint, port int, proto corev1.Protocol) (*Verdict, error) {
	sp, err := l.pod(src.Cluster, src.Namespace, src.Pod)
	if err != nil {
		return nil, err
	}
	if sp.Status.PodIP == "" {
		return nil, fmt.Errorf("the source pod %s has no IP", src)
	}
	svc, err := l.service(dst.Cluster, dst.Namespace, dst.Pod)
	if err != nil {
		return nil, err
	}
	id := dst.Cluster + "/" + dst.Namespace + "/service/" + dst.Pod
	sport, err := servicePortOf(svc, id, port, proto)
	if err != nil {
		return nil, err
	}
	backends, excluded := l.serviceBackends(dst.Cluster, svc, sport)
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, headlessError(src, dst, id, backends, proto)
	}
	cip, ok := clusterIPFor(svc, sp.Status.PodIP)
	if !ok {
		return nil, fmt.Errorf("%s has no ClusterIP of the address family of %s (%s)", id, src, sp.Status.PodIP)
	}
	st := serviceTarget(svc, sport, dst, cip, port, proto)
	v := &Verdict{From: src.String(), To: id, Port: st.Port, Service: st, Excluded: excluded}
	f := serviceFlow{l: l, src: src, dst: dst, sp: sp, proto: proto, same: src.Cluster == dst.Cluster}
	if err := f.sides(v, cip, port, len(backends) > 0); err != nil {
		return nil, err
	}
	nIn, err := f.backends(v, backends)
	if err != nil {
		return nil, err
	}
	f.conclude(v, id, cip, len(backends), nIn)
	if !f.same && !v.Egress.Allowed && len(backends) > 0 {
		v.Notes = l.egressNotes(src, sp, dst, backends, proto)
	}
	if !f.same {
		v.Notes = append(v.Notes, globalnetNotes(l.inv.Networks(), src.Cluster, dst.Cluster)...)
	}
	return v, nil
}

// servicePortOf is svc's port number/proto, or an error listing its ports.
func servicePortOf(svc *corev1.Service, id string, port int, proto corev1.Protocol) (*corev1.ServicePort, error) {
	var ports []string
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		pr := p.Protocol
		if pr == "" {
			pr = corev1.ProtocolTCP
		}
		if int(p.Port) == port && pr == proto {
			return p, nil
		}
		ports = append(ports, fmt.Sprintf("%d/%s", p.Port, pr))
	}
	return nil, fmt.Errorf("%s has no port %d/%s (its ports: %s)", id, port, proto, strings.Join(ports, ", "))
}

// headlessError explains that a headless Service has no verdict of its
// own, and gives the per-backend commands to ask instead.
func headlessError(src, dst Endpoint, id string, backends []backend, proto corev1.Protocol) error {
	var hints []string
	for _, b := range backends {
		hints = append(hints, fmt.Sprintf("  kubectl coastguard verdict --from %s --to %s/%s/%s --port %d/%s",
			src, dst.Cluster, b.pod.Namespace, b.pod.Name, b.port, proto))
	}
	if len(hints) == 0 {
		hints = []string{"  (it has no ready backend serving that port)"}
	}
	return fmt.Errorf("%s is headless: it has no ClusterIP, Lighthouse answers its backends' pod IPs and clients connect to those; ask per backend:\n%s",
		id, strings.Join(hints, "\n"))
}

// serviceTarget describes the Service port a verdict is about.
func serviceTarget(svc *corev1.Service, sport *corev1.ServicePort, dst Endpoint, cip string, port int, proto corev1.Protocol) *ServiceTarget {
	st := &ServiceTarget{Cluster: dst.Cluster, Namespace: dst.Namespace, Name: dst.Pod, ClusterIP: cip,
		Port: fmt.Sprintf("%d/%s", port, proto), TargetPort: sport.TargetPort.String(),
		Selector: labels.SelectorFromSet(svc.Spec.Selector).String()}
	if sport.TargetPort.Type == intstr.Int && sport.TargetPort.IntVal == 0 {
		st.TargetPort = fmt.Sprint(sport.Port)
	}
	return st
}

// serviceFlow is one pod-to-Service flow being evaluated.
type serviceFlow struct {
	l        *live
	src, dst Endpoint
	sp       *corev1.Pod
	proto    corev1.Protocol
	same     bool // the source is in the exporting cluster
}

// sides sets the verdict's egress and ingress before the backends: in
// another cluster the source's egress to the ClusterIP; in the same
// cluster both are decided per backend.
func (f *serviceFlow) sides(v *Verdict, cip string, port int, anyBackend bool) error {
	if !f.same {
		eg := &matcher.Traffic{Source: f.l.trafficPeer(f.src.Cluster, f.sp, true), Destination: &matcher.TrafficPeer{IP: cip},
			ResolvedPort: port, Protocol: f.proto}
		var err error
		if v.Egress, err = f.l.side(f.src.Cluster, eg, false); err != nil {
			return err
		}
		v.Egress.PeerAs = "ip " + cip // the ClusterIP
	}
	v.Ingress = Side{Cluster: f.dst.Cluster, PeerAs: "ip " + f.sp.Status.PodIP, Allowed: anyBackend}
	if f.same {
		v.Ingress.PeerAs = "pod"
		v.Egress = Side{Cluster: f.src.Cluster, PeerAs: "pod (per backend: kube-proxy translates the ClusterIP first)", Allowed: anyBackend}
	}
	return nil
}

// backends evaluates every backend (its ingress, and in the same cluster
// the source's egress to it), folds them into the verdict's sides, and
// returns how many admit the flow on ingress.
func (f *serviceFlow) backends(v *Verdict, backends []backend) (int, error) {
	nIn := 0
	for _, b := range backends {
		bv, err := f.backend(b)
		if err != nil {
			return 0, err
		}
		if bv.Egress != nil {
			v.Egress.Allowed = v.Egress.Allowed && bv.Egress.Allowed
			v.Egress.Isolated = v.Egress.Isolated || bv.Egress.Isolated
		}
		if bv.Ingress.Allowed {
			nIn++
		}
		v.Ingress.Isolated = v.Ingress.Isolated || bv.Ingress.Isolated
		v.Ingress.Allowed = v.Ingress.Allowed && bv.Ingress.Allowed
		v.Backends = append(v.Backends, bv)
	}
	return nIn, nil
}

// backend is the verdict of one backend.
func (f *serviceFlow) backend(b backend) (BackendVerdict, error) {
	bv := BackendVerdict{Pod: f.dst.Cluster + "/" + b.pod.Namespace + "/" + b.pod.Name, IP: b.pod.Status.PodIP,
		Port: fmt.Sprintf("%d/%s", b.port, f.proto)}
	in := &matcher.Traffic{Source: f.l.trafficPeer(f.src.Cluster, f.sp, f.same), Destination: f.l.trafficPeer(f.dst.Cluster, b.pod, true),
		ResolvedPort: b.port, ResolvedPortName: b.portName, Protocol: f.proto}
	var err error
	if bv.Ingress, err = f.l.side(f.dst.Cluster, in, true); err != nil {
		return bv, err
	}
	if !f.same {
		bv.Ingress.PeerAs = "ip " + f.sp.Status.PodIP
	}
	bv.Allowed = bv.Ingress.Allowed
	if f.same {
		eg := &matcher.Traffic{Source: f.l.trafficPeer(f.src.Cluster, f.sp, true), Destination: f.l.trafficPeer(f.dst.Cluster, b.pod, true),
			ResolvedPort: b.port, ResolvedPortName: b.portName, Protocol: f.proto}
		es, err := f.l.side(f.src.Cluster, eg, false)
		if err != nil {
			return bv, err
		}
		bv.Egress = &es
		bv.Allowed = bv.Allowed && es.Allowed
	}
	return bv, nil
}

// conclude sets the verdict's result and reason from its sides and
// backends (nIn of n backends admit the flow on ingress).
func (f *serviceFlow) conclude(v *Verdict, id, cip string, n, nIn int) {
	nOK := 0
	for _, b := range v.Backends {
		if b.Allowed {
			nOK++
		}
	}
	v.Allowed = n > 0 && nOK == n && v.Egress.Allowed
	switch {
	case n == 0:
		v.Reason = fmt.Sprintf("%s has no ready backend serving %s (selector %s): nothing answers the ClusterIP", id, v.Service.Port, v.Service.Selector)
	case v.Allowed:
	case f.same && nOK > 0:
		v.Reason = fmt.Sprintf("%d of %d backends admit the flow (egress and ingress): kube-proxy may pick any of them", nOK, n)
	case !f.same && !v.Egress.Allowed:
		v.Reason = fmt.Sprintf("the egress of %s denies the ClusterIP %s on %s", f.src, cip, v.Service.Port)
	case nIn > 0:
		v.Reason = fmt.Sprintf("%d of %d backends admit the flow: kube-proxy in %s may pick any of them", nIn, n, f.dst.Cluster)
	default:
		v.Reason = "no backend admits the flow"
	}
	v.Result = ResultDenied
	switch {
	case v.Allowed:
		v.Result = ResultAllowed
	case n > 0 && v.Egress.Allowed && nOK > 0 || f.same && nOK > 0:
		v.Result = ResultPartial
	}
}

// globalnetNotes warns, for each of the clusters that uses Globalnet,
// that the verdict evaluates ClusterIPs and pod IPs, not global IPs.
func globalnetNotes(nets map[string]enforce.ClusterNetworks, clusters ...string) []string {
	var notes []string
	for _, c := range clusters {
		if g := nets[c].GlobalCIDRs; len(g) > 0 {
			notes = append(notes, fmt.Sprintf("cluster %s uses Globalnet (global CIDR %s): there the client dials the Service's "+
				"global ingress IP and is seen by a global egress IP, which this verdict does not model (it evaluates the ClusterIP and pod IPs)",
				c, g[0]))
		}
	}
	return notes
}

type backend struct {
	pod      *corev1.Pod
	port     int
	portName string
}

// serviceBackends returns the Service's ready backends that serve the
// service port (the pods of its namespace its selector matches, with an
// IP and not terminated), and the others that match, with why they are
// left out.
func (l *live) serviceBackends(cluster string, svc *corev1.Service, sp *corev1.ServicePort) ([]backend, []string) {
	if len(svc.Spec.Selector) == 0 {
		return nil, []string{"the Service has no selector: its endpoints are managed by hand and not modelled"}
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var out []backend
	var excluded []string
	for i := range l.pods[cluster] {
		p := &l.pods[cluster][i]
		if p.Namespace != svc.Namespace || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		name := cluster + "/" + p.Namespace + "/" + p.Name
		port, portName, serves := backendPort(sp, p)
		switch {
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			excluded = append(excluded, name+": terminated")
		case p.Status.PodIP == "":
			excluded = append(excluded, name+": no IP")
		case !serves:
			excluded = append(excluded, fmt.Sprintf("%s: has no container port named %q (%s): not an endpoint of this port",
				name, sp.TargetPort.StrVal, protoText(sp.Protocol)))
		case !podReady(p) && !svc.Spec.PublishNotReadyAddresses:
			excluded = append(excluded, name+": not Ready: not an endpoint, receives no service traffic")
		default:
			out = append(out, backend{pod: p, port: port, portName: portName})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pod.Name < out[j].pod.Name })
	sort.Strings(excluded)
	return out, excluded
}

func protoText(p corev1.Protocol) string {
	if p == "" {
		return string(corev1.ProtocolTCP)
	}
	return string(p)
}

// egressNotes explains a denied egress to a remote ClusterIP: whether the
// egress admits the backends by pod IP (the pod path), and the exactness
// decision of the MCNPs whose generated policies select the source.
func (l *live) egressNotes(src Endpoint, sp *corev1.Pod, dst Endpoint, backends []backend, proto corev1.Protocol) []string {
	cluster := dst.Cluster
	var notes, admitted, denied []string
	for _, b := range backends {
		t := &matcher.Traffic{Source: l.trafficPeer(src.Cluster, sp, true), Destination: &matcher.TrafficPeer{IP: b.pod.Status.PodIP},
			ResolvedPort: b.port, Protocol: proto}
		s, err := l.side(src.Cluster, t, false)
		name := fmt.Sprintf("%s/%s/%s on %d", cluster, b.pod.Namespace, b.pod.Name, b.port)
		if err == nil && s.Allowed {
			admitted = append(admitted, name)
		} else {
			denied = append(denied, name)
		}
	}
	switch {
	case len(denied) == 0:
		notes = append(notes, fmt.Sprintf("the egress admits every backend by its pod IP on its target port, but not the ClusterIP: "+
			"a client that dials %s.%s.svc.clusterset.local is denied", dst.Pod, dst.Namespace))
	case len(admitted) > 0:
		notes = append(notes, fmt.Sprintf("the egress admits some backends by pod IP (%s) but not others (%s): "+
			"the exactness rule withholds the ClusterIP, as kube-proxy may pick any backend",
			strings.Join(admitted, ", "), strings.Join(denied, ", ")))
	}
	// The MCNPs generating policies that select the source for egress, and
	// what their translation says about this Service.
	svcID := dst.String()
	seen := map[string]bool{}
	for i := range l.netpols[src.Cluster] {
		np := withTypes(l.netpols[src.Cluster][i])
		origin := np.Annotations[enforce.AnnotationOrigin]
		if !generated(np) || origin == "" || seen[origin] || np.Namespace != src.Namespace {
			continue
		}
		_, egr := matcher.BuildTarget(np)
		if egr == nil || !egr.IsMatch(sp.Namespace, sp.Labels) {
			continue
		}
		seen[origin] = true
		parts := strings.SplitN(origin, "/", 3)
		if len(parts) != 3 {
			continue
		}
		res := l.admit(src.Cluster, enforce.PolicyRef{Origin: parts[0], Namespace: parts[1], Name: parts[2]})
		for _, d := range res.DegradedDetails {
			reason, rest, _ := strings.Cut(d, ": ")
			list, _, _ := strings.Cut(rest, " ")
			for _, s := range strings.Split(list, ",") {
				if s == svcID {
					notes = append(notes, fmt.Sprintf("MCNP %s is Degraded %s for %s: no address rule for its ClusterIP", origin, reason, svcID))
				}
			}
		}
	}
	return notes
}
