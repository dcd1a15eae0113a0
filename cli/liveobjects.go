package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// liveObjects lists what member m's daemon reads (the kinds of its
// inventory and Submariner watcher) as a static inventory's objects. A
// resource the cluster does not serve (a CRD not installed) is empty.
func liveObjects(ctx context.Context, m *member) (kube.StaticObjects, error) {
	var o kube.StaticObjects
	nsl, err := m.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("%s: namespaces: %w", m.ID, err)
	}
	o.Namespaces = ptrs(nsl.Items)
	pods, err := m.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("%s: pods: %w", m.ID, err)
	}
	o.Pods = ptrs(pods.Items)
	svcs, err := m.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("%s: services: %w", m.ID, err)
	}
	o.Services = ptrs(svcs.Items)
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		ns   string
		into *[]*unstructured.Unstructured
	}{
		{v1.GroupVersionResource, "", &o.Policies},
		{kube.ClusterPropertyResource, "", &o.ClusterProperties},
		{kube.ServiceExportResource, "", &o.ServiceExports},
		{kube.SubmarinerClusterResource, submarinerNamespace, &o.SubmarinerClusters},
		{kube.ClusterGlobalEgressIPResource, submarinerNamespace, &o.ClusterGlobalEgressIPs},
		{kube.GlobalEgressIPResource, "", &o.GlobalEgressIPs},
		{kube.GlobalIngressIPResource, "", &o.GlobalIngressIPs},
	} {
		l, err := m.Dynamic.Resource(r.gvr).Namespace(r.ns).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return o, fmt.Errorf("%s: %s: %w", m.ID, r.gvr.Resource, err)
		}
		*r.into = ptrs(l.Items)
	}
	return o, nil
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// liveEntries are the entries cluster id's daemon writes for objs (its
// inventory's kind table, through a static inventory). Objects the daemon
// could not replicate are left out with a warning on errOut, as the daemon
// leaves them out.
func liveEntries(id string, objs kube.StaticObjects, errOut io.Writer) (kube.Snapshot, error) {
	inv, err := kube.NewStaticInventory(id, objs, slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		return nil, err
	}
	snap, failed, err := inv.Entries()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	for k, err := range failed {
		_, _ = fmt.Fprintf(errOut, "warning: %s: %v %s is not replicated: %v\n", id, k.Kind, k.Name, err)
	}
	return snap, nil
}

// exported is the Services of objs that have a ServiceExport, by
// namespace/name.
func exported(objs kube.StaticObjects) map[string]*corev1.Service {
	exports := map[string]bool{}
	for _, u := range objs.ServiceExports {
		exports[kube.PodName(u.GetNamespace(), u.GetName())] = true
	}
	out := map[string]*corev1.Service{}
	for _, s := range objs.Services {
		if k := kube.PodName(s.Namespace, s.Name); exports[k] {
			out[k] = s
		}
	}
	return out
}
