package crdt

import "fmt"

// NameShape is the shape an entry name of a kind must have.
type NameShape uint8

const (
	// NameEmpty means the name is "" (one entry per origin).
	NameEmpty NameShape = iota + 1
	// NameSimple is a non-empty name without further structure (a namespace).
	NameSimple
	// NameNamespaced is "namespace/name".
	NameNamespaced
	// NameOriginNamespaced is "origin/namespace/name".
	NameOriginNamespaced
)

// KindSpec describes one replicated kind. It is the single declaration of
// the kind in crdt; every other layer keys its own table by Kind and has a
// test that checks it against Kinds().
type KindSpec struct {
	Kind Kind
	// Name is the kind's name in keys, logs and metrics.
	Name string
	// Shape is the shape of its entry names (checked by ValidateEntry and
	// Write).
	Shape NameShape
	// New returns a pointer to a zero value of the kind's value type.
	New func() Value
}

// kinds is the registry of replicated kinds: entry i describes Kind(i+1).
// To add a kind: append its Kind constant in types.go (kinds are on the
// wire and in store keys: never renumber), its value type in values.go and
// its entry here; then the kube and daemon registries (their completeness
// tests fail until you do). docs/CONTRIBUTING.md walks through it.
var kinds = [...]KindSpec{
	{Kind: KindCluster, Name: "cluster", Shape: NameEmpty, New: func() Value { return &ClusterValue{} }},
	{Kind: KindNamespace, Name: "namespace", Shape: NameSimple, New: func() Value { return &NamespaceValue{} }},
	{Kind: KindPod, Name: "pod", Shape: NameNamespaced, New: func() Value { return &PodValue{} }},
	{Kind: KindPolicy, Name: "policy", Shape: NameNamespaced, New: func() Value { return &PolicyValue{} }},
	{Kind: KindReport, Name: "report", Shape: NameOriginNamespaced, New: func() Value { return &ReportValue{} }},
	{Kind: KindService, Name: "service", Shape: NameNamespaced, New: func() Value { return &ServiceValue{} }},
}

// numKinds is the number of kinds this build understands (the per-origin
// name index in state.go is an array of this size).
const numKinds = len(kinds)

// Kinds returns the registry of replicated kinds, in Kind order.
func Kinds() []KindSpec { return append([]KindSpec(nil), kinds[:]...) }

// Spec returns the registry entry of k; false for a kind this build does
// not understand.
func (k Kind) Spec() (KindSpec, bool) {
	if !k.Valid() {
		return KindSpec{}, false
	}
	return kinds[k-1], true
}

// Valid reports whether k is a kind this build understands.
func (k Kind) Valid() bool { return k >= 1 && int(k) <= numKinds }

// Opaque reports whether k is a kind this build does not know but carries:
// a later build's kind (kinds are never renumbered, so every kind above the
// registry is one). A State stores, signs, hashes and forwards opaque
// entries like any other, so a newer peer's kind spreads through older
// ones during a rolling upgrade; it never interprets them, Write refuses
// them, and readers that iterate Kinds() never see them. Kind 0 is neither
// valid nor opaque: it is refused everywhere.
func (k Kind) Opaque() bool { return int(k) > numKinds }

func (k Kind) String() string {
	if k.Valid() {
		return kinds[k-1].Name
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// DecodeKind decodes the value of an entry of kind k into a new value of
// the kind's type.
func DecodeKind(k Kind, b []byte) (Value, error) {
	spec, ok := k.Spec()
	if !ok {
		return nil, fmt.Errorf("crdt: decode value of unknown kind %d", uint8(k))
	}
	v := spec.New()
	if err := DecodeValue(b, v); err != nil {
		return nil, err
	}
	return v, nil
}
