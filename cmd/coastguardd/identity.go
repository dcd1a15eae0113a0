package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	mcsv1alpha1 "github.com/coastguard-mcnp/coastguard/api/mcs/v1alpha1"
	"github.com/coastguard-mcnp/coastguard/kube"
)

var (
	clusterPropertyGVR   = schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1alpha1", Resource: "clusterproperties"}
	submarinerClusterGVR = schema.GroupVersionResource{Group: "submariner.io", Version: "v1", Resource: "clusters"}
	submarinerGVR        = schema.GroupVersionResource{Group: "submariner.io", Version: "v1alpha1", Resource: "submariners"}
)

// ClusterIDProperty is the MCS ClusterProperty holding the cluster ID.
const ClusterIDProperty = mcsv1alpha1.ClusterIDLabel

// identitySource is one place a cluster ID can come from.
type identitySource struct {
	Name  string // e.g. "--cluster-id flag"
	Value string // "" = not available
}

// SubmarinerCluster is what coastguard reads of Submariner's Cluster object.
type SubmarinerCluster = kube.SubmarinerCluster

// resolveClusterID applies the precedence flag > ClusterProperty > Submariner
// Cluster. Every available source must agree: a conflict names both values.
func resolveClusterID(sources []identitySource) (string, error) {
	var chosen identitySource
	for _, s := range sources {
		if s.Value == "" {
			continue
		}
		if msgs := validation.IsDNS1123Label(s.Value); len(msgs) > 0 {
			return "", fmt.Errorf("cluster ID %q from %s is not a valid DNS-1123 label (it names generated objects and gossip origins): %s",
				s.Value, s.Name, strings.Join(msgs, "; "))
		}
		if chosen.Value == "" {
			chosen = s
			continue
		}
		if s.Value != chosen.Value {
			return "", fmt.Errorf("cluster ID conflict: %s says %q but %s says %q; make them agree (coastguard must use Submariner's cluster ID)",
				chosen.Name, chosen.Value, s.Name, s.Value)
		}
	}
	if chosen.Value == "" {
		names := make([]string, 0, len(sources))
		for _, s := range sources {
			names = append(names, s.Name)
		}
		return "", fmt.Errorf("no cluster ID: set one of %s", strings.Join(names, ", "))
	}
	return chosen.Value, nil
}

// discoverIdentity reads the ClusterProperty and Submariner's Cluster object.
// Missing CRDs or objects are not errors; they simply provide no value.
func discoverIdentity(ctx context.Context, dyn dynamic.Interface, flagID, submarinerNS string) (string, *SubmarinerCluster, error) {
	sources := []identitySource{{Name: "the --cluster-id flag", Value: flagID}}

	cp, err := dyn.Resource(clusterPropertyGVR).Get(ctx, ClusterIDProperty, metav1.GetOptions{})
	switch {
	case err == nil:
		v, _, _ := unstructured.NestedString(cp.Object, "spec", "value")
		sources = append(sources, identitySource{Name: "ClusterProperty " + ClusterIDProperty, Value: v})
	case absent(err):
		sources = append(sources, identitySource{Name: "ClusterProperty " + ClusterIDProperty})
	default:
		return "", nil, fmt.Errorf("reading ClusterProperty %s: %w", ClusterIDProperty, err)
	}

	sc, err := localSubmarinerCluster(ctx, dyn, submarinerNS, flagID)
	if err != nil {
		return "", nil, err
	}
	subName := "Submariner's Cluster object (namespace " + submarinerNS + ")"
	if sc != nil {
		sources = append(sources, identitySource{Name: subName, Value: sc.ClusterID})
	} else {
		sources = append(sources, identitySource{Name: subName})
	}
	id, err := resolveClusterID(sources)
	return id, sc, err
}

// absent: the resource or object is not there, or we may not read it (the
// deployed RBAC deliberately does not grant Submariner CRs, which hold
// secrets); either way the source provides no value.
func absent(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsForbidden(err)
}

// localSubmarinerCluster finds this cluster's Submariner Cluster object. The
// namespace holds one Cluster per cluster of the set (synced through the
// broker); the local one is the one whose ID the operator configured
// (wantID), else the one named by the Submariner CR's spec.clusterID, else the
// only one present.
func localSubmarinerCluster(ctx context.Context, dyn dynamic.Interface, ns, wantID string) (*SubmarinerCluster, error) {
	list, err := dyn.Resource(submarinerClusterGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if absent(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing Submariner clusters in %s: %w", ns, err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	clusters := make([]SubmarinerCluster, 0, len(list.Items))
	for _, it := range list.Items {
		clusters = append(clusters, submarinerClusterFrom(&it))
	}
	if len(clusters) == 1 {
		return &clusters[0], nil
	}
	if wantID != "" {
		for i := range clusters {
			if clusters[i].ClusterID == wantID {
				return &clusters[i], nil
			}
		}
		// none matches: the set's Cluster objects do not describe us; they
		// provide no value (the flag decides)
		return nil, nil
	}
	subs, err := dyn.Resource(submarinerGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil && !absent(err) {
		return nil, fmt.Errorf("listing Submariner CRs in %s: %w", ns, err)
	}
	if err == nil && len(subs.Items) == 1 {
		local, _, _ := unstructured.NestedString(subs.Items[0].Object, "spec", "clusterID")
		for i := range clusters {
			if clusters[i].ClusterID == local {
				return &clusters[i], nil
			}
		}
	}
	ids := make([]string, 0, len(clusters))
	for _, c := range clusters {
		ids = append(ids, c.ClusterID)
	}
	sort.Strings(ids)
	return nil, fmt.Errorf("namespace %s holds Submariner Clusters %v and no Submariner CR names the local one; set --cluster-id", ns, ids)
}

func submarinerClusterFrom(u *unstructured.Unstructured) SubmarinerCluster {
	return kube.SubmarinerClusterFrom(u)
}
