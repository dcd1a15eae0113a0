package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/model"
)

// render's ingestion is the daemon's: the objects of every cluster
// directory go through a static kube inventory (the daemon's kind table
// and converters) into the replicated entries that cluster would write,
// and those through model.Converge (one crdt.State, model.Mirror)
// into the enforce.Inventory both translate from.

// renderWhat names the kinds of entries whose objects render read from a
// file, for conversion errors.
var renderWhat = map[crdt.Kind]string{
	crdt.KindPod:     "Pod",
	crdt.KindPolicy:  "MultiClusterNetworkPolicy",
	crdt.KindService: "Service",
}

// clusterEntries converts one cluster's objects into the entries its
// daemon's inventory would write; an object that fails to convert is an
// error naming where it was read.
func clusterEntries(id string, o *clusterObjects) (kube.Snapshot, []error) {
	inv, err := kube.NewStaticInventory(id, o.objs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, []error{err}
	}
	snap, failed, err := inv.Entries()
	if err != nil {
		return nil, []error{fmt.Errorf("cluster %s: %w", id, err)}
	}
	var errs []error
	for k, err := range failed {
		what := renderWhat[k.Kind]
		if what == "" {
			what = k.Kind.String()
		}
		errs = append(errs, fmt.Errorf("%s: %s %s: %w", o.where[k], what, k.Name, err))
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return snap, errs
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
	return model.Converge(entries)
}
