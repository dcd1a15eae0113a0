package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
)

// render's ingestion is the daemon's: the objects of every cluster
// directory go through the kube converters the inventory uses into the
// replicated entries that cluster would write, those entries into one
// crdt.State, and the state through model.Mirror, the daemon's, into the
// enforce.Inventory both translate from (model.Outputs then turns it into
// what each cluster applies, as in the daemon).

// clusterEntries converts one cluster's objects into the entries its
// daemon's inventory would write.
func clusterEntries(id string, o *clusterObjects) (kube.Snapshot, []error) {
	snap := kube.Snapshot{}
	var errs []error
	set := func(kind crdt.Kind, name string, v any) error {
		b, err := kube.EncodeCanonical(v)
		if err == nil {
			snap.Set(kind, name, b)
		}
		return err
	}
	for _, kind := range kube.InventoryKinds {
		entries, ok := renderEntries[kind]
		if !ok {
			errs = append(errs, fmt.Errorf("render cannot make %v entries", kind))
			continue
		}
		errs = append(errs, entries(id, o, set)...)
	}
	return snap, errs
}

// replicate writes each cluster's entries as that cluster (epoch 1) and
// merges them into one observer state, as gossip would.
func replicate(entries map[string]kube.Snapshot) (*crdt.State, error) {
	st := crdt.NewState("")
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		w := crdt.NewState(id)
		if err := w.SetEpoch(1); err != nil {
			return nil, err
		}
		for _, spec := range crdt.Kinds() {
			names := slices.Sorted(maps.Keys(entries[id][spec.Kind]))
			for _, n := range names {
				d, _, err := w.Write(spec.Kind, n, entries[id][spec.Kind][n], false, 0)
				if err != nil {
					return nil, fmt.Errorf("cluster %s: %v %s: %w", id, spec.Kind, n, err)
				}
				if _, err := st.Apply(d); err != nil {
					return nil, fmt.Errorf("cluster %s: %v %s: %w", id, spec.Kind, n, err)
				}
			}
		}
	}
	return st, nil
}

// mirrorOf feeds a state through model.Mirror, as the daemon does; any entry it cannot
// decode is an error.
func mirrorOf(st *crdt.State) (*enforce.Inventory, error) {
	m := model.NewMirror("")
	if errs := m.Load(st); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m.Inventory(), nil
}

// ingest turns every cluster's objects into the enforce.Inventory the
// daemons would converge on.
func ingest(clusters []string, objs map[string]*clusterObjects) (*enforce.Inventory, error) {
	entries := map[string]kube.Snapshot{}
	var errs []error
	for _, id := range clusters {
		snap, e := clusterEntries(id, objs[id])
		errs = append(errs, e...)
		entries[id] = snap
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	st, err := replicate(entries)
	if err != nil {
		return nil, err
	}
	return mirrorOf(st)
}
