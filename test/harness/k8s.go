package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// InstallCRDs applies every manifest in dir (for example deploy/crds) with
// server-side apply and waits until each CRD is Established.
func (c *Cluster) InstallCRDs(ctx context.Context, dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("harness: CRD directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("harness: %s is not a directory", dir)
	}
	if _, _, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", dir); err != nil {
		return fmt.Errorf("harness: installing CRDs from %s: %w", dir, err)
	}
	// kubectl wait fails at once ("status.conditions accessor error") on a
	// CRD the apiserver has not given any condition yet, so a failed wait is
	// retried until the deadline instead of being final.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, _, last = c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=30s", "-f", dir)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("harness: waiting for CRDs from %s: %w (last: %v)", dir, err, last)
	}
	return nil
}

// InstallCRDs installs the CRDs in dir into every cluster, in parallel.
func (e *Env) InstallCRDs(ctx context.Context, dir string) error {
	errs := make(chan error, len(e.Clusters))
	for _, c := range e.Clusters {
		go func() { errs <- c.InstallCRDs(ctx, dir) }()
	}
	var first error
	for range e.Clusters {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// CreateNamespace creates a namespace with labels.
func (c *Cluster) CreateNamespace(ctx context.Context, name string, labels map[string]string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	return c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
}

// PodImage is the image of simulated pods. Nothing pulls it: there is no
// kubelet.
const PodImage = "registry.k8s.io/pause:3.10"

// CreatePod creates a pod with labels and container ports. It stays Pending
// until SetPodStatus gives it an IP and a phase.
func (c *Cluster) CreatePod(ctx context.Context, ns, name string, labels map[string]string, ports ...corev1.ContainerPort) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: PodImage, Ports: ports}},
		},
	}
	return c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
}

// SetPodStatus sets status.phase, status.podIP and status.podIPs through the
// status subresource, as a kubelet would. An empty ip clears the IPs. A
// Running pod is also marked Ready.
func (c *Cluster) SetPodStatus(ctx context.Context, ns, name, ip string, phase corev1.PodPhase) (*corev1.Pod, error) {
	status := map[string]any{"phase": phase}
	if ip == "" {
		status["podIP"] = nil
		status["podIPs"] = nil
	} else {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("harness: pod IP %q: %w", ip, err)
		}
		status["podIP"] = addr.String()
		status["podIPs"] = []map[string]string{{"ip": addr.String()}}
	}
	if c.env.dp != nil {
		hostIP, err := c.dataplaneStatus(ctx, ns, name, ip, phase)
		if err != nil {
			return nil, err
		}
		if hostIP != "" {
			status["hostIP"] = hostIP
			status["hostIPs"] = []map[string]string{{"ip": hostIP}}
		}
	}
	now := metav1.NewTime(time.Now())
	ready := corev1.ConditionFalse
	if phase == corev1.PodRunning {
		ready = corev1.ConditionTrue
		status["startTime"] = now
	}
	status["conditions"] = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: now}}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, err
	}
	return c.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
}

// RunPod creates a pod and makes it Running with ip.
func (c *Cluster) RunPod(ctx context.Context, ns, name, ip string, labels map[string]string, ports ...corev1.ContainerPort) (*corev1.Pod, error) {
	if _, err := c.CreatePod(ctx, ns, name, labels, ports...); err != nil {
		return nil, err
	}
	return c.SetPodStatus(ctx, ns, name, ip, corev1.PodRunning)
}

// DeletePod deletes a pod immediately (grace period 0: there is no kubelet to
// finish a graceful deletion).
func (c *Cluster) DeletePod(ctx context.Context, ns, name string) error {
	if c.env.dp != nil {
		c.env.dp.detach(c, ns, name)
	}
	zero := int64(0)
	err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ListNetworkPolicies lists NetworkPolicies in ns ("" = all namespaces)
// matching labelSelector ("" = all).
func (c *Cluster) ListNetworkPolicies(ctx context.Context, ns, labelSelector string) ([]networkingv1.NetworkPolicy, error) {
	l, err := c.Client.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{LabelSelector: labelSelector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ManagedSelector selects the NetworkPolicies generated by coastguard.
const ManagedSelector = "app.kubernetes.io/managed-by=coastguard"

// Eventually polls cond every interval until it returns true or timeout
// passes. A condition error counts as "not yet" (apiservers and daemons may be
// restarting); on timeout the last such error is part of the returned error.
func Eventually(ctx context.Context, timeout, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("%w (last error: %v)", err, last)
		}
		return err
	}
	return nil
}

// ApplyKustomize renders dir with kubectl's built-in kustomize and applies
// the result with server-side apply (for example deploy/ or an overlay).
func (c *Cluster) ApplyKustomize(ctx context.Context, dir string) error {
	out, _, err := c.Kubectl(ctx, "kustomize", dir)
	if err != nil {
		return fmt.Errorf("harness: rendering %s: %w", dir, err)
	}
	if _, _, err := c.KubectlInput(ctx, []byte(out), "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
		return fmt.Errorf("harness: applying %s: %w", dir, err)
	}
	if _, _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		return fmt.Errorf("harness: waiting for CRDs of %s: %w", dir, err)
	}
	return nil
}

// dataplaneStatus does what a kubelet and CNI do before a pod's status
// changes: a pod that becomes Running with an IP is bound to its node and
// gets its network namespace, interface and agent first; a pod that loses
// its IP or stops running loses them. It returns the node's IP (hostIP).
func (c *Cluster) dataplaneStatus(ctx context.Context, ns, name, ip string, phase corev1.PodPhase) (string, error) {
	dp := c.env.dp
	pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pod.Spec.HostNetwork {
		// A hostNetwork pod shares its node's network namespace; it gets
		// no interface of its own and is never a peer.
		n, err := dp.bind(ctx, c, pod)
		if err != nil {
			return "", err
		}
		return n.IP, nil
	}
	if ip == "" || phase != corev1.PodRunning {
		dp.detach(c, ns, name)
		return dp.NodeOf(c, pod).IP, nil
	}
	n, err := dp.bind(ctx, c, pod)
	if err != nil {
		return "", err
	}
	addr, _ := netip.ParseAddr(ip) // checked by the caller
	if err := dp.attach(c, pod, n, addr.String()); err != nil {
		return "", err
	}
	return n.IP, nil
}
