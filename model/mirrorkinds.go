package model

import (
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// mirrorKind is what the mirror does with the entries of one
// kind.
type mirrorKind struct {
	// decode folds one change into the mirror's enforce model and returns
	// what changed for the enforcer (nil when nothing it translates did).
	// isLive tells whether ch.New is a live value.
	decode func(m *Mirror, ch crdt.Change, isLive bool) (*enforce.Change, error)
	// status, when set, returns the own policy whose status inputs a
	// change of this entry touches (!ok for none).
	status func(m *Mirror, k crdt.Key) (enforce.PolicyRef, bool)
	// all: a change may alter every policy's enforcing set (the cluster
	// set or its labels).
	all bool
}

// mirrorKinds is the model layer of the kind registry: one entry per kind
// crdt declares (crdt.Kinds()). TestMirrorKindsComplete fails when a kind
// is missing here.
var mirrorKinds = map[crdt.Kind]mirrorKind{
	crdt.KindCluster:   {decode: (*Mirror).applyCluster, all: true},
	crdt.KindNamespace: {decode: (*Mirror).applyNamespace},
	crdt.KindPod:       {decode: (*Mirror).applyPod},
	crdt.KindPolicy:    {decode: (*Mirror).applyPolicy, status: ownPolicyStatus},
	crdt.KindReport:    {decode: (*Mirror).applyReport, status: reportStatus},
	crdt.KindService:   {decode: (*Mirror).applyService},
}

// ownPolicyStatus: an own policy's spec is a status input.
func ownPolicyStatus(m *Mirror, k crdt.Key) (enforce.PolicyRef, bool) {
	ref, _ := policyRef(k)
	return ref, ref.Origin == m.self
}

// reportStatus: a report on an own policy is a status input.
func reportStatus(m *Mirror, k crdt.Key) (enforce.PolicyRef, bool) {
	ref, ok := reportPolicy(k.Name)
	return ref, ok && ref.Origin == m.self
}
