package crdt

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// ValueFormat is the encoding version tag written into every value. Decoders
// accept any format >= 1 and ignore fields they do not know, so a newer peer
// can add fields without re-stamping anyone's entries.
const ValueFormat = 1

// MaxValueBytes bounds a single encoded value; larger values are rejected by
// decoders and writers.
const MaxValueBytes = 256 << 10

// ErrValueTooLarge is returned for values over MaxValueBytes.
var ErrValueTooLarge = errors.New("crdt: value exceeds MaxValueBytes")

// ClusterValue describes a cluster (KindCluster).
type ClusterValue struct {
	Format uint8 `msgpack:"v"`
	// Labels are the cluster's labels: always cluster.clusterset.k8s.io=<id>
	// plus one per ClusterProperty.
	Labels       map[string]string `msgpack:"l,omitempty"`
	PodCIDRs     []string          `msgpack:"pc,omitempty"`
	ServiceCIDRs []string          `msgpack:"sc,omitempty"`
	GlobalCIDRs  []string          `msgpack:"gc,omitempty"`
	// Globalnet is true when Submariner source-NATs this cluster's egress.
	Globalnet bool `msgpack:"gn,omitempty"`
	// ClusterEgressIPs are the cluster-wide global egress IPs (Globalnet).
	ClusterEgressIPs []string `msgpack:"ce,omitempty"`
	// NamespaceEgressIPs maps namespace -> its allocated global egress IPs.
	NamespaceEgressIPs map[string][]string `msgpack:"ne,omitempty"`
	// GossipName is the memberlist node name of the writer, used to detect
	// two distinct gossip identities claiming one cluster ID.
	GossipName string `msgpack:"gw,omitempty"`
}

// NamespaceValue describes a namespace (KindNamespace).
type NamespaceValue struct {
	Format uint8             `msgpack:"v"`
	Labels map[string]string `msgpack:"l,omitempty"`
}

// NamedPort is a container port of a pod.
type NamedPort struct {
	Name     string `msgpack:"n,omitempty"`
	Port     int32  `msgpack:"p"`
	Protocol string `msgpack:"t,omitempty"` // TCP when empty
}

// PodValue describes a pod (KindPod). It holds only what policy needs.
type PodValue struct {
	Format      uint8             `msgpack:"v"`
	Labels      map[string]string `msgpack:"l,omitempty"`
	IPs         []string          `msgpack:"ip,omitempty"`
	Phase       string            `msgpack:"ph,omitempty"`
	HostNetwork bool              `msgpack:"hn,omitempty"`
	Ports       []NamedPort       `msgpack:"po,omitempty"`
	// EgressIPs are Globalnet per-pod egress IPs when allocated.
	EgressIPs []string `msgpack:"eg,omitempty"`
	// NotReady is true when the pod's Ready condition is not True: it is
	// no endpoint of its Services. Absent (older writers) means ready,
	// which counts the pod as a backend (the stricter reading).
	NotReady bool `msgpack:"nr,omitempty"`
}

// PolicyValue carries a MultiClusterNetworkPolicy (KindPolicy).
type PolicyValue struct {
	Format     uint8  `msgpack:"v"`
	UID        string `msgpack:"u,omitempty"`
	Generation int64  `msgpack:"g,omitempty"`
	// Spec is the JSON encoding of api/v1 MultiClusterNetworkPolicySpec,
	// exactly as stored by the origin's apiserver.
	Spec []byte `msgpack:"s"`
}

// ReportValue is one enforcing cluster's report on one MCNP (KindReport).
type ReportValue struct {
	Format             uint8  `msgpack:"v"`
	ObservedGeneration int64  `msgpack:"g,omitempty"`
	NetworkPolicies    int32  `msgpack:"n,omitempty"`
	RemotePeers        int32  `msgpack:"r,omitempty"`
	Error              string `msgpack:"e,omitempty"`
	// Degraded carries a reason such as GlobalnetCoarseIdentity.
	Degraded string `msgpack:"d,omitempty"`
	// SkippedNoNamespace is true when the enforcing cluster lacks the
	// MCNP's namespace.
	SkippedNoNamespace bool `msgpack:"sn,omitempty"`
	// InventoryHash identifies the inventory (digest hash) used.
	InventoryHash uint64 `msgpack:"ih,omitempty"`
}

// ServicePort is one port of an exported Service.
type ServicePort struct {
	Name string `msgpack:"n,omitempty"`
	Port int32  `msgpack:"p"`
	// TargetPort is the numeric targetPort, or 0 when TargetPortName
	// names a container port.
	TargetPort     int32  `msgpack:"tp,omitempty"`
	TargetPortName string `msgpack:"tn,omitempty"`
	Protocol       string `msgpack:"t,omitempty"` // TCP when empty
}

// ServiceValue describes an exported Service (KindService): what policy
// needs to know to admit its addresses.
type ServiceValue struct {
	Format uint8 `msgpack:"v"`
	// ClusterIPs are the Service's cluster IPs (none when headless).
	ClusterIPs []string      `msgpack:"ip,omitempty"`
	Ports      []ServicePort `msgpack:"po,omitempty"`
	// Selector picks the backend pods in the Service's namespace; a
	// Service without one has no pods the exporting cluster chose.
	Selector map[string]string `msgpack:"s,omitempty"`
	Headless bool              `msgpack:"h,omitempty"`
	// GlobalIPs are the Globalnet global ingress IPs allocated to the
	// Service (GlobalIngressIP status.allocatedIP, target ClusterIPService).
	GlobalIPs []string `msgpack:"gi,omitempty"`
	// PublishNotReady mirrors spec.publishNotReadyAddresses: every
	// selected pod is an endpoint, ready or not.
	PublishNotReady bool `msgpack:"pn,omitempty"`
}

// Value is implemented by the value type of every kind (pointer receivers):
// ClusterValue, NamespaceValue, PodValue, PolicyValue, ReportValue and
// ServiceValue.
type Value interface {
	// formatTag returns the value's format field.
	formatTag() *uint8
}

func (v *ClusterValue) formatTag() *uint8   { return &v.Format }
func (v *NamespaceValue) formatTag() *uint8 { return &v.Format }
func (v *PodValue) formatTag() *uint8       { return &v.Format }
func (v *PolicyValue) formatTag() *uint8    { return &v.Format }
func (v *ReportValue) formatTag() *uint8    { return &v.Format }
func (v *ServiceValue) formatTag() *uint8   { return &v.Format }

// StampFormat sets the format tag of a value about to be encoded; an error
// for anything that is not a pointer to one of the value types.
func StampFormat(v any) error {
	x, ok := v.(Value)
	if !ok {
		return fmt.Errorf("crdt: cannot encode value of type %T", v)
	}
	*x.formatTag() = ValueFormat
	return nil
}

// EncodeValue msgpack-encodes a value struct, stamping its Format, with
// map keys sorted: equal values always give equal bytes. It is the only
// value encoder; byte equality is what makes the inventory's no-op
// detection and its diff against persisted entries work.
func EncodeValue(v any) ([]byte, error) {
	if err := StampFormat(v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if buf.Len() > MaxValueBytes {
		return nil, ErrValueTooLarge
	}
	return buf.Bytes(), nil
}

// DecodeValue decodes b into out (a pointer to one of the value structs).
// Unknown fields are ignored; a missing or zero format tag is an error.
func DecodeValue(b []byte, out any) error {
	x, ok := out.(Value)
	if !ok {
		return fmt.Errorf("crdt: cannot decode into %T", out)
	}
	if len(b) > MaxValueBytes {
		return ErrValueTooLarge
	}
	if err := checkMsgpackLengths(b); err != nil {
		return fmt.Errorf("crdt: decode %T: %w", out, err)
	}
	if err := msgpack.Unmarshal(b, out); err != nil {
		return fmt.Errorf("crdt: decode %T: %w", out, err)
	}
	if *x.formatTag() == 0 {
		return fmt.Errorf("crdt: decode %T: missing value format tag", out)
	}
	return nil
}
