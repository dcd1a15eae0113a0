package daemon

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/store"
)

// reportWrite is one report to publish (ok) or tombstone (!ok).
type reportWrite struct {
	ref enforce.PolicyRef
	val crdt.ReportValue
	ok  bool
}

// ownReports is what the reporter reads of the replica: this cluster's
// own report entries.
type ownReports interface {
	// Report returns the own report entry of a name (a policy reference in
	// its wire form, enforce.PolicyRef.String).
	Report(key string) (crdt.Entry, bool)
	// Live lists the names of the own live (not tombstoned) reports.
	Live() []string
}

// reporter publishes this cluster's reports (what it enforces of each
// policy that selects it) and reconciles them: a report whose policy no
// longer selects this cluster, or no longer exists, is tombstoned. No-op
// writes are skipped, so a full re-enforcement writes only what changed.
type reporter struct {
	store  ownReports
	write  func(kind crdt.Kind, name string, value []byte, deleted bool) error
	active func() bool // leader and not decommissioned
	log    *slog.Logger
}

func newReporter(st ownReports, write func(crdt.Kind, string, []byte, bool) error, active func() bool, log *slog.Logger) *reporter {
	return &reporter{store: st, write: write, active: active, log: log}
}

// Publish writes the given reports; with all (a full enforcement) it also
// tombstones every other own report.
func (r *reporter) Publish(reports []reportWrite, all bool) {
	if !all {
		for _, w := range reports {
			r.writeReport(w.ref.String(), w.val, w.ok)
		}
		return
	}
	want := map[string]bool{} // by report entry name (the wire form)
	for _, w := range reports {
		name := w.ref.String()
		want[name] = w.ok
		r.writeReport(name, w.val, w.ok)
	}
	for _, k := range r.store.Live() {
		if !want[k] {
			r.writeReport(k, crdt.ReportValue{}, false)
		}
	}
}

// writeReport publishes (or tombstones) this cluster's report on a policy,
// skipping no-op writes.
func (r *reporter) writeReport(key string, v crdt.ReportValue, present bool) {
	if !r.active() {
		return
	}
	cur, have := r.store.Report(key)
	if !present {
		if !have || cur.Deleted {
			return
		}
		if err := r.write(crdt.KindReport, key, nil, true); err != nil {
			r.log.Warn("report tombstone failed", "policy", key, "err", err)
		}
		return
	}
	b, err := crdt.EncodeValue(&v)
	if err != nil {
		r.log.Error("encoding report", "err", err)
		return
	}
	if have && !cur.Deleted && string(cur.Value) == string(b) {
		return
	}
	if err := r.write(crdt.KindReport, key, b, false); err != nil {
		r.log.Warn("report write failed", "policy", key, "err", err)
	}
}

// replicaReports reads the own reports from the replica.
type replicaReports struct {
	rep  *store.Replica
	self string
}

func (s replicaReports) Report(key string) (e crdt.Entry, ok bool) {
	s.rep.View(func(st *crdt.State) {
		e, ok = st.Get(crdt.Key{Origin: s.self, Kind: crdt.KindReport, Name: key})
	})
	return e, ok
}

func (s replicaReports) Live() []string {
	var keys []string
	s.rep.View(func(st *crdt.State) {
		st.Range(s.self, crdt.KindReport, func(e crdt.Entry) bool {
			if !e.Deleted {
				keys = append(keys, e.Name)
			}
			return true
		})
	})
	return keys
}

// Republish rewrites every own live report with its current value: a new
// version at the writer's current epoch, so that sealing the prior epochs
// after a takeover does not retire it.
func (r *reporter) Republish() error {
	if !r.active() {
		return errNotActing
	}
	var errs []error
	for _, k := range r.store.Live() {
		e, ok := r.store.Report(k)
		if !ok || e.Deleted {
			continue
		}
		if err := r.write(crdt.KindReport, k, e.Value, false); err != nil {
			errs = append(errs, fmt.Errorf("report %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}
