package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// Endpoint is CLUSTER/NS/POD.
type Endpoint struct {
	Cluster, Namespace, Pod string
}

func (e Endpoint) String() string { return e.Cluster + "/" + e.Namespace + "/" + e.Pod }

// ParseEndpoint parses CLUSTER/NAMESPACE/POD.
func ParseEndpoint(s string) (Endpoint, error) {
	p := strings.Split(s, "/")
	if len(p) != 3 || p[0] == "" || p[1] == "" || p[2] == "" {
		return Endpoint{}, fmt.Errorf("%q: want CLUSTER/NAMESPACE/POD", s)
	}
	return Endpoint{p[0], p[1], p[2]}, nil
}

// ParsePort parses PORT[/PROTO] (TCP when absent).
func ParsePort(s string) (int, corev1.Protocol, error) {
	num, proto, _ := strings.Cut(s, "/")
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 65535 {
		return 0, "", fmt.Errorf("port %q: want 1-65535[/TCP|UDP|SCTP]", s)
	}
	pr := corev1.Protocol(strings.ToUpper(proto))
	switch pr {
	case "":
		pr = corev1.ProtocolTCP
	case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
	default:
		return 0, "", fmt.Errorf("protocol %q: want TCP, UDP or SCTP", proto)
	}
	return n, pr, nil
}

// Decision is one policy's say on one side.
type Decision struct {
	Policy    string   `json:"policy"` // namespace/name
	Generated bool     `json:"generated"`
	Origin    string   `json:"origin,omitempty"` // MCNP origin/ns/name for generated policies
	Allows    bool     `json:"allows"`
	Rules     []string `json:"rules,omitempty"` // rules that admit the flow, e.g. egress[1]
}

// Side is the verdict of one end.
type Side struct {
	Cluster   string     `json:"cluster"`
	Isolated  bool       `json:"isolated"` // some policy selects the pod for this direction
	Allowed   bool       `json:"allowed"`
	PeerAs    string     `json:"peerAs"` // how the other end is seen: "pod" or "ip <addr>"
	Decisions []Decision `json:"decisions,omitempty"`
}

// Verdict is the verdict document. For a flow to a Service (--to
// CLUSTER/NS/service/NAME), To is that spelling, Port the service port,
// Service says which address was evaluated, Backends holds one verdict per
// ready backend, and Ingress sums them up (allowed when every backend
// admits the flow; its decisions are per backend).
type Verdict struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Port    string `json:"port"`
	Allowed bool   `json:"allowed"`
	// Result is ALLOWED, DENIED, or PARTIAL (a Service some of whose
	// backends admit the flow: Allowed is false).
	Result  string `json:"result"`
	Egress  Side   `json:"egress"`
	Ingress Side   `json:"ingress"`
	// Service flows only.
	Service  *ServiceTarget   `json:"service,omitempty"`
	Backends []BackendVerdict `json:"backends,omitempty"`
	// Excluded lists the pods the Service selects that are not endpoints of
	// the port, with why (not Ready, no such named port, terminated).
	Excluded []string `json:"excluded,omitempty"`
	// Reason says why a Service flow is denied or partial; Notes explain a
	// denied egress to a remote ClusterIP (the exactness rule) and name
	// what the verdict does not model (Globalnet).
	Reason string   `json:"reason,omitempty"`
	Notes  []string `json:"notes,omitempty"`
}

func newVerdictCmd(o *Options) *cobra.Command {
	var from, to, port string
	var exitCode bool
	cmd := &cobra.Command{
		Use:   "verdict --from CLUSTER/NS/POD --to CLUSTER/NS/POD|CLUSTER/NS/service/NAME --port PORT[/PROTO]",
		Short: "Is this flow allowed? Evaluates every NetworkPolicy on both ends and names the deciding policies and rules",
		Long: `Is this flow allowed? Evaluates every NetworkPolicy on both ends and names the deciding policies and rules.

--to CLUSTER/NAMESPACE/service/NAME is a flow to an exported Service's ClusterIP on a
service port (--port), as a client that dials NAME.NAMESPACE.svc.clusterset.local
sends it: the source's egress is evaluated for the ClusterIP, and the ingress of
every ready backend for the source's pod IP on the port that backend serves. The
flow is ALLOWED only if every backend admits it (PARTIAL when some do).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := o.runVerdict(cmd.Context(), from, to, port)
			if err != nil {
				return err
			}
			if err := o.print(v, func(w *strings.Builder) { printVerdict(w, v) }); err != nil {
				return err
			}
			return verdictExit(v, exitCode)
		},
	}
	cmd.Flags().BoolVar(&exitCode, "exit-code", false, "exit 2 when the flow is DENIED (0 when ALLOWED, 1 on an error)")
	cmd.Flags().StringVar(&from, "from", "", "source CLUSTER/NAMESPACE/POD (cluster ID or context)")
	cmd.Flags().StringVar(&to, "to", "", "destination CLUSTER/NAMESPACE/POD, or CLUSTER/NAMESPACE/service/NAME for an exported Service's ClusterIP")
	cmd.Flags().StringVar(&port, "port", "", "destination PORT[/PROTO], e.g. 8080/TCP (for a Service: the service port)")
	for _, f := range []string{"from", "to", "port"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

// runVerdict parses verdict's flags, connects to the clusters the two ends
// name and evaluates the flow (to a pod, or to a Service's ClusterIP).
func (o *Options) runVerdict(ctx context.Context, from, to, port string) (*Verdict, error) {
	src, err := ParseEndpoint(from)
	if err != nil {
		return nil, err
	}
	tgt, err := ParseTarget(to)
	if err != nil {
		return nil, err
	}
	dst := tgt.Endpoint
	pn, proto, err := ParsePort(port)
	if err != nil {
		return nil, err
	}
	ms, err := o.connect(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range []*Endpoint{&src, &dst} {
		m, err := o.find(ms, e.Cluster)
		if err != nil {
			return nil, err
		}
		e.Cluster = m.ID
	}
	l, err := o.load(ctx, ms)
	if err != nil {
		return nil, err
	}
	if tgt.Service {
		return verdictService(l, src, dst, pn, proto)
	}
	return verdict(l, src, dst, pn, proto)
}

// verdictExit is verdict's answer as an exit code: ExitDenied for a denied
// flow when --exit-code asks for it.
func verdictExit(v *Verdict, exitCode bool) error {
	if exitCode && !v.Allowed {
		return &ExitError{Code: ExitDenied}
	}
	return nil
}

func (l *live) trafficPeer(cluster string, p *corev1.Pod, internal bool) *matcher.TrafficPeer {
	tp := &matcher.TrafficPeer{IP: p.Status.PodIP}
	if internal {
		nl := map[string]string{corev1.LabelMetadataName: p.Namespace}
		for k, v := range l.ns[cluster][p.Namespace] {
			nl[k] = v
		}
		tp.Internal = &matcher.InternalPeer{PodLabels: p.Labels, NamespaceLabels: nl, Namespace: p.Namespace}
	}
	return tp
}

// verdict evaluates the source's egress with its own cluster's policies and
// the destination's ingress with its cluster's policies. A peer in another
// cluster is seen by its pod IP (that is how generated policies admit it);
// in the same cluster it is seen as a pod.
func verdict(l *live, src, dst Endpoint, port int, proto corev1.Protocol) (*Verdict, error) {
	sp, err := l.pod(src.Cluster, src.Namespace, src.Pod)
	if err != nil {
		return nil, err
	}
	dp, err := l.pod(dst.Cluster, dst.Namespace, dst.Pod)
	if err != nil {
		return nil, err
	}
	if sp.Status.PodIP == "" || dp.Status.PodIP == "" {
		return nil, fmt.Errorf("both pods need an IP (source %q, destination %q)", sp.Status.PodIP, dp.Status.PodIP)
	}
	same := src.Cluster == dst.Cluster
	portName := ""
	for _, cp := range kube.ServingPorts(dp) { // containers and sidecars
		pr := cp.Protocol
		if pr == "" {
			pr = corev1.ProtocolTCP
		}
		if int(cp.ContainerPort) == port && pr == proto {
			portName = cp.Name
		}
	}
	v := &Verdict{From: src.String(), To: dst.String(), Port: fmt.Sprintf("%d/%s", port, proto)}
	eg := &matcher.Traffic{Source: l.trafficPeer(src.Cluster, sp, true), Destination: l.trafficPeer(dst.Cluster, dp, same),
		ResolvedPort: port, ResolvedPortName: portName, Protocol: proto}
	in := &matcher.Traffic{Source: l.trafficPeer(src.Cluster, sp, same), Destination: l.trafficPeer(dst.Cluster, dp, true),
		ResolvedPort: port, ResolvedPortName: portName, Protocol: proto}
	if v.Egress, err = l.side(src.Cluster, eg, false); err != nil {
		return nil, err
	}
	if v.Ingress, err = l.side(dst.Cluster, in, true); err != nil {
		return nil, err
	}
	if !same {
		v.Egress.PeerAs, v.Ingress.PeerAs = "ip "+dp.Status.PodIP, "ip "+sp.Status.PodIP
	}
	v.Allowed = v.Egress.Allowed && v.Ingress.Allowed
	v.Result = ResultDenied
	if v.Allowed {
		v.Result = ResultAllowed
	}
	return v, nil
}

func withTypes(np networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	if len(np.Spec.PolicyTypes) == 0 {
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) > 0 {
			np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
	return &np
}

// side evaluates every NetworkPolicy of a cluster for one direction with
// cyclonus' matcher, per policy and per rule.
func (l *live) side(cluster string, t *matcher.Traffic, ingress bool) (s Side, err error) {
	defer func() {
		if r := recover(); r != nil { // the matcher panics on malformed policies
			err = fmt.Errorf("evaluating the NetworkPolicies of %s: %v", cluster, r)
		}
	}()
	s = Side{Cluster: cluster, PeerAs: "pod"}
	var all []*networkingv1.NetworkPolicy
	for i := range l.netpols[cluster] {
		all = append(all, withTypes(l.netpols[cluster][i]))
	}
	dir := l.evaluate(all, t, ingress)
	s.Allowed = dir.IsAllowed()
	s.Isolated = len(dir.AllowingTargets)+len(dir.DenyingTargets) > 0
	target, peer := t.Source, t.Destination
	if ingress {
		target, peer = t.Destination, t.Source
	}
	for _, np := range all {
		ing, egr := matcher.BuildTarget(np)
		tg := egr
		if ingress {
			tg = ing
		}
		if tg == nil || !tg.IsMatch(target.Internal.Namespace, target.Internal.PodLabels) {
			continue
		}
		d := Decision{Policy: np.Namespace + "/" + np.Name, Generated: generated(np), Origin: np.Annotations[enforce.AnnotationOrigin]}
		if ingress {
			for i, r := range np.Spec.Ingress {
				if anyAllows(matcher.BuildPeerMatcher(np.Namespace, r.Ports, r.From), peer, t) {
					d.Rules = append(d.Rules, fmt.Sprintf("ingress[%d]", i))
				}
			}
		} else {
			for i, r := range np.Spec.Egress {
				if anyAllows(matcher.BuildPeerMatcher(np.Namespace, r.Ports, r.To), peer, t) {
					d.Rules = append(d.Rules, fmt.Sprintf("egress[%d]", i))
				}
			}
		}
		d.Allows = len(d.Rules) > 0
		s.Decisions = append(s.Decisions, d)
	}
	sort.Slice(s.Decisions, func(i, j int) bool { return s.Decisions[i].Policy < s.Decisions[j].Policy })
	return s, nil
}

func (l *live) evaluate(nps []*networkingv1.NetworkPolicy, t *matcher.Traffic, ingress bool) *matcher.DirectionResult {
	return matcher.BuildNetworkPolicies(false, nps).IsIngressOrEgressAllowed(t, ingress)
}

func anyAllows(ms []matcher.PeerMatcher, peer *matcher.TrafficPeer, t *matcher.Traffic) bool {
	for _, m := range ms {
		if m.Allows(peer, t.ResolvedPort, t.ResolvedPortName, t.Protocol) {
			return true
		}
	}
	return false
}

func printVerdict(w *strings.Builder, v *Verdict) {
	if v.Service != nil {
		printServiceVerdict(w, v)
		return
	}
	fmt.Fprintf(w, "%s -> %s on %s: %s\n", v.From, v.To, v.Port, v.Result)
	printSide(w, "egress", "", v.Egress)
	printSide(w, "ingress", "", v.Ingress)
}

var allowedWord = map[bool]string{true: "ALLOWED", false: "DENIED"}

func printSide(w *strings.Builder, name, what string, s Side) {
	fmt.Fprintf(w, "\n%s in %s%s (peer seen as %s): %s\n", name, s.Cluster, what, s.PeerAs, allowedWord[s.Allowed])
	if !s.Isolated {
		fmt.Fprintf(w, "  no NetworkPolicy selects the pod for %s: allowed by default\n", name)
		return
	}
	for _, d := range s.Decisions {
		kind := "user NetworkPolicy"
		if d.Generated {
			kind = "from MCNP " + d.Origin
		}
		if d.Allows {
			fmt.Fprintf(w, "  allows  %s %s (%s)\n", d.Policy, strings.Join(d.Rules, ","), kind)
		} else {
			fmt.Fprintf(w, "  selects %s, no rule admits the flow (%s)\n", d.Policy, kind)
		}
	}
}

func printServiceVerdict(w *strings.Builder, v *Verdict) {
	s := v.Service
	fmt.Fprintf(w, "%s -> %s (ClusterIP %s) on %s: %s\n", v.From, s, s.ClusterIP, v.Port, v.Result)
	if v.Reason != "" {
		fmt.Fprintf(w, "  %s\n", v.Reason)
	}
	fmt.Fprintf(w, "  targetPort %s, selector %s, %d ready backend(s)\n", s.TargetPort, s.Selector, len(v.Backends))
	if v.Egress.Cluster != s.Cluster {
		printSide(w, "egress", "", v.Egress)
	}
	for _, b := range v.Backends {
		what := fmt.Sprintf(", backend %s %s on %s", b.Pod, b.IP, b.Port)
		if b.Egress != nil {
			printSide(w, "egress", what, *b.Egress)
		}
		printSide(w, "ingress", what, b.Ingress)
	}
	if len(v.Excluded) > 0 {
		fmt.Fprintln(w, "\nnot endpoints of this port:")
		for _, x := range v.Excluded {
			fmt.Fprintf(w, "  %s\n", x)
		}
	}
	if len(v.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range v.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}
