package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// CoastguardCluster kinds and resource.
const (
	KindCoastguardCluster     = "CoastguardCluster"
	KindCoastguardClusterList = "CoastguardClusterList"
	// CoastguardClusterResource is the plural resource name.
	CoastguardClusterResource = "coastguardclusters"
)

// CoastguardClusterGVR is the GroupVersionResource of CoastguardCluster.
var CoastguardClusterGVR = SchemeGroupVersion.WithResource(CoastguardClusterResource)

// Condition types reported on a CoastguardCluster.
const (
	// ClusterConditionAlive is True while at least one gossip member of the
	// cluster is alive as seen from the reporting cluster.
	ClusterConditionAlive = "Alive"
	// ClusterConditionStale is True when no member of the cluster has been
	// seen alive for longer than the staleness threshold (or ever).
	ClusterConditionStale = "Stale"
	// ClusterConditionRetired is True once the cluster was retired
	// (decommissioned or reconnect timeout); its entries are gone everywhere.
	ClusterConditionRetired = "Retired"
	// ClusterConditionSanityOK is False while a cluster-set sanity check
	// (duplicate cluster ID, overlapping pod CIDRs, pod IPs outside the
	// advertised CIDRs) reports a problem involving the cluster.
	ClusterConditionSanityOK = "SanityOK"
	// ClusterConditionOriginLost is True while MCNPs of this cluster, which
	// was retired because it disappeared (not decommissioned), are still
	// enforced in the reporting cluster from their last-known state.
	ClusterConditionOriginLost = "OriginLost"
	// AnnotationReleaseLostOrigin, set on the CoastguardCluster of a lost
	// cluster (kubectl coastguard release-lost), releases the MCNPs kept
	// from it in the annotated cluster: its value is the writer epoch the
	// cluster was lost at (status.epoch), and a loss at that epoch or an
	// earlier one is released. A later loss (after the cluster came back,
	// at a newer epoch) is not. No clock is compared, so a skewed clock
	// cannot keep a release from applying. The apiserver's audit log
	// records who set it.
	AnnotationReleaseLostOrigin = "coastguard.submariner.io/release-lost-origin"
)

// CoastguardCluster is one member of the cluster set as the cluster it is
// stored in sees it. The local coastguardd leader writes one object per
// known cluster (the object name is the cluster ID), so
// `kubectl get coastguardclusters` in any cluster shows the whole set from
// that cluster's point of view. It is read-only for users: the leader
// server-side applies it and overwrites any change.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cgc,categories=coastguard
// +kubebuilder:printcolumn:name="Alive",type=string,JSONPath=`.status.conditions[?(@.type=="Alive")].status`
// +kubebuilder:printcolumn:name="Stale",type=string,JSONPath=`.status.conditions[?(@.type=="Stale")].status`
// +kubebuilder:printcolumn:name="Retired",type=string,JSONPath=`.status.conditions[?(@.type=="Retired")].status`
// +kubebuilder:printcolumn:name="Sanity",type=string,JSONPath=`.status.conditions[?(@.type=="SanityOK")].status`
// +kubebuilder:printcolumn:name="Members",type=integer,JSONPath=`.status.aliveMembers`
// +kubebuilder:printcolumn:name="Leader",type=string,JSONPath=`.status.leader`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Software",type=string,JSONPath=`.status.softwareVersion`,priority=1
// +kubebuilder:printcolumn:name="Last-Seen",type=date,JSONPath=`.status.lastSeen`
type CoastguardCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status CoastguardClusterStatus `json:"status,omitempty"`
}

// CoastguardClusterStatus is the reporting cluster's view of one cluster.
type CoastguardClusterStatus struct {
	// clusterID is the cluster this object describes (equal to the name).
	ClusterID string `json:"clusterID"`
	// reportedBy is the cluster whose leader wrote this object.
	// +optional
	ReportedBy string `json:"reportedBy,omitempty"`
	// local is true on the object describing the reporting cluster itself.
	// +optional
	Local bool `json:"local,omitempty"`
	// lastSeen is when a member of the cluster was last seen alive.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// aliveMembers counts the cluster's gossip members currently alive.
	// +optional
	AliveMembers int32 `json:"aliveMembers,omitempty"`
	// members lists the cluster's gossip members.
	// +optional
	// +listType=map
	// +listMapKey=name
	Members []CoastguardClusterMember `json:"members,omitempty"`
	// leader is the member currently writing for the cluster (its Lease
	// holder), empty when none is alive.
	// +optional
	Leader string `json:"leader,omitempty"`
	// epoch of the cluster's writer, from the newest version replicated here.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// version is the newest contiguous version of the cluster's entries
	// replicated here, as "epoch.seq".
	// +optional
	Version string `json:"version,omitempty"`
	// sequence is the sequence part of version. Comparing it with the
	// cluster's own view (its object with local=true) gives the replication
	// lag in entries when the epochs are equal.
	// +optional
	Sequence int64 `json:"sequence,omitempty"`
	// softwareVersion of the cluster's coastguardd, when it advertises one.
	// +optional
	SoftwareVersion string `json:"softwareVersion,omitempty"`
	// podCIDRs advertised by the cluster.
	// +optional
	// +listType=atomic
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// globalCIDRs of a Globalnet cluster.
	// +optional
	// +listType=atomic
	GlobalCIDRs []string `json:"globalCIDRs,omitempty"`
	// labels are the cluster's labels (ClusterProperty) as used by
	// clusterSelectors.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// signingKeyFingerprint of the cluster's gossip signing key, once the
	// cluster signs its deltas.
	// +optional
	SigningKeyFingerprint string `json:"signingKeyFingerprint,omitempty"`
	// conditions: Alive, Stale, Retired, SanityOK, and OriginLost once
	// the cluster's policies were kept as a lost origin's.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CoastguardClusterMember is one gossip member (one coastguardd pod).
type CoastguardClusterMember struct {
	Name string `json:"name"`
	// +optional
	Address string `json:"address,omitempty"`
	// +optional
	Alive bool `json:"alive,omitempty"`
	// writer is true for the member holding the cluster's Lease.
	// +optional
	Writer bool `json:"writer,omitempty"`
}

// CoastguardClusterList is a list of CoastguardCluster.
//
// +kubebuilder:object:root=true
type CoastguardClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CoastguardCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &CoastguardCluster{}, &CoastguardClusterList{})
		return nil
	})
}
