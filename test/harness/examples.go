package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ApplyExampleWorkload creates the shop workload of examples/<cluster> in
// cluster c as `make demo` does: namespaces, ClusterProperty labels,
// Submariner's Cluster objects (the trusted CIDRs), then the pods, whose
// IP and phase are set through the status subresource as a kubelet would
// (on the dataplane each Running pod gets its interface). It returns the
// pods of pods.yaml.
func (c *Cluster) ApplyExampleWorkload(ctx context.Context, examplesDir string) ([]corev1.Pod, error) {
	if err := c.EnsureNamespace(ctx, "submariner-operator", nil); err != nil {
		return nil, err
	}
	dir := filepath.Join(examplesDir, c.Name)
	for _, f := range []string{"namespaces.yaml", "cluster.yaml", "submariner-clusters.yaml", "pods.yaml"} {
		if _, se, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("%s: kubectl apply %s: %v: %s", c.Name, f, err, se)
		}
	}
	pods, err := ReadPods(filepath.Join(dir, "pods.yaml"))
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Status.PodIP == "" && p.Status.Phase == "" {
			continue
		}
		if _, err := c.SetPodStatus(ctx, p.Namespace, p.Name, p.Status.PodIP, p.Status.Phase); err != nil {
			return nil, err
		}
	}
	return pods, nil
}

// ReadPods decodes the Pods of a multi-document YAML file.
func ReadPods(path string) ([]corev1.Pod, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []corev1.Pod
	for {
		var p corev1.Pod
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if p.Kind == "Pod" && p.Name != "" {
			out = append(out, p)
		}
	}
	return out, nil
}
