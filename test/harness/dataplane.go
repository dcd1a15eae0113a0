package harness

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// Dataplane gives the simulated clusters real packets (Options.Dataplane).
//
// Topology, all on this machine's kernel:
//
//   - An underlay bridge in the root namespace (cgbr<slot>, 172.(16+slot).0.1/16)
//     stands for the machines' network. The kube-apiservers listen on it too, so
//     node agents inside namespaces reach them.
//   - Every cluster has NodesPerCluster nodes, each a network namespace with
//     eth0 on the underlay (172.(16+slot).(cluster+1).(10+node)) and a Node
//     object in its apiserver. Node 0 is the cluster's gateway node
//     (submariner.io/gateway=true).
//   - Every Running pod with an IP gets a network namespace, a veth to its
//     node (the IP as /32, default route via 169.254.1.1, which resolves
//     statically to the node side, as Calico-style routed CNIs do) and a podagent process listening
//     on its container ports. The other nodes of the cluster route the /32 to
//     the pod's node.
//   - Clusters are joined as Submariner joins them without Globalnet: every
//     node routes the other clusters' pod and service CIDRs to its cluster's
//     gateway node, which routes them to the remote gateway node. A pod's
//     source IP arrives unchanged. There is no IPsec/WireGuard/VXLAN
//     encapsulation and no gateway failover: the "cable" is a plain routed
//     hop on the underlay.
//   - The NetworkPolicy engine is kube-router's network policy controller
//     (iptables + ipset), one process per node inside the node's namespace,
//     watching Pods, Namespaces and NetworkPolicies of its cluster.
type Dataplane struct {
	env     *Env
	owner   int
	prefix  string
	slot    int
	bridge  string
	rootIP  string
	agent   string
	router  string
	proxy   string
	nodes   map[string][]*Node // cluster name -> nodes
	mu      sync.Mutex
	pods    map[string]*dpPod // cluster/ns/name -> attached pod
	byIP    map[string]string // cluster/ip -> pod key
	seq     int
	engines []*Process
}

// NodesPerCluster is the number of nodes of every cluster on the dataplane.
const NodesPerCluster = 2

// Node is a simulated node: a network namespace on the underlay.
type Node struct {
	Name    string
	Cluster *Cluster
	Index   int
	NS      string
	IP      string
	Gateway bool
	Engine  *Process
	Proxy   *Process // kube-proxy, with Options.Services
}

type dpPod struct {
	key     string
	cluster *Cluster
	name    string // namespace/name
	ip      string
	node    *Node
	ns      string
	sock    string
	agent   *Process
	ports   []corev1.ContainerPort
	started time.Time
}

// Dataplane returns the Env's dataplane, or nil when Options.Dataplane is off.
func (e *Env) Dataplane() *Dataplane { return e.dp }

// underlaySlot picks a free /16 and bridge name for this Env.
func underlaySlot() (int, error) {
	for s := range 15 {
		if !linkExists("cgbr" + strconv.Itoa(s)) {
			return s, nil
		}
	}
	return 0, errors.New("harness dataplane: every underlay slot (cgbr0..cgbr14) is taken")
}

// newDataplane creates the underlay bridge. Nodes come later (addNodes),
// once the apiservers run.
func newDataplane(e *Env, owner int) (*Dataplane, error) {
	if err := CheckDataplaneSupport(); err != nil {
		return nil, err
	}
	router, err := Binary(e.BinDir, BinKubeRouter)
	if err != nil {
		return nil, err
	}
	proxy := ""
	if e.opts.Services {
		if proxy, err = Binary(e.BinDir, BinKubeProxy); err != nil {
			return nil, err
		}
	}
	agent, err := Build("./test/harness/internal/podagent")
	if err != nil {
		return nil, fmt.Errorf("harness dataplane: building podagent: %w", err)
	}
	sweepStaleDataplanes()
	slot, err := underlaySlot()
	if err != nil {
		return nil, err
	}
	dp := &Dataplane{
		env: e, owner: owner, slot: slot,
		prefix: fmt.Sprintf("%s%dx%d", dpPrefix, owner, envSeq.Load()),
		bridge: "cgbr" + strconv.Itoa(slot),
		rootIP: fmt.Sprintf("172.%d.0.1", 16+slot),
		agent:  agent, router: router, proxy: proxy,
		nodes: map[string][]*Node{}, pods: map[string]*dpPod{}, byIP: map[string]string{},
	}
	for _, args := range [][]string{
		{"link", "add", dp.bridge, "type", "bridge"},
		{"link", "set", dp.bridge, "alias", dp.prefix},
		{"addr", "add", dp.rootIP + "/16", "dev", dp.bridge},
		{"link", "set", dp.bridge, "up"},
	} {
		if err := ipCmd(args...); err != nil {
			_ = ipCmd("link", "del", dp.bridge)
			return nil, fmt.Errorf("harness dataplane: underlay: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(e.Dir, "pods"), 0o755); err != nil {
		return nil, err
	}
	return dp, nil
}

// nodeIP is the underlay address of node k of cluster i.
func (dp *Dataplane) nodeIP(i, k int) string {
	return fmt.Sprintf("172.%d.%d.%d", 16+dp.slot, i+1, 10+k)
}

// Nodes returns the nodes of a cluster.
func (dp *Dataplane) Nodes(c *Cluster) []*Node { return dp.nodes[c.Name] }

// addNodes creates every cluster's nodes, routes and engines.
func (dp *Dataplane) addNodes(ctx context.Context) error {
	for _, c := range dp.env.Clusters {
		for k := range NodesPerCluster {
			n, err := dp.addNode(ctx, c, k)
			if err != nil {
				return err
			}
			dp.nodes[c.Name] = append(dp.nodes[c.Name], n)
		}
	}
	for _, c := range dp.env.Clusters {
		if err := dp.routeRemotes(c); err != nil {
			return err
		}
	}
	for _, c := range dp.env.Clusters {
		for _, n := range dp.nodes[c.Name] {
			if err := dp.startEngine(c, n); err != nil {
				return err
			}
			if dp.env.opts.Services {
				if err := dp.startProxy(c, n); err != nil {
					return err
				}
			}
		}
	}
	for _, c := range dp.env.Clusters {
		for _, n := range dp.nodes[c.Name] {
			if err := dp.waitEngine(ctx, n); err != nil {
				return err
			}
		}
		// After kube-proxy, which puts its own POSTROUTING jump first.
		if err := dp.exemptRemotesFromMasquerade(c); err != nil {
			return err
		}
	}
	return nil
}

func (dp *Dataplane) addNode(ctx context.Context, c *Cluster, k int) (*Node, error) {
	n := &Node{
		Name:    fmt.Sprintf("%s-node-%d", c.Name, k),
		Cluster: c, Index: k,
		NS:      fmt.Sprintf("%s-%s-n%d", dp.prefix, c.Name, k),
		IP:      dp.nodeIP(c.Index, k),
		Gateway: k == 0,
	}
	hostVeth := fmt.Sprintf("cg%dc%dn%d", dp.slot, c.Index, k)
	steps := [][]string{
		{"netns", "add", n.NS},
		{"link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", n.NS},
		{"link", "set", hostVeth, "master", dp.bridge, "up"},
		{"-n", n.NS, "addr", "add", n.IP + "/16", "dev", "eth0"},
		{"-n", n.NS, "link", "set", "eth0", "up"},
		{"-n", n.NS, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return nil, fmt.Errorf("harness dataplane: node %s: %w", n.Name, err)
		}
	}
	for _, kv := range [][2]string{{"net.ipv4.ip_forward", "1"}, {"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"}} {
		if err := sysctlIn(n.NS, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("harness dataplane: node %s: %w", n.Name, err)
		}
	}
	labels := map[string]string{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux"}
	if n.Gateway {
		labels["submariner.io/gateway"] = "true"
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP}, {Type: corev1.NodeHostName, Address: n.Name}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
		},
	}
	created, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("harness dataplane: Node %s: %w", n.Name, err)
	}
	if err == nil {
		created.Status = node.Status
		if _, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("harness dataplane: Node %s status: %w", n.Name, err)
		}
	}
	return n, nil
}

// routeRemotes routes the other clusters' pod and service CIDRs through the
// gateway node, as Submariner's route agent and gateway do.
func (dp *Dataplane) routeRemotes(c *Cluster) error {
	gw := dp.nodes[c.Name][0]
	for _, r := range dp.env.Clusters {
		if r == c {
			continue
		}
		rgw := dp.nodes[r.Name][0]
		for _, cidr := range []string{r.PodCIDR, r.ServiceCIDR} {
			for _, n := range dp.nodes[c.Name] {
				via := gw.IP
				if n.Gateway {
					via = rgw.IP
				}
				if err := ipCmd("-n", n.NS, "route", "replace", cidr, "via", via); err != nil {
					return fmt.Errorf("harness dataplane: route %s on %s: %w", cidr, n.Name, err)
				}
			}
		}
	}
	return nil
}

// nodeKubeconfig writes a kubeconfig that reaches the apiserver from inside
// a namespace (through the underlay bridge address).
func (dp *Dataplane) nodeKubeconfig(c *Cluster) (string, error) {
	path := filepath.Join(c.Dir, "kubeconfig-node")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", err
	}
	port := c.Server[strings.LastIndex(c.Server, ":")+1:]
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + dp.rootIP + ":" + port
		cl.TLSServerName = "localhost"
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

func (dp *Dataplane) startEngine(c *Cluster, n *Node) error {
	kc, err := dp.nodeKubeconfig(c)
	if err != nil {
		return err
	}
	args := []string{"netns", "exec", n.NS, dp.router,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--enable-cni=false",
		"--kubeconfig=" + kc,
		"--hostname-override=" + n.Name,
		"--service-cluster-ip-range=" + c.ServiceCIDR,
		"--health-port=0",
		"--v=1",
	}
	p, err := startProcess(dp.env.procSpec("kube-router/"+n.Name, "ip", args, "kube-router-"+n.Name+".log"))
	if err != nil {
		return err
	}
	n.Engine = p
	dp.engines = append(dp.engines, p)
	return nil
}

// waitEngine waits until kube-router has programmed its base chains (and
// kube-proxy its service chain and its POSTROUTING jump: kube-proxy
// prepends that jump after creating KUBE-SERVICES, and the route agent's
// chain must go in front of it, or traffic from the other clusters is
// masqueraded; CI once saw a remote ClusterIP's backend get the node's
// address under load).
func (dp *Dataplane) waitEngine(ctx context.Context, n *Node) error {
	err := waitReady(ctx, n.Engine, 60*time.Second, func(context.Context) error {
		_, err := inNetns(n.NS, "iptables", "-w", "-S", "KUBE-ROUTER-FORWARD")
		return err
	})
	if err != nil || n.Proxy == nil {
		return err
	}
	return waitReady(ctx, n.Proxy, 60*time.Second, func(context.Context) error {
		if _, err := inNetns(n.NS, "iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES"); err != nil {
			return err
		}
		out, err := inNetns(n.NS, "iptables", "-w", "-t", "nat", "-S", "POSTROUTING")
		if err == nil && !strings.Contains(string(out), "-j KUBE-POSTROUTING") {
			err = errors.New("kube-proxy has not installed its POSTROUTING jump yet")
		}
		return err
	})
}

// startProxy runs kube-proxy in iptables mode in the node's namespace.
// --cluster-cidr makes it masquerade service traffic from outside the
// cluster's pod CIDR, as in a real cluster; see
// exemptRemotesFromMasquerade for what Submariner does about it.
func (dp *Dataplane) startProxy(c *Cluster, n *Node) error {
	kc, err := dp.nodeKubeconfig(c)
	if err != nil {
		return err
	}
	args := []string{"netns", "exec", n.NS, dp.proxy,
		"--kubeconfig=" + kc,
		"--hostname-override=" + n.Name,
		"--proxy-mode=iptables",
		"--cluster-cidr=" + c.PodCIDR,
		"--conntrack-max-per-core=0",
		"--v=1",
	}
	p, err := startProcess(dp.env.procSpec("kube-proxy/"+n.Name, "ip", args, "kube-proxy-"+n.Name+".log"))
	if err != nil {
		return err
	}
	n.Proxy = p
	dp.engines = append(dp.engines, p)
	return nil
}

// RouteAgentChain is the nat chain that stands for Submariner's route
// agent on every node: traffic between this cluster and the other
// clusters' pod CIDRs is never masqueraded, so source IPs stay unchanged
// across the cable (without Globalnet) and kube-proxy's "traffic from
// outside the cluster CIDR" masquerade does not apply to it.
const RouteAgentChain = "SUBMARINER-POSTROUTING"

func (dp *Dataplane) exemptRemotesFromMasquerade(c *Cluster) error {
	for _, n := range dp.nodes[c.Name] {
		// Like the route agent, go before kube-proxy's KUBE-POSTROUTING.
		rules := [][]string{{"-t", "nat", "-N", RouteAgentChain}, {"-t", "nat", "-I", "POSTROUTING", "1", "-j", RouteAgentChain}}
		for _, r := range dp.env.Clusters {
			if r != c {
				rules = append(rules,
					[]string{"-t", "nat", "-A", RouteAgentChain, "-s", r.PodCIDR, "-j", "ACCEPT"},
					[]string{"-t", "nat", "-A", RouteAgentChain, "-d", r.PodCIDR, "-j", "ACCEPT"})
			}
		}
		for _, r := range rules {
			if _, err := inNetns(n.NS, append([]string{"iptables", "-w"}, r...)...); err != nil {
				return fmt.Errorf("harness dataplane: route agent rules on %s: %w", n.Name, err)
			}
		}
	}
	return nil
}

// pickNode spreads pods over a cluster's nodes by name.
func (dp *Dataplane) pickNode(c *Cluster, ns, name string) *Node {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ns + "/" + name))
	nodes := dp.nodes[c.Name]
	return nodes[int(h.Sum32())%len(nodes)]
}

// NodeOf returns the node a pod is (or would be) placed on.
func (dp *Dataplane) NodeOf(c *Cluster, pod *corev1.Pod) *Node {
	for _, n := range dp.nodes[c.Name] {
		if n.Name == pod.Spec.NodeName {
			return n
		}
	}
	return dp.pickNode(c, pod.Namespace, pod.Name)
}

// bind schedules an unscheduled pod onto its node (pods/binding, as the
// scheduler does).
func (dp *Dataplane) bind(ctx context.Context, c *Cluster, pod *corev1.Pod) (*Node, error) {
	n := dp.NodeOf(c, pod)
	if pod.Spec.NodeName != "" {
		return n, nil
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: n.Name},
	}
	if err := c.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("harness dataplane: binding %s/%s to %s: %w", pod.Namespace, pod.Name, n.Name, err)
	}
	return n, nil
}

func podKey(c *Cluster, ns, name string) string { return c.Name + "/" + ns + "/" + name }

// attach gives a pod its network namespace, interface, routes and agent.
// A pod that is already attached with the same IP is left alone; another
// pod holding the IP is detached first (IP reuse).
func (dp *Dataplane) attach(c *Cluster, pod *corev1.Pod, n *Node, ip string) error {
	if _, err := netip.ParseAddr(ip); err != nil {
		return fmt.Errorf("harness dataplane: pod IP %q: %w", ip, err)
	}
	key := podKey(c, pod.Namespace, pod.Name)
	dp.mu.Lock()
	defer dp.mu.Unlock()
	if p, ok := dp.pods[key]; ok {
		if p.ip == ip {
			return nil
		}
		dp.detachLocked(p)
	}
	if other, ok := dp.byIP[c.Name+"/"+ip]; ok {
		dp.detachLocked(dp.pods[other])
	}
	dp.seq++
	p := &dpPod{
		key: key, cluster: c, name: pod.Namespace + "/" + pod.Name, ip: ip, node: n,
		ns:    fmt.Sprintf("%s-%s-p%d", dp.prefix, c.Name, dp.seq),
		sock:  filepath.Join(dp.env.Dir, "pods", fmt.Sprintf("p%d.sock", dp.seq)),
		ports: podPorts(pod),
	}
	if err := dp.plumb(p, fmt.Sprintf("vp%d", dp.seq)); err != nil {
		_ = ipCmd("netns", "del", p.ns)
		return err
	}
	if err := dp.startAgent(p); err != nil {
		_ = ipCmd("netns", "del", p.ns)
		return err
	}
	p.started = time.Now()
	dp.pods[key] = p
	dp.byIP[c.Name+"/"+ip] = key
	return nil
}

func podPorts(pod *corev1.Pod) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, ct := range pod.Spec.InitContainers {
		if ct.RestartPolicy != nil && *ct.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, ct.Ports...)
		}
	}
	for _, ct := range pod.Spec.Containers {
		out = append(out, ct.Ports...)
	}
	return out
}

// hostVethMAC is the MAC of every node-side pod veth; the pod's gateway
// 169.254.1.1 resolves to it statically (as Calico does), so no proxy ARP
// or node address on the veth is needed.
const hostVethMAC = "ee:ee:ee:ee:ee:ee"

func (dp *Dataplane) plumb(p *dpPod, veth string) error {
	n := p.node
	steps := [][]string{
		{"netns", "add", p.ns},
		{"-n", n.NS, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", p.ns},
		{"-n", p.ns, "addr", "add", p.ip + "/32", "dev", "eth0"},
		{"-n", p.ns, "link", "set", "eth0", "up"},
		{"-n", p.ns, "link", "set", "lo", "up"},
		{"-n", n.NS, "link", "set", veth, "address", hostVethMAC},
		{"-n", p.ns, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link"},
		{"-n", p.ns, "neigh", "replace", "169.254.1.1", "lladdr", hostVethMAC, "dev", "eth0", "nud", "permanent"},
		{"-n", p.ns, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0"},
		{"-n", n.NS, "link", "set", veth, "up"},
		{"-n", n.NS, "route", "replace", p.ip + "/32", "dev", veth},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return fmt.Errorf("harness dataplane: pod %s: %w", p.name, err)
		}
	}
	for _, o := range dp.nodes[p.cluster.Name] {
		if o == n {
			continue
		}
		if err := ipCmd("-n", o.NS, "route", "replace", p.ip+"/32", "via", n.IP); err != nil {
			return fmt.Errorf("harness dataplane: pod %s: %w", p.name, err)
		}
	}
	return nil
}

func (dp *Dataplane) startAgent(p *dpPod) error {
	var listen []string
	seen := map[string]bool{}
	for _, cp := range p.ports {
		proto := strings.ToLower(string(cp.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		if proto == "sctp" {
			continue // this kernel has no SCTP (see docs/ARCHITECTURE.md)
		}
		item := proto + ":" + strconv.Itoa(int(cp.ContainerPort))
		if !seen[item] {
			seen[item] = true
			listen = append(listen, item)
		}
	}
	sort.Strings(listen)
	args := []string{"netns", "exec", p.ns, dp.agent, "--name", p.name, "--listen", strings.Join(listen, ","), "--control", p.sock}
	logName := "pod-" + strings.ReplaceAll(p.key, "/", "_") + ".log"
	proc, err := startProcess(dp.env.procSpec("pod/"+p.key, "ip", args, logName))
	if err != nil {
		return err
	}
	p.agent = proc
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p.sock); err == nil {
			return nil
		}
		if !proc.Running() {
			tail, _ := proc.TailLog(5)
			return fmt.Errorf("harness dataplane: podagent for %s exited: %s", p.name, tail)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = proc.Kill()
	return fmt.Errorf("harness dataplane: podagent for %s did not open its control socket", p.name)
}

// detach removes a pod's namespace, routes and agent. It is idempotent.
func (dp *Dataplane) detach(c *Cluster, ns, name string) {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	if p, ok := dp.pods[podKey(c, ns, name)]; ok {
		dp.detachLocked(p)
	}
}

func (dp *Dataplane) detachLocked(p *dpPod) {
	if p.agent != nil {
		_ = p.agent.Stop(2 * time.Second)
	}
	_ = ipCmd("netns", "del", p.ns)
	for _, o := range dp.nodes[p.cluster.Name] {
		if o != p.node {
			_ = ipCmd("-n", o.NS, "route", "del", p.ip+"/32", "via", p.node.IP)
		}
	}
	_ = os.Remove(p.sock)
	delete(dp.pods, p.key)
	delete(dp.byIP, p.cluster.Name+"/"+p.ip)
}

// engineProcesses lists the NetworkPolicy engines' processes.
func (dp *Dataplane) engineProcesses() []*Process {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	return append([]*Process(nil), dp.engines...)
}

// close stops the agents and engines and removes every namespace and the
// underlay bridge.
func (dp *Dataplane) close() error {
	dp.mu.Lock()
	for _, p := range dp.pods {
		if p.agent != nil {
			_ = p.agent.Kill()
		}
	}
	dp.mu.Unlock()
	for _, e := range dp.engines {
		_ = e.Kill()
	}
	return removeDataplane(dp.prefix, dp.bridge)
}

// EnableGlobalnet makes cluster c a Globalnet cluster on the dataplane, as
// Submariner's Globalnet does for cluster-wide egress: its gateway node
// source-NATs every packet its pods send to another cluster to egressIPs
// (a range "first-last" or one address, from globalCIDR), and every other
// cluster routes globalCIDR to c's gateway, where replies are translated
// back. The ingress side for exported Services is ExposeGlobalIngressIP.
// Per-namespace and per-pod GlobalEgressIPs and the per-pod global IPs of
// headless Services are not modelled.
func (dp *Dataplane) EnableGlobalnet(c *Cluster, globalCIDR, egressIPs string) error {
	if err := dp.routeToGateway(c, globalCIDR); err != nil {
		return err
	}
	gw := dp.nodes[c.Name][0]
	for _, r := range dp.env.Clusters {
		if r == c {
			continue
		}
		// Before the route agent's exemption, which would skip the SNAT.
		for _, cidr := range []string{r.PodCIDR, r.ServiceCIDR} {
			if _, err := inNetns(gw.NS, "iptables", "-w", "-t", "nat", "-I", RouteAgentChain, "1",
				"-s", c.PodCIDR, "-d", cidr, "-j", "SNAT", "--to-source", egressIPs); err != nil {
				return fmt.Errorf("harness dataplane: Globalnet SNAT on %s: %w", gw.Name, err)
			}
		}
	}
	return nil
}

// routeToGateway routes cidr from every node of every other cluster to
// c's gateway node (through their own gateway), as the cable does for a
// Globalnet cluster's global addresses.
func (dp *Dataplane) routeToGateway(c *Cluster, cidr string) error {
	gw := dp.nodes[c.Name][0]
	for _, r := range dp.env.Clusters {
		if r == c {
			continue
		}
		for _, n := range dp.nodes[r.Name] {
			via := dp.nodes[r.Name][0].IP
			if n.Gateway {
				via = gw.IP
			}
			if err := ipCmd("-n", n.NS, "route", "replace", cidr, "via", via); err != nil {
				return fmt.Errorf("harness dataplane: Globalnet route %s on %s: %w", cidr, n.Name, err)
			}
		}
	}
	return nil
}

// GlobalIngressService is the name of the Service that carries the global
// ingress IP of Service name (ExposeGlobalIngressIP).
func GlobalIngressService(name string) string { return "submariner-gn-" + name }

// ExposeGlobalIngressIP is Globalnet's ingress side for the exported
// ClusterIP Service ns/name of cluster c (run EnableGlobalnet first): the
// Service becomes reachable from every other cluster at globalIP, which
// c's kube-proxy translates to one of its backends. It does what
// Submariner's globalnet controller does for a GlobalIngressIP of target
// ClusterIPService (pkg/globalnet/controllers/global_ingressip_controller.go):
// it creates an internal Service GlobalIngressService(name) with the
// Service's selector and ports and externalIPs [globalIP], so kube-proxy
// programs the DNAT on every node, c's gateway included (a DNAT to the
// ClusterIP in a chain of its own would not work: a connection gets one
// destination NAT, so kube-proxy would never translate the ClusterIP). It
// also routes globalIP to c's gateway from the other clusters, in case it
// lies outside the routed global CIDR (a claim coastguard must refuse).
// Calling it again moves the Service to another global IP.
func (dp *Dataplane) ExposeGlobalIngressIP(ctx context.Context, c *Cluster, ns, name, globalIP string) error {
	if !dp.env.opts.Services {
		return errors.New("harness dataplane: ExposeGlobalIngressIP needs Options.Services (kube-proxy)")
	}
	if _, err := netip.ParseAddr(globalIP); err != nil {
		return fmt.Errorf("harness dataplane: global IP %q: %w", globalIP, err)
	}
	svc, err := c.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("harness dataplane: Service %s/%s: %w", ns, name, err)
	}
	internal := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: GlobalIngressService(name),
			Labels: map[string]string{"submariner.io/exportedServiceRef": name}},
		Spec: corev1.ServiceSpec{Selector: svc.Spec.Selector, Ports: svc.Spec.Ports, ExternalIPs: []string{globalIP}},
	}
	for i := range internal.Spec.Ports {
		internal.Spec.Ports[i].NodePort = 0
	}
	cur, err := c.Client.CoreV1().Services(ns).Get(ctx, internal.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Client.CoreV1().Services(ns).Create(ctx, internal, metav1.CreateOptions{})
	case err == nil:
		cur.Spec.Selector, cur.Spec.Ports, cur.Spec.ExternalIPs = internal.Spec.Selector, internal.Spec.Ports, internal.Spec.ExternalIPs
		_, err = c.Client.CoreV1().Services(ns).Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("harness dataplane: internal Service for %s/%s: %w", ns, name, err)
	}
	return dp.routeToGateway(c, globalIP+"/32")
}
