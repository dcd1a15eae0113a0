package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of MultiClusterNetworkPolicy.
const GroupName = "networking.submariner.io"

// Kind names used in this API group.
const (
	KindMultiClusterNetworkPolicy     = "MultiClusterNetworkPolicy"
	KindMultiClusterNetworkPolicyList = "MultiClusterNetworkPolicyList"
	// Resource is the plural resource name.
	Resource = "multiclusternetworkpolicies"
)

// SchemeGroupVersion is group version used to register these objects.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

// GroupVersionResource of MultiClusterNetworkPolicy.
var GroupVersionResource = SchemeGroupVersion.WithResource(Resource)

var (
	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&MultiClusterNetworkPolicy{},
		&MultiClusterNetworkPolicyList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
