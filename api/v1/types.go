package v1

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types reported on a MultiClusterNetworkPolicy.
const (
	// ConditionReady is True when every enforcing cluster has applied the
	// current generation without error. A cluster without the policy's
	// namespace enforces nothing and keeps Ready False (reason
	// NamespaceMissing, naming the clusters).
	ConditionReady = "Ready"
	// ConditionEnforced is True when at least one enforcing cluster applied
	// the current generation.
	ConditionEnforced = "Enforced"
	// ConditionDegraded is True when some cluster enforces the policy with
	// reduced precision (for example Globalnet coarse identities) or failed.
	ConditionDegraded = "Degraded"
)

// MultiClusterNetworkPolicy is a NetworkPolicy with a cluster dimension. It is
// enforced, in the namespace it lives in, in every cluster selected by
// spec.clusterSelector, and its peers may select pods in other clusters of the
// cluster set.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=mcnp,categories=coastguard
// +kubebuilder:printcolumn:name="Enforced",type=string,JSONPath=`.status.enforcedSummary`,description="enforcing clusters that applied the current generation / enforcing clusters"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Observed",type=integer,priority=1,JSONPath=`.status.observedGeneration`,description="generation the status describes"
// +kubebuilder:printcolumn:name="Clusters",type=string,priority=1,JSONPath=`.status.clusters[*].cluster`,description="enforcing clusters"
type MultiClusterNetworkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec MultiClusterNetworkPolicySpec `json:"spec,omitempty"`
	// +optional
	Status MultiClusterNetworkPolicyStatus `json:"status,omitempty"`
}

// MultiClusterNetworkPolicySpec is a NetworkPolicySpec plus clusterSelector.
type MultiClusterNetworkPolicySpec struct {
	// clusterSelector selects the clusters where this policy is enforced,
	// by cluster labels (every cluster carries
	// cluster.clusterset.k8s.io=<cluster ID>, plus one label per
	// ClusterProperty). Absent: only the cluster where the policy was
	// created. {}: every cluster of the cluster set.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`

	// podSelector selects the pods, in this namespace of every enforcing
	// cluster, to which the policy applies. {} selects all pods.
	PodSelector metav1.LabelSelector `json:"podSelector"`

	// ingress rules; traffic is allowed if it matches at least one rule of
	// at least one policy selecting the pod.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Ingress []MultiClusterNetworkPolicyIngressRule `json:"ingress,omitempty"`

	// egress rules.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Egress []MultiClusterNetworkPolicyEgressRule `json:"egress,omitempty"`

	// policyTypes as in NetworkPolicy. When empty, Ingress is implied, and
	// Egress is implied when egress rules exist.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:Enum=Ingress;Egress
	PolicyTypes []networkingv1.PolicyType `json:"policyTypes,omitempty"`
}

// MultiClusterNetworkPolicyIngressRule allows traffic from peers on ports.
type MultiClusterNetworkPolicyIngressRule struct {
	// ports; empty or absent means all ports. Named ports refer to the
	// container ports of the selected (local) pods.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.protocol) || p.protocol in ['TCP', 'UDP', 'SCTP'])",message="protocol must be TCP, UDP or SCTP"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.port) || type(p.port) == string || (p.port >= 1 && p.port <= 65535))",message="port must be between 1 and 65535"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.endPort) || (has(p.port) && type(p.port) == int && p.endPort >= p.port && p.endPort <= 65535))",message="endPort requires a numeric port and must be >= port and <= 65535"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.port) || type(p.port) == int || (size(p.port) >= 1 && size(p.port) <= 15))",message="a named port must have 1 to 15 characters"
	Ports []networkingv1.NetworkPolicyPort `json:"ports,omitempty"`

	// from lists the sources; empty or absent means all sources.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	From []MultiClusterNetworkPolicyPeer `json:"from,omitempty"`
}

// MultiClusterNetworkPolicyEgressRule allows traffic to peers on ports.
type MultiClusterNetworkPolicyEgressRule struct {
	// ports; empty or absent means all ports. Named ports refer to the
	// container ports of the destination pods, in whichever cluster they are.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.protocol) || p.protocol in ['TCP', 'UDP', 'SCTP'])",message="protocol must be TCP, UDP or SCTP"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.port) || type(p.port) == string || (p.port >= 1 && p.port <= 65535))",message="port must be between 1 and 65535"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.endPort) || (has(p.port) && type(p.port) == int && p.endPort >= p.port && p.endPort <= 65535))",message="endPort requires a numeric port and must be >= port and <= 65535"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.port) || type(p.port) == int || (size(p.port) >= 1 && size(p.port) <= 15))",message="a named port must have 1 to 15 characters"
	Ports []networkingv1.NetworkPolicyPort `json:"ports,omitempty"`

	// to lists the destinations; empty or absent means all destinations.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	To []MultiClusterNetworkPolicyPeer `json:"to,omitempty"`
}

// MultiClusterNetworkPolicyPeer selects peers. clusterSelector absent means
// the enforcing cluster only; namespaceSelector and podSelector follow
// NetworkPolicy and are evaluated inside each selected cluster. ipBlock
// cannot be combined with a selector. service stands alone: its cluster
// dimension is service.clusterSelector.
//
// +kubebuilder:validation:XValidation:rule="has(self.clusterSelector) || has(self.namespaceSelector) || has(self.podSelector) || has(self.ipBlock) || has(self.service)",message="a peer must set at least one of clusterSelector, namespaceSelector, podSelector, ipBlock, service"
// +kubebuilder:validation:XValidation:rule="!has(self.ipBlock) || !(has(self.clusterSelector) || has(self.namespaceSelector) || has(self.podSelector))",message="ipBlock cannot be combined with clusterSelector, namespaceSelector or podSelector"
// +kubebuilder:validation:XValidation:rule="!has(self.service) || !(has(self.clusterSelector) || has(self.namespaceSelector) || has(self.podSelector) || has(self.ipBlock))",message="service cannot be combined with clusterSelector, namespaceSelector, podSelector or ipBlock (select its clusters with service.clusterSelector)"
type MultiClusterNetworkPolicyPeer struct {
	// clusterSelector selects peer clusters by label. Absent: the enforcing
	// cluster only. {}: every cluster.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`

	// namespaceSelector selects namespaces of each peer cluster by that
	// cluster's namespace labels. Absent: the namespace of the policy.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// podSelector selects pods in the selected namespaces. Absent: all pods.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// ipBlock is passed through unchanged to the generated NetworkPolicies.
	// +optional
	IPBlock *networkingv1.IPBlock `json:"ipBlock,omitempty"`

	// service selects the backends of an exported Service (a Service with
	// a ServiceExport) in each cluster service.clusterSelector selects: the
	// pods its selector matches in its namespace there. In egress rules the
	// Service's ClusterIPs are admitted too when the rule admits every
	// backend on the port it serves (docs/SEMANTICS.md "Services as
	// peers"). A Service that no selected cluster exports selects nothing.
	// +optional
	Service *ServicePeer `json:"service,omitempty"`
}

// ServicePeer names an exported Service and the clusters to look for it in.
type ServicePeer struct {
	// name of the Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// namespace of the Service. Absent: the namespace of the policy.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`

	// clusterSelector selects the clusters whose export of the Service
	// counts, by cluster label. Absent: the enforcing cluster only. {}:
	// every cluster (typically: wherever the Service is exported).
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
}

// MultiClusterNetworkPolicyStatus is written by the origin cluster's
// coastguardd from the reports of every enforcing cluster.
type MultiClusterNetworkPolicyStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, Enforced, Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// clusters holds one entry per enforcing cluster.
	// +optional
	// +listType=map
	// +listMapKey=cluster
	Clusters []ClusterEnforcementStatus `json:"clusters,omitempty"`

	// enforcedSummary is "<applied>/<enforcing>", e.g. "3/3".
	// +optional
	EnforcedSummary string `json:"enforcedSummary,omitempty"`
}

// ClusterEnforcementStatus is one enforcing cluster's report.
type ClusterEnforcementStatus struct {
	// cluster is the enforcing cluster's ID.
	Cluster string `json:"cluster"`
	// observedGeneration is the policy generation this cluster enforces.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// networkPolicies is the number of NetworkPolicies generated there.
	// +optional
	NetworkPolicies int32 `json:"networkPolicies,omitempty"`
	// remotePeers is the number of remote pod IPs rendered as ipBlocks.
	// +optional
	RemotePeers int32 `json:"remotePeers,omitempty"`
	// error is set when the cluster could not enforce the policy.
	// +optional
	Error string `json:"error,omitempty"`
	// degraded carries a reason when enforcement is less precise than the
	// policy asks (for example GlobalnetCoarseIdentity) or the cluster lacks
	// the policy's namespace (NamespaceMissing).
	// +optional
	Degraded string `json:"degraded,omitempty"`
}

// MultiClusterNetworkPolicyList is a list of MultiClusterNetworkPolicy.
//
// +kubebuilder:object:root=true
type MultiClusterNetworkPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MultiClusterNetworkPolicy `json:"items"`
}
