package harness

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodEndpoint is a pod attached to the dataplane.
type PodEndpoint struct {
	Cluster   *Cluster
	Namespace string
	Name      string
	IP        string
	Node      string
	Ports     []corev1.ContainerPort
}

// String is cluster/namespace/name.
func (p PodEndpoint) String() string { return p.Cluster.Name + "/" + p.Namespace + "/" + p.Name }

// Pods lists the attached pods, sorted by cluster, namespace and name.
func (dp *Dataplane) Pods() []PodEndpoint {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	out := make([]PodEndpoint, 0, len(dp.pods))
	for _, p := range dp.pods {
		ns, name, _ := strings.Cut(p.name, "/")
		out = append(out, PodEndpoint{Cluster: p.cluster, Namespace: ns, Name: name, IP: p.ip, Node: p.node.Name, Ports: p.ports})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Pod returns an attached pod.
func (dp *Dataplane) Pod(c *Cluster, ns, name string) (PodEndpoint, bool) {
	for _, p := range dp.Pods() {
		if p.Cluster == c && p.Namespace == ns && p.Name == name {
			return p, true
		}
	}
	return PodEndpoint{}, false
}

// ProbeTimeout bounds one connection attempt. The engine rejects denied
// traffic (ICMP unreachable), so a denial normally answers at once; a
// timeout also counts as denied.
const ProbeTimeout = 1500 * time.Millisecond

// Answer is what the pod that accepted a connection reported.
type Answer struct {
	// Pod is namespace/name of the pod that answered.
	Pod string
	// Source is the source IP the answering pod saw.
	Source string
}

// Connect asks the pod ns/name of cluster c to open a connection to
// dst:port over proto from inside its namespace. It returns the name
// (namespace/name) of the pod that answered; an error means the connection
// was refused, dropped or timed out.
func (dp *Dataplane) Connect(ctx context.Context, c *Cluster, ns, name, dst string, port int32, proto corev1.Protocol) (string, error) {
	a, err := dp.Dial(ctx, c, ns, name, dst, port, proto)
	return a.Pod, err
}

// Dial is Connect that also returns the source IP the answering pod saw.
func (dp *Dataplane) Dial(ctx context.Context, c *Cluster, ns, name, dst string, port int32, proto corev1.Protocol) (Answer, error) {
	return dp.DialWithin(ctx, c, ns, name, dst, port, proto, ProbeTimeout)
}

// DialWithin is Dial with its own bound on the connection attempt.
func (dp *Dataplane) DialWithin(ctx context.Context, c *Cluster, ns, name, dst string, port int32, proto corev1.Protocol, timeout time.Duration) (Answer, error) {
	dp.mu.Lock()
	p, ok := dp.pods[podKey(c, ns, name)]
	dp.mu.Unlock()
	if !ok {
		return Answer{}, fmt.Errorf("harness dataplane: pod %s/%s of %s is not attached (not Running with an IP)", ns, name, c.Name)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", p.sock)
	if err != nil {
		return Answer{}, fmt.Errorf("harness dataplane: agent of %s: %w", p.name, err)
	}
	defer closeQuietly(conn)
	_ = conn.SetDeadline(time.Now().Add(timeout + 5*time.Second))
	pr := strings.ToLower(string(proto))
	if pr == "" {
		pr = "tcp"
	}
	req := fmt.Sprintf("connect %s %s %s\n", pr, net.JoinHostPort(dst, strconv.Itoa(int(port))), timeout)
	if _, err := conn.Write([]byte(req)); err != nil {
		return Answer{}, fmt.Errorf("harness dataplane: agent of %s: %w", p.name, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return Answer{}, fmt.Errorf("harness dataplane: agent of %s: %w", p.name, err)
	}
	line = strings.TrimSpace(line)
	if answer, ok := strings.CutPrefix(line, "ok "); ok {
		pod, src, _ := strings.Cut(answer, " ")
		return Answer{Pod: pod, Source: src}, nil
	}
	return Answer{}, fmt.Errorf("%s", strings.TrimPrefix(line, "fail "))
}

// ProbeCase is one cell of a probe matrix: from a pod to a pod's port.
type ProbeCase struct {
	From PodEndpoint
	To   PodEndpoint
	Port corev1.ContainerPort
}

// ProbeResult is a probed cell with its expectation.
type ProbeResult struct {
	ProbeCase
	Want bool
	Got  bool
	Err  string
}

// Matrix is the outcome of ProbeMatrix.
type Matrix struct {
	Results []ProbeResult
}

// Expectation says whether a cell must connect, from the MCNP semantics
// (docs/SEMANTICS.md) applied by the test to its own workload.
type Expectation func(from, to PodEndpoint, port corev1.ContainerPort) bool

// ProbeMatrix connects from every attached pod to every other attached
// pod on each of its declared ports (across all clusters, in parallel) and
// compares with want. filter, when non-nil, limits the cells probed.
func (dp *Dataplane) ProbeMatrix(ctx context.Context, want Expectation, filter func(ProbeCase) bool) Matrix {
	pods := dp.Pods()
	var cases []ProbeCase
	for _, from := range pods {
		for _, to := range pods {
			if from.String() == to.String() {
				continue
			}
			for _, port := range to.Ports {
				if port.Protocol == corev1.ProtocolSCTP {
					continue
				}
				pc := ProbeCase{From: from, To: to, Port: port}
				if filter == nil || filter(pc) {
					cases = append(cases, pc)
				}
			}
		}
	}
	results := make([]ProbeResult, len(cases))
	sem := make(chan struct{}, 24)
	var wg sync.WaitGroup
	for i, pc := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := ProbeResult{ProbeCase: pc, Want: want(pc.From, pc.To, pc.Port)}
			answer, err := dp.Connect(ctx, pc.From.Cluster, pc.From.Namespace, pc.From.Name, pc.To.IP, pc.Port.ContainerPort, pc.Port.Protocol)
			switch {
			case err != nil:
				r.Err = err.Error()
			case answer != pc.To.Namespace+"/"+pc.To.Name:
				r.Err = "answered by " + answer
			default:
				r.Got = true
			}
			results[i] = r
		}()
	}
	wg.Wait()
	return Matrix{Results: results}
}

// Unexpected returns the cells whose outcome differs from the expectation.
func (m Matrix) Unexpected() []ProbeResult {
	var out []ProbeResult
	for _, r := range m.Results {
		if r.Want != r.Got {
			out = append(out, r)
		}
	}
	return out
}

// Counts returns the number of allowed and denied cells.
func (m Matrix) Counts() (allowed, denied int) {
	for _, r := range m.Results {
		if r.Got {
			allowed++
		} else {
			denied++
		}
	}
	return allowed, denied
}

// Table prints the matrix as "from -> to:port  want got" rows. With onlyDiff
// it prints only the unexpected cells.
func (m Matrix) Table(onlyDiff bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %-48s %-5s %-5s %s\n", "FROM", "TO (port)", "WANT", "GOT", "DETAIL")
	for _, r := range m.Results {
		if onlyDiff && r.Want == r.Got {
			continue
		}
		to := fmt.Sprintf("%s (%s/%d)", r.To, r.Port.Protocol, r.Port.ContainerPort)
		fmt.Fprintf(&b, "%-40s %-48s %-5s %-5s %s\n", r.From, to, verdict(r.Want), verdict(r.Got), r.Err)
	}
	allowed, denied := m.Counts()
	fmt.Fprintf(&b, "%d cells: %d allowed, %d denied, %d unexpected\n", len(m.Results), allowed, denied, len(m.Unexpected()))
	return b.String()
}

func verdict(ok bool) string {
	if ok {
		return "allow"
	}
	return "deny"
}

// AttachRunningPods attaches every Running pod with an IP of cluster c that
// was created without the harness's pod calls (kubectl apply of
// examples/, say), binding it to a node and recording its hostIP as a
// kubelet would.
func (c *Cluster) AttachRunningPods(ctx context.Context) error {
	if c.env.dp == nil {
		return fmt.Errorf("harness: cluster %s has no dataplane (Options.Dataplane)", c.Name)
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		if _, err := c.SetPodStatus(ctx, p.Namespace, p.Name, p.Status.PodIP, corev1.PodRunning); err != nil {
			return fmt.Errorf("harness: attaching %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// AttachedAt is when the pod's interface and agent were ready, just before
// its Running status was written (zero if it is not attached).
func (dp *Dataplane) AttachedAt(c *Cluster, ns, name string) time.Time {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	if p, ok := dp.pods[podKey(c, ns, name)]; ok {
		return p.started
	}
	return time.Time{}
}
