// Package v1 contains the MultiClusterNetworkPolicy API
// (networking.submariner.io/v1) and a small typed view of the MCS API
// ClusterProperty (about.k8s.io/v1alpha1) that coastguard reads.
//
// +kubebuilder:object:generate=true
// +groupName=networking.submariner.io
package v1
