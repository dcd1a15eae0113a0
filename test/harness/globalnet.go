package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GlobalnetMesh is a cluster set on the dataplane in which every cluster
// runs Submariner's Globalnet, modelled with the chains Globalnet programs
// on the active gateway (submariner-io/submariner pkg/globalnet):
//
//   - Pod and service CIDRs are not routed between clusters any more: a pod
//     cannot reach another cluster's pod IPs (they may even overlap).
//   - Every node routes the other clusters' global CIDRs to its gateway
//     node, and the gateway to the owner's gateway.
//   - Gateway, nat PREROUTING first: SUBMARINER-GN-INGRESS, DNAT of each
//     allocated per-pod global IP to the pod IP (AllocatePodGlobalIP).
//   - Gateway, nat POSTROUTING first: SUBMARINER-GN-EGRESS, which jumps to
//     SUBMARINER-GN-MARK (mark traffic to other clusters' global CIDRs),
//     SM-GN-EGRESS-HDLS-PODS (SNAT a headless Service backend's pod IP to
//     its own global IP) and SM-GN-EGRESS-CLUSTER (SNAT every other pod to
//     the cluster's egress IP).
//
// Replies are translated back by conntrack at both gateways.
type GlobalnetMesh struct {
	dp     *Dataplane
	mu     sync.Mutex
	global map[string]netip.Prefix // cluster -> global CIDR
	next   map[string]netip.Addr   // cluster -> next per-pod global IP
}

// Globalnet chain names, as Submariner's globalnet controller calls them.
const (
	GNIngressChain  = "SUBMARINER-GN-INGRESS"
	GNEgressChain   = "SUBMARINER-GN-EGRESS"
	GNMarkChain     = "SUBMARINER-GN-MARK"
	GNHeadlessChain = "SM-GN-EGRESS-HDLS-PODS"
	GNClusterChain  = "SM-GN-EGRESS-CLUSTER"
	gnMark          = "0xc0000/0xc0000"
)

// GlobalIngressIPGVR is Submariner's GlobalIngressIP (install
// test/e2e/testdata/crds first).
var GlobalIngressIPGVR = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "globalingressips"}

// ClusterEgressIP is the cluster-wide global egress IP the mesh SNATs to:
// the first address of the cluster's global CIDR.
func (g *GlobalnetMesh) ClusterEgressIP(c *Cluster) string {
	return g.global[c.Name].Addr().Next().String()
}

// EnableGlobalnetMesh makes every cluster of the Env a Globalnet cluster
// with its global CIDR (by cluster name; an IPv4 /24 or larger). Call it
// once, before pods that need per-pod global IPs are attached.
func (dp *Dataplane) EnableGlobalnetMesh(globalCIDRs map[string]string) (*GlobalnetMesh, error) {
	g := &GlobalnetMesh{dp: dp, global: map[string]netip.Prefix{}, next: map[string]netip.Addr{}}
	for _, c := range dp.env.Clusters {
		p, err := netip.ParsePrefix(globalCIDRs[c.Name])
		if err != nil || !p.Addr().Is4() || p.Bits() > 24 {
			return nil, fmt.Errorf("harness globalnet: cluster %s needs an IPv4 global CIDR of /24 or larger, got %q", c.Name, globalCIDRs[c.Name])
		}
		g.global[c.Name] = p.Masked()
		g.next[c.Name] = p.Masked().Addr().Next().Next() // .1 is the cluster egress IP
	}
	for _, c := range dp.env.Clusters {
		if err := g.unroutePodNetworks(c); err != nil {
			return nil, err
		}
		if err := g.routeGlobal(c); err != nil {
			return nil, err
		}
		if err := g.gatewayChains(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// unroutePodNetworks removes the routes to other clusters' pod and service
// CIDRs that the dataplane installs for clusters joined without Globalnet.
func (g *GlobalnetMesh) unroutePodNetworks(c *Cluster) error {
	for _, r := range g.dp.env.Clusters {
		if r == c {
			continue
		}
		for _, n := range g.dp.nodes[c.Name] {
			for _, cidr := range []string{r.PodCIDR, r.ServiceCIDR} {
				if err := ipCmd("-n", n.NS, "route", "del", cidr); err != nil {
					return fmt.Errorf("harness globalnet: %w", err)
				}
			}
		}
	}
	return nil
}

// routeGlobal routes every other cluster's global CIDR from c's nodes to
// c's gateway and from there to the owner's gateway.
func (g *GlobalnetMesh) routeGlobal(c *Cluster) error {
	gw := g.dp.nodes[c.Name][0]
	for _, r := range g.dp.env.Clusters {
		if r == c {
			continue
		}
		for _, n := range g.dp.nodes[c.Name] {
			via := gw.IP
			if n.Gateway {
				via = g.dp.nodes[r.Name][0].IP
			}
			if err := ipCmd("-n", n.NS, "route", "replace", g.global[r.Name].String(), "via", via); err != nil {
				return fmt.Errorf("harness globalnet: %w", err)
			}
		}
	}
	return nil
}

// gatewayChains installs the Globalnet nat chains on c's gateway node.
func (g *GlobalnetMesh) gatewayChains(c *Cluster) error {
	gw := g.dp.nodes[c.Name][0]
	rules := [][]string{}
	for _, ch := range []string{GNIngressChain, GNEgressChain, GNMarkChain, GNHeadlessChain, GNClusterChain} {
		rules = append(rules, []string{"-N", ch})
	}
	rules = append(rules,
		[]string{"-I", "PREROUTING", "1", "-j", GNIngressChain},
		[]string{"-I", "POSTROUTING", "1", "-j", GNEgressChain},
		[]string{"-A", GNEgressChain, "-j", GNMarkChain},
		[]string{"-A", GNEgressChain, "-j", GNHeadlessChain},
		[]string{"-A", GNEgressChain, "-j", GNClusterChain},
		[]string{"-A", GNClusterChain, "-s", c.PodCIDR, "-m", "mark", "--mark", gnMark, "-j", "SNAT", "--to-source", g.ClusterEgressIP(c)})
	for _, r := range g.dp.env.Clusters {
		if r != c {
			rules = append(rules, []string{"-A", GNMarkChain, "-d", g.global[r.Name].String(), "-j", "MARK", "--set-xmark", gnMark})
		}
	}
	for _, r := range rules {
		if _, err := inNetns(gw.NS, append([]string{"iptables", "-w", "-t", "nat"}, r...)...); err != nil {
			return fmt.Errorf("harness globalnet: gateway %s: %w", gw.Name, err)
		}
	}
	return nil
}

// AllocatePodGlobalIP does what Globalnet does for a backend pod of an
// exported headless Service: it creates the pod's GlobalIngressIP
// (pod-<name>, target HeadlessServicePod, serviceRef, podRef), allocates
// the next global IP of the cluster, DNATs it to the pod IP and SNATs the
// pod's traffic to other clusters to it at the gateway, and only then
// writes status.allocatedIP. The pod must be attached (Running with an IP).
func (g *GlobalnetMesh) AllocatePodGlobalIP(ctx context.Context, c *Cluster, ns, pod, service string) (string, error) {
	podIP, err := g.dp.PodIP(c, ns, pod)
	if err != nil {
		return "", err
	}
	g.mu.Lock()
	ip := g.next[c.Name]
	g.next[c.Name] = ip.Next()
	g.mu.Unlock()
	if !g.global[c.Name].Contains(ip) {
		return "", fmt.Errorf("harness globalnet: global CIDR %s of %s is exhausted", g.global[c.Name], c.Name)
	}
	r := c.Dynamic.Resource(GlobalIngressIPGVR).Namespace(ns)
	obj, err := r.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1", "kind": "GlobalIngressIP",
		"metadata": map[string]any{"name": fmt.Sprintf("pod-%.59s", pod), "namespace": ns,
			"labels":      map[string]any{"submariner.io/serviceRef": service},
			"annotations": map[string]any{"submariner.io/headless-svc-pod-ip": podIP}},
		"spec": map[string]any{"target": "HeadlessServicePod",
			"serviceRef": map[string]any{"name": service}, "podRef": map[string]any{"name": pod}},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("harness globalnet: GlobalIngressIP for %s/%s: %w", ns, pod, err)
	}
	gw := g.dp.nodes[c.Name][0]
	for _, rule := range [][]string{
		{"-A", GNIngressChain, "-d", ip.String(), "-j", "DNAT", "--to-destination", podIP},
		{"-A", GNHeadlessChain, "-s", podIP, "-m", "mark", "--mark", gnMark, "-j", "SNAT", "--to-source", ip.String()},
	} {
		if _, err := inNetns(gw.NS, append([]string{"iptables", "-w", "-t", "nat"}, rule...)...); err != nil {
			return "", fmt.Errorf("harness globalnet: gateway %s: %w", gw.Name, err)
		}
	}
	if err := unstructured.SetNestedField(obj.Object, ip.String(), "status", "allocatedIP"); err != nil {
		return "", err
	}
	if _, err := r.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("harness globalnet: GlobalIngressIP status for %s/%s: %w", ns, pod, err)
	}
	return ip.String(), nil
}

// PodIP returns the IP of an attached pod.
func (dp *Dataplane) PodIP(c *Cluster, ns, name string) (string, error) {
	p, err := dp.attached(c, ns, name)
	if err != nil {
		return "", err
	}
	return p.ip, nil
}

func (dp *Dataplane) attached(c *Cluster, ns, name string) (*dpPod, error) {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	p, ok := dp.pods[podKey(c, ns, name)]
	if !ok {
		return nil, fmt.Errorf("harness dataplane: pod %s/%s of %s is not attached (not Running with an IP)", ns, name, c.Name)
	}
	return p, nil
}

// PodDaemonGossipPort is the gossip port of daemons started in a pod (the
// chart's 7946).
const PodDaemonGossipPort = 7946

// StartDaemonInPod runs coastguardd inside the network namespace of an
// attached pod, as the DaemonSet's container runs: it binds gossip on the
// pod IP (GossipAddr; advertised unless Args say otherwise, like the chart's
// POD_IP), reaches the apiserver through the node (nodeKubeconfig), and
// serves /metrics on the pod IP, which this process reaches through a route
// in the root namespace. There is no admin listener. opts.Seeds are used as
// given (nil: none); Kubeconfig, GossipPort and ClusterCIDRs are ignored.
func (e *Env) StartDaemonInPod(c *Cluster, ns, pod string, opts DaemonOptions) (*Daemon, error) {
	if e.dp == nil || opts.Binary == "" {
		return nil, errors.New("harness: StartDaemonInPod needs the dataplane and DaemonOptions.Binary")
	}
	p, err := e.dp.attached(c, ns, pod)
	if err != nil {
		return nil, err
	}
	if opts.NodeName == "" {
		opts.NodeName = pod
	}
	dir := filepath.Join(e.Dir, "daemons", opts.NodeName)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, err
	}
	// The test process reaches the pod's metrics listener through its node.
	if err := ipCmd("route", "replace", p.ip+"/32", "via", p.node.IP); err != nil {
		return nil, fmt.Errorf("harness: route to pod %s: %w", p.name, err)
	}
	d := &Daemon{Cluster: c, NodeName: opts.NodeName, DataDir: filepath.Join(dir, "data"),
		GossipAddr:  net.JoinHostPort(p.ip, strconv.Itoa(PodDaemonGossipPort)),
		MetricsAddr: net.JoinHostPort(p.ip, "9090")}
	args, err := e.podDaemonArgs(c, d, ns, opts)
	if err != nil {
		return nil, err
	}
	spec := e.procSpec("coastguardd/"+opts.NodeName, "ip", append([]string{"netns", "exec", p.ns, opts.Binary}, args...),
		"coastguardd-"+opts.NodeName+".log")
	spec.env = append(os.Environ(), opts.Env...)
	spec.gid = c.GossipGID
	spec.dir = dir
	if d.Process, err = startProcess(spec); err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.daemons = append(e.daemons, d)
	e.mu.Unlock()
	return d, e.saveState()
}

func (e *Env) podDaemonArgs(c *Cluster, d *Daemon, ns string, opts DaemonOptions) ([]string, error) {
	kc, err := e.dp.nodeKubeconfig(c)
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--kubeconfig=" + kc, "--node-name=" + d.NodeName, "--namespace=" + ns,
		"--cluster-id=" + c.Name, "--bind-addr=" + d.GossipAddr, "--advertise-addr=" + d.GossipAddr,
		"--data-dir=" + d.DataDir, "--metrics-addr=" + d.MetricsAddr, "--admin-addr=", "--gossip-profile=local"}
	if len(opts.Seeds) > 0 {
		args = append(args, "--seeds="+strings.Join(opts.Seeds, ","))
	} else {
		args = append(args, "--seeds=none")
	}
	keys, err := e.keyArgs(c.Name, opts.Args)
	if err != nil {
		return nil, err
	}
	return append(append(args, keys...), opts.Args...), nil
}
