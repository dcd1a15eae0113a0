// Package v1alpha1 is a typed view of the MCS API ClusterProperty
// (about.k8s.io/v1alpha1, KEP-2149). coastguard does not own this API, it
// only reads it, so no CRD is generated here.
//
// +kubebuilder:object:generate=true
// +kubebuilder:skip
// +groupName=about.k8s.io
package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ClusterProperty API coordinates (MCS API, KEP-2149). coastguard does not
// own this API; it only reads it.
const (
	GroupName  = "about.k8s.io"
	Version    = "v1alpha1"
	APIVersion = GroupName + "/" + Version
	Kind       = "ClusterProperty"
	// ClusterIDLabel is the label every cluster carries; its value is the
	// cluster ID.
	ClusterIDLabel = "cluster.clusterset.k8s.io"
)

// ClusterProperty is a typed view of about.k8s.io/v1alpha1 ClusterProperty:
// a cluster-scoped object whose name is a property (label) key and whose
// spec.value is its value. coastguard turns each into a cluster label.
type ClusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterPropertySpec `json:"spec"`
}

// ClusterPropertySpec holds the property value.
type ClusterPropertySpec struct {
	Value string `json:"value"`
}
