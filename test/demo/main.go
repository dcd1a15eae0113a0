// Command demo is `make demo`: three local clusters on real kube-apiservers
// (one shared etcd), a coastguardd in each gossiping over loopback, the shop
// workload from examples/, and live policy propagation. `make demo-down`
// (demo down) stops everything.
//
//	go run ./test/demo up     start, show, leave running
//	go run ./test/demo down   stop and clean up
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/test/harness"
)

var clusters = []string{"eu-1", "eu-2", "us-1"}

func main() {
	cmd := "up"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	root, err := harness.RepoRoot()
	if err != nil {
		fail(err)
	}
	dir := filepath.Join(root, ".demo")
	switch cmd {
	case "up":
		if err := up(root, dir); err != nil {
			fmt.Fprintf(os.Stderr, "\ndemo failed: %v\nlogs: %s/logs (run `make demo-down` to clean up)\n", err, dir)
			os.Exit(1)
		}
	case "down":
		if _, err := os.Stat(filepath.Join(dir, harness.StateFile)); os.IsNotExist(err) {
			fmt.Println("no demo running")
			return
		}
		if err := harness.Down(dir); err != nil {
			fail(err)
		}
		fmt.Println("demo stopped and cleaned up")
	default:
		fail(fmt.Errorf("usage: demo [up|down]"))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}

func step(format string, args ...any) {
	fmt.Printf("\n\033[1m==> "+format+"\033[0m\n", args...)
}

func up(root, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, harness.StateFile)); err == nil {
		return fmt.Errorf("a demo is already running in %s; run `make demo-down` first", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	step("building coastguardd")
	bin := filepath.Join(dir, "bin", "coastguardd")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/coastguardd")
	build.Dir, build.Stdout, build.Stderr = root, os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}

	step("starting 3 clusters (etcd + one kube-apiserver each): %s", strings.Join(clusters, ", "))
	packets := harness.CheckDataplaneSupport()
	if packets != nil {
		fmt.Printf("    packets: off on this machine (%v); the demo shows objects only\n", packets)
	}
	// the service ranges the examples' Submariner Cluster objects name, so
	// that the examples' Services get their ClusterIPs
	svcCIDRs, err := exampleServiceCIDRs(root)
	if err != nil {
		return err
	}
	env, err := harness.New(ctx, harness.Options{Names: clusters, Detach: true, Dir: dir, KeepDir: true, Dataplane: packets == nil,
		ServiceCIDRs: svcCIDRs,
		Logf:         func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	fmt.Printf("    control planes ready in %s\n", env.StartupTime.Round(100*time.Millisecond))
	if err := env.InstallCRDs(ctx, filepath.Join(root, "deploy", "crds")); err != nil {
		return err
	}
	if err := env.InstallCRDs(ctx, filepath.Join(root, "test", "e2e", "testdata", "crds")); err != nil {
		return err
	}

	step("creating the shop workload from examples/ (namespaces, pods, ClusterProperty region labels,\n    and Submariner's Cluster objects of every cluster, as the broker syncs them: the trusted pod CIDRs)")
	ipIndex := map[string]string{}
	for _, c := range env.Clusters {
		pods, err := c.ApplyExampleWorkload(ctx, filepath.Join(root, "examples"))
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Status.PodIP != "" {
				ipIndex[p.Status.PodIP+"/32"] = c.Name + "/" + p.Namespace + "/" + p.Name
			}
		}
		fmt.Printf("    %-5s %d pods\n", c.Name, len(pods))
		svcs, _ := filepath.Glob(filepath.Join(root, "examples", c.Name, "service-*.yaml"))
		for _, f := range svcs { // exported Services (and their ServiceExports)
			if _, se, err := c.Kubectl(ctx, "apply", "-f", f); err != nil {
				return fmt.Errorf("%s: kubectl apply %s: %v: %s", c.Name, f, err, se)
			}
		}
	}

	step("starting a coastguardd per cluster (gossip on 127.0.0.x loopback aliases)")
	var ds []*harness.Daemon
	for _, c := range env.Clusters {
		// No --cluster-cidrs: the daemons learn every cluster's CIDRs from
		// the Submariner Cluster objects, as in a real install.
		d, err := env.StartDaemon(c, harness.DaemonOptions{Binary: bin, ClusterCIDRs: []string{}})
		if err != nil {
			return err
		}
		ds = append(ds, d)
		fmt.Printf("    %-5s gossip %s  metrics http://%s/metrics\n", c.Name, d.GossipAddr, d.MetricsAddr)
	}
	for _, d := range ds {
		if err := d.WaitReady(ctx, 60*time.Second); err != nil {
			return fmt.Errorf("%s not ready: %w", d.NodeName, err)
		}
	}

	step("applying 3 MultiClusterNetworkPolicies, each in a different cluster")
	expected, err := renderExpected(ctx, root, dir)
	if err != nil {
		return err
	}
	applied := time.Now()
	for _, c := range env.Clusters {
		files, _ := filepath.Glob(filepath.Join(root, "examples", c.Name, "mcnp-*.yaml"))
		for _, f := range files {
			out, se, err := c.Kubectl(ctx, "apply", "-f", f)
			if err != nil {
				return fmt.Errorf("%s: %v: %s", c.Name, err, se)
			}
			fmt.Printf("    %-5s %s", c.Name, out)
		}
	}
	err = harness.Eventually(ctx, 60*time.Second, 25*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, c := range env.Clusters {
			got, err := generated(ctx, c)
			if err != nil || !sameSet(got, expected[c.Name]) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("clusters did not converge on the rendered policies: %w", err)
	}
	fmt.Printf("    converged in %s: every cluster's NetworkPolicies equal `coastguardd render examples/` output\n",
		time.Since(applied).Round(time.Millisecond))

	if env.Dataplane() != nil {
		if err := showPackets(ctx, env); err != nil {
			return err
		}
	}

	step("gossip members (from eu-1's /debug/state)")
	if err := showMembers(ctx, ds[0]); err != nil {
		return err
	}

	step("generated NetworkPolicies per cluster")
	for _, c := range env.Clusters {
		if err := showPolicies(ctx, c, ipIndex); err != nil {
			return err
		}
	}

	step("MCNP status in the origin clusters")
	// Right after a start every daemon's empty-view gate is still closed
	// (Degraded: PartialView) until its first anti-entropy round covers the
	// other clusters; show the status once that has settled.
	gateStart := time.Now()
	for _, c := range env.Clusters {
		_, _, _ = c.Kubectl(ctx, "wait", "mcnp", "--all", "-A", "--for=condition=Degraded=False", "--timeout=30s")
	}
	fmt.Printf("    every daemon's view complete (Degraded=False) after %s\n", time.Since(gateStart).Round(time.Millisecond))
	for _, c := range env.Clusters {
		out, _, err := c.Kubectl(ctx, "get", "mcnp", "-A")
		if err == nil && strings.TrimSpace(out) != "" {
			fmt.Printf("  [%s]\n%s", c.Name, indent(out))
		}
	}

	step("live: a new frontend pod starts in us-1; eu-1's backend policy must allow it")
	us, eu := env.Cluster("us-1"), env.Cluster("eu-1")
	start := time.Now()
	if _, err := us.RunPod(ctx, "shop", "frontend-live", "10.3.1.99", map[string]string{"app": "frontend"}); err != nil {
		return err
	}
	err = harness.Eventually(ctx, 30*time.Second, 5*time.Millisecond, func(ctx context.Context) (bool, error) {
		nps, err := eu.ListNetworkPolicies(ctx, "shop", harness.ManagedSelector)
		if err != nil {
			return false, err
		}
		for _, np := range nps {
			if strings.Contains(mustJSON(np.Spec), `"10.3.1.99/32"`) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("    us-1 pod Running with 10.3.1.99 -> eu-1 NetworkPolicy allows 10.3.1.99/32 after %s\n",
		time.Since(start).Round(time.Millisecond))
	if dp := env.Dataplane(); dp != nil {
		err = harness.Eventually(ctx, 30*time.Second, 5*time.Millisecond, func(ctx context.Context) (bool, error) {
			_, err := dp.Connect(ctx, us, "shop", "frontend-live", "10.1.1.20", 8080, corev1.ProtocolTCP)
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("the new frontend never connected to eu-1's backend: %w", err)
		}
		fmt.Printf("    first allowed connection us-1/frontend-live -> eu-1 backend 10.1.1.20:8080 after %s\n",
			time.Since(start).Round(time.Millisecond))
	}

	step("the clusters keep running; try kubectl")
	var paths []string
	for _, c := range env.Clusters {
		fmt.Printf("    export KUBECONFIG=%s   # %s\n", c.Kubeconfig, c.Name)
		paths = append(paths, c.Kubeconfig)
	}
	merged := filepath.Join(dir, "kubeconfig")
	if err := writeMergedKubeconfig(paths, merged); err != nil {
		return err
	}
	fmt.Printf("\n    every cluster, one context each:  export KUBECONFIG=%s\n", merged)
	fmt.Printf("    (the same as KUBECONFIG=%s)\n", strings.Join(paths, ":"))
	fmt.Printf("    e.g.  KUBECONFIG=%s kubectl coastguard status\n", merged)
	fmt.Printf("\n    e.g.  KUBECONFIG=%s kubectl get networkpolicies -A -l %s\n", eu.Kubeconfig, harness.ManagedSelector)
	fmt.Printf("    daemon logs: %s/logs     stop everything: make demo-down\n", dir)
	return nil
}

// showPackets sends real connections across the clusters after
// convergence: allowed and denied flows, through kube-router on every node.
func showPackets(ctx context.Context, env *harness.Env) error {
	step("packets: real connections between pods of different clusters (kube-router enforces on every node)")
	dp := env.Dataplane()
	eu1, us1 := env.Cluster("eu-1"), env.Cluster("us-1")
	backend, ok := dp.Pod(eu1, "shop", "backend-5c6b7-fghij")
	if !ok {
		return fmt.Errorf("eu-1's backend has no interface")
	}
	probes := []struct {
		from      *harness.Cluster
		ns, name  string
		wantAllow bool
	}{
		{us1, "shop", "frontend-7d9f8-uvwxy", true},
		{us1, "shop", "backend-5c6b7-zabcd", false},
		{eu1, "kube-system", "coredns-1", false},
	}
	for _, p := range probes {
		var answer string
		var err error
		deadline := time.Now().Add(15 * time.Second)
		for {
			answer, err = dp.Connect(ctx, p.from, p.ns, p.name, backend.IP, 8080, corev1.ProtocolTCP)
			if (err == nil) == p.wantAllow || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		got := "ALLOWED, answered by " + answer
		if err != nil {
			got = "DENIED (" + err.Error() + ")"
		}
		fmt.Printf("    %s/%s/%s -> eu-1/shop/backend %s:8080: %s\n", p.from.Name, p.ns, p.name, backend.IP, got)
		if (err == nil) != p.wantAllow {
			return fmt.Errorf("packets disagree with the policies for %s/%s/%s", p.from.Name, p.ns, p.name)
		}
	}
	all := func(harness.PodEndpoint, harness.PodEndpoint, corev1.ContainerPort) bool { return true }
	allowed, denied := dp.ProbeMatrix(ctx, all, nil).Counts()
	fmt.Printf("    whole matrix (every pod to every declared port of every other pod, 3 clusters): %d allowed, %d denied\n", allowed, denied)
	fmt.Printf("    (make test checks every cell of it against the semantics: TestPacketsShopWorkload)\n")
	return nil
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// exampleServiceCIDRs reads each demo cluster's service range from its
// own Submariner Cluster object in examples/<cluster>/submariner-clusters.yaml.
func exampleServiceCIDRs(root string) ([]string, error) {
	out := make([]string, len(clusters))
	for i, c := range clusters {
		f := filepath.Join(root, "examples", c, "submariner-clusters.yaml")
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for out[i] == "" {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if sc := kube.SubmarinerClusterFrom(&u); sc.ClusterID == c && len(sc.ServiceCIDRs) > 0 {
				out[i] = sc.ServiceCIDRs[0]
			}
		}
		if out[i] == "" {
			return nil, fmt.Errorf("%s: no Submariner Cluster object of %s with a service_cidr", f, c)
		}
	}
	return out, nil
}

// renderExpected runs `coastguardd render` on examples/: the demo checks the
// daemons converge on exactly the offline translation.
func renderExpected(ctx context.Context, root, dir string) (map[string][]string, error) {
	out := filepath.Join(dir, "rendered")
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "bin", "coastguardd"), "render", "--input", filepath.Join(root, "examples"), "--output", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("render: %v: %s", err, b)
	}
	res := map[string][]string{}
	for _, c := range clusters {
		raw, err := os.ReadFile(filepath.Join(out, c, "networkpolicies.yaml"))
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var np networkingv1.NetworkPolicy
			if err := dec.Decode(&np); err == io.EOF {
				break
			} else if err != nil {
				return nil, err
			}
			if np.Name != "" {
				res[c] = append(res[c], np.Namespace+"/"+np.Name+" "+mustJSON(kube.NormalizedSpec(&np.Spec)))
			}
		}
		sort.Strings(res[c])
	}
	return res, nil
}

func generated(ctx context.Context, c *harness.Cluster) ([]string, error) {
	nps, err := c.ListNetworkPolicies(ctx, "", harness.ManagedSelector)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, np := range nps {
		out = append(out, np.Namespace+"/"+np.Name+" "+mustJSON(kube.NormalizedSpec(&np.Spec)))
	}
	sort.Strings(out)
	return out, nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func showMembers(ctx context.Context, d *harness.Daemon) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.AdminAddr+"/debug/state", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // decoded below
	var st struct {
		Members []struct {
			Name, Cluster, Addr string
			Writer, Alive       bool
		} `json:"members"`
		Origins map[string]string `json:"origins"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return err
	}
	// Every line has cells, so tabwriter holds them all until Flush, whose
	// error is returned; the row writes cannot fail on their own.
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "    MEMBER\tCLUSTER\tADDRESS\tSTATE\tWRITER\tVERSION (epoch.seq)")
	for _, m := range st.Members {
		state := "alive"
		if !m.Alive {
			state = "dead"
		}
		_, _ = fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%v\t%s\n", m.Name, m.Cluster, m.Addr, state, m.Writer, st.Origins[m.Cluster])
	}
	return tw.Flush()
}

func showPolicies(ctx context.Context, c *harness.Cluster, ipIndex map[string]string) error {
	nps, err := c.ListNetworkPolicies(ctx, "", harness.ManagedSelector)
	if err != nil {
		return err
	}
	fmt.Printf("  [%s] %d generated\n", c.Name, len(nps))
	for _, np := range nps {
		fmt.Printf("    %s/%s  pods %s  types %v\n", np.Namespace, np.Name, mustJSON(np.Spec.PodSelector.MatchLabels), np.Spec.PolicyTypes)
		for _, r := range np.Spec.Ingress {
			fmt.Printf("      ingress from %s ports %s\n", peers(r.From, ipIndex), ports(r.Ports))
		}
		for _, r := range np.Spec.Egress {
			fmt.Printf("      egress  to   %s ports %s\n", peers(r.To, ipIndex), ports(r.Ports))
		}
	}
	return nil
}

func peers(ps []networkingv1.NetworkPolicyPeer, ipIndex map[string]string) string {
	var out []string
	for _, p := range ps {
		switch {
		case p.IPBlock != nil:
			if who, ok := ipIndex[p.IPBlock.CIDR]; ok {
				out = append(out, who)
			} else {
				out = append(out, p.IPBlock.CIDR)
			}
		default:
			s := "local"
			if p.NamespaceSelector != nil {
				s += " ns" + mustJSON(p.NamespaceSelector.MatchLabels)
			}
			if p.PodSelector != nil {
				s += " pods" + mustJSON(p.PodSelector.MatchLabels)
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "(nothing)"
	}
	return strings.Join(out, ", ")
}

func ports(ps []networkingv1.NetworkPolicyPort) string {
	var out []string
	for _, p := range ps {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		if p.Port != nil {
			out = append(out, proto+"/"+p.Port.String())
		} else {
			out = append(out, proto)
		}
	}
	if len(out) == 0 {
		return "any"
	}
	return strings.Join(out, ",")
}
