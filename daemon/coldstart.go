package daemon

import (
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/model"
	"github.com/coastguard-mcnp/coastguard/store"
)

// LoadState opens the replica at path for cluster clusterID and builds m,
// an empty mirror, from its entries: everything a restarting daemon needs
// before it can enforce. The view is built while the replica restores the
// same entries (store.Options.OnLoad, one core each) instead of from the
// restored state afterwards; the result is that of Mirror.Load on the
// replica's state. It returns the entries m skipped (undecodable, refused
// origin). opts.OnLoad is replaced.
func LoadState(path, clusterID string, opts store.Options, m *model.Mirror) (*store.Replica, []error, error) {
	var errs []error
	opts.OnLoad = mirrorLoader(m, &errs)
	rep, err := store.OpenReplica(path, clusterID, opts)
	if err != nil {
		return nil, nil, err
	}
	return rep, errs, nil
}

// mirrorLoader is the store.Options.OnLoad that builds m from the entries
// being restored; *errs gets the entries it skipped. A second call (the
// replica starts empty after a corrupt file) starts m over.
func mirrorLoader(m *model.Mirror, errs *[]error) func([]crdt.Entry) {
	loads := 0
	return func(entries []crdt.Entry) {
		if loads++; loads > 1 {
			m.Reset()
		}
		*errs = m.LoadEntries(entries)
	}
}
