package cli

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// liveListKinds are the dynamic resources the CLI lists.
var liveListKinds = map[schema.GroupVersionResource]string{
	v1.GroupVersionResource:            "MultiClusterNetworkPolicyList",
	v1.CoastguardClusterGVR:            "CoastguardClusterList",
	kube.ClusterPropertyResource:       "ClusterPropertyList",
	kube.ServiceExportResource:         "ServiceExportList",
	kube.SubmarinerClusterResource:     "ClusterList",
	kube.ClusterGlobalEgressIPResource: "ClusterGlobalEgressIPList",
	kube.GlobalEgressIPResource:        "GlobalEgressIPList",
	kube.GlobalIngressIPResource:       "GlobalIngressIPList",
}

// fakeMember is cluster id behind fake apiservers holding typed (core)
// and dyn (custom resource) objects.
func fakeMember(id string, typed, dyn []runtime.Object) *member {
	return &member{ID: id, Context: id, Client: fake.NewClientset(typed...),
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), liveListKinds, dyn...)}
}
