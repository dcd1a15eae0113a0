package daemon

import (
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// mirrorDecoder folds one change of its kind into the mirror's enforce
// model and returns what changed for the enforcer (nil when nothing it
// cares about did). isLive tells whether ch.New is a live value.
type mirrorDecoder func(m *Mirror, ch crdt.Change, isLive bool) (*enforce.Change, error)

// mirrorKinds is the daemon layer of the kind registry: one decoder per
// kind crdt declares (crdt.Kinds()). TestMirrorKindsComplete fails when a
// kind is missing here.
var mirrorKinds = map[crdt.Kind]mirrorDecoder{
	crdt.KindCluster:   (*Mirror).applyCluster,
	crdt.KindNamespace: (*Mirror).applyNamespace,
	crdt.KindPod:       (*Mirror).applyPod,
	crdt.KindPolicy:    (*Mirror).applyPolicy,
	crdt.KindReport:    (*Mirror).applyReport,
}
