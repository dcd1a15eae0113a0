package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Converge is the enforce.Inventory the daemons of a cluster set converge
// on when each cluster's inventory writes entries (a kube.Snapshot, as
// kube.NewStaticInventory makes it offline: entry values by kind and
// name). Each cluster's entries are written as that cluster (epoch 1),
// merged into one observer state as gossip would, and the state goes
// through the Mirror, as in the daemon. Any entry the Mirror cannot decode
// is an error. (`coastguardd render` and the kubectl plugin both
// translate from its result.)
func Converge[S ~map[crdt.Kind]map[string][]byte](entries map[string]S) (*enforce.Inventory, error) {
	st, err := replicate(entries)
	if err != nil {
		return nil, err
	}
	m := NewMirror("")
	if errs := m.Load(st); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m.Inventory(), nil
}

// replicate writes each cluster's entries as that cluster (epoch 1) and
// merges them into one observer state.
func replicate[S ~map[crdt.Kind]map[string][]byte](entries map[string]S) (*crdt.State, error) {
	st := crdt.NewState("")
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		w := crdt.NewState(id)
		if err := w.SetEpoch(1); err != nil {
			return nil, err
		}
		for _, spec := range crdt.Kinds() {
			for _, n := range slices.Sorted(maps.Keys(entries[id][spec.Kind])) {
				d, _, err := w.Write(spec.Kind, n, entries[id][spec.Kind][n], false, 0)
				if err == nil {
					_, err = st.Apply(d)
				}
				if err != nil {
					return nil, fmt.Errorf("cluster %s: %v %s: %w", id, spec.Kind, n, err)
				}
			}
		}
	}
	return st, nil
}
