package daemon

import (
	"sync"
	"sync/atomic"

	"github.com/coastguard-mcnp/coastguard/model"
)

// view is the daemon's decoded state: the mirror of the replica and the
// enforcer's outputs, under one lock. The change feed writes it; the
// enforcer, status, gate, sanity and debug parts read it.
type view struct {
	mu      sync.Mutex // guards mirror, outputs and hold
	mirror  *model.Mirror
	outputs *model.Outputs
	// hold keeps unproven remote inventory entries out of the mirror
	// (provenhold.go).
	hold *inventoryHold
}

// roles is what this daemon currently is: its cluster's leader (writes
// entries, applies NetworkPolicies, updates status) and whether the
// cluster was decommissioned (then it writes nothing any more).
type roles struct {
	leader         atomic.Bool
	decommissioned atomic.Bool
}

// acting: the leader of a cluster still in the set.
func (r *roles) acting() bool { return r.leader.Load() && !r.decommissioned.Load() }
