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
	mu      sync.Mutex // guards mirror and outputs
	mirror  *model.Mirror
	outputs *model.Outputs
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
