package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

func TestResolveClusterIDValidatesEverySource(t *testing.T) {
	for _, bad := range []string{"eu.1", "EU-1", "-eu", strings.Repeat("a", 64)} {
		_, err := resolveClusterID([]identitySource{{"flag", ""}, {"ClusterProperty cluster.clusterset.k8s.io", bad}})
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "ClusterProperty cluster.clusterset.k8s.io")
		require.Contains(t, err.Error(), "DNS-1123")
	}
}

func TestResolveClusterID(t *testing.T) {
	id, err := resolveClusterID([]identitySource{{"flag", ""}, {"cp", "eu-1"}, {"sub", "eu-1"}})
	require.NoError(t, err)
	require.Equal(t, "eu-1", id)

	_, err = resolveClusterID([]identitySource{{"the flag", "eu-1"}, {"cp", ""}, {"Submariner", "eu-2"}})
	require.ErrorContains(t, err, `the flag says "eu-1" but Submariner says "eu-2"`)

	_, err = resolveClusterID([]identitySource{{"the flag", ""}, {"ClusterProperty", ""}})
	require.ErrorContains(t, err, "set one of the flag, ClusterProperty")
}

func cpObj(name, value string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"value": value}}}
}

func subCluster(name, id string, cidr ...any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"name": name, "namespace": "submariner-operator"},
		"spec":     map[string]any{"cluster_id": id, "cluster_cidr": cidr}}}
}

func newDyn(objs ...runtime.Object) *dynfake.FakeDynamicClient {
	gvrs := map[schema.GroupVersionResource]string{
		clusterPropertyGVR:   "ClusterPropertyList",
		submarinerClusterGVR: "ClusterList",
		submarinerGVR:        "SubmarinerList",
	}
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), gvrs, objs...)
}

func TestDiscoverIdentitySources(t *testing.T) {
	ctx := context.Background()
	// ClusterProperty only
	id, sc, err := discoverIdentity(ctx, newDyn(cpObj(ClusterIDProperty, "eu-1")), "", "submariner-operator")
	require.NoError(t, err)
	require.Equal(t, "eu-1", id)
	require.Nil(t, sc)

	// Submariner Cluster only, with CIDRs
	id, sc, err = discoverIdentity(ctx, newDyn(subCluster("us-1", "us-1", "10.1.0.0/16")), "", "submariner-operator")
	require.NoError(t, err)
	require.Equal(t, "us-1", id)
	require.Equal(t, []string{"10.1.0.0/16"}, sc.PodCIDRs)

	// conflict between ClusterProperty and Submariner is refused, naming both
	_, _, err = discoverIdentity(ctx, newDyn(cpObj(ClusterIDProperty, "eu-1"), subCluster("us-1", "us-1")), "", "submariner-operator")
	require.ErrorContains(t, err, `"eu-1"`)
	require.ErrorContains(t, err, `"us-1"`)

	// flag alone
	id, _, err = discoverIdentity(ctx, newDyn(), "flagged", "submariner-operator")
	require.NoError(t, err)
	require.Equal(t, "flagged", id)

	// nothing anywhere
	_, _, err = discoverIdentity(ctx, newDyn(), "", "submariner-operator")
	require.ErrorContains(t, err, "no cluster ID")

	// several Submariner clusters and no Submariner CR: ambiguous
	_, _, err = discoverIdentity(ctx, newDyn(subCluster("a", "a"), subCluster("b", "b")), "", "submariner-operator")
	require.ErrorContains(t, err, "set --cluster-id")

	// several, disambiguated by the configured ID without reading the Submariner CR
	id, sc, err = discoverIdentity(ctx, newDyn(subCluster("a", "a", "10.1.0.0/16"), subCluster("b", "b", "10.2.0.0/16")), "b", "submariner-operator")
	require.NoError(t, err)
	require.Equal(t, "b", id)
	require.Equal(t, []string{"10.2.0.0/16"}, sc.PodCIDRs)

	// several, disambiguated by the Submariner CR
	sub := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "submariner.io/v1alpha1", "kind": "Submariner",
		"metadata": map[string]any{"name": "submariner", "namespace": "submariner-operator"},
		"spec":     map[string]any{"clusterID": "b"}}}
	id, _, err = discoverIdentity(ctx, newDyn(subCluster("a", "a"), subCluster("b", "b"), sub), "", "submariner-operator")
	require.NoError(t, err)
	require.Equal(t, "b", id)
}
