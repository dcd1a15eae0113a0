package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// PinSyncInterval is how often a daemon reconciles its trust-on-first-use
// pins with its cluster's shared pins (kube.PinsSecret).
var PinSyncInterval = 10 * time.Second

// pinPlan is one round of pin reconciliation for one daemon.
type pinPlan struct {
	adopt  map[string][]byte // shared pins that differ from this daemon's
	forget map[string][]byte // this daemon's pins an operator reset
	write  *kube.Pins        // the leader's new Secret content; nil: unchanged
}

// planPins reconciles this daemon's pins (local, the own cluster's
// included) with the cluster's shared ones. The Secret wins for every
// cluster it names; a reset forgets exactly the key it names, once per
// reset (applied: cluster -> the reset IDs this daemon has applied). The
// leader then writes back the pins only it holds (first-use pins made since
// the last round), and drops the tombstone of a cluster pinned to a new key.
func planPins(self string, local map[string][]byte, shared kube.Pins, applied map[string]string, leader bool) pinPlan {
	p := pinPlan{adopt: map[string][]byte{}, forget: map[string][]byte{}}
	for c, k := range shared.Keys {
		if c != self && !bytes.Equal(local[c], k) {
			p.adopt[c] = k
		}
	}
	for c, r := range shared.Unpinned {
		if _, named := shared.Keys[c]; !named && applied[c] != r.ID && bytes.Equal(local[c], r.Key) {
			p.forget[c] = r.Key
		}
	}
	if !leader {
		return p
	}
	next := shared
	next.Keys, next.Unpinned = maps.Clone(shared.Keys), maps.Clone(shared.Unpinned)
	for c, k := range local {
		if c == self || p.forget[c] != nil {
			continue
		}
		if _, named := next.Keys[c]; !named {
			next.Keys[c] = k
		}
	}
	for c := range next.Unpinned {
		if _, named := next.Keys[c]; named {
			delete(next.Unpinned, c) // pinned again, to another key
		}
	}
	if !next.Equal(shared) {
		p.write = &next
	}
	return p
}

// syncPins runs one round: read the shared pins, adopt and forget as
// planned, and (leader) write them back.
func syncPins(ctx context.Context, c kubernetes.Interface, ns, self string, t *gossip.Trust, applied map[string]string, leader bool, log *slog.Logger) error {
	if t == nil || t.Strict() {
		return nil
	}
	shared, err := kube.ReadPins(ctx, c, ns)
	if err != nil {
		return err
	}
	plan := planPins(self, t.Pins(), shared, applied, leader)
	for cl, k := range plan.adopt {
		if _, err := t.Adopt(cl, k); err != nil {
			log.Error("cannot persist an adopted pin; it holds until restart", "remoteCluster", cl, "err", err)
		}
	}
	for cl, k := range plan.forget {
		if _, err := t.Unpin(cl, k); err != nil {
			log.Error("cannot delete a reset pin from the store", "remoteCluster", cl, "err", err)
		}
	}
	for cl, r := range shared.Unpinned {
		applied[cl] = r.ID // applied, or nothing to apply: never again
	}
	if plan.write != nil {
		return kube.WritePins(ctx, c, ns, *plan.write)
	}
	return nil
}

// pinLoop reconciles the pins every PinSyncInterval. Errors are logged
// once per kind and retried; a Conflict (another writer) is retried at
// once on the next round.
func (d *Daemon) pinLoop(ctx context.Context) {
	if d.node == nil || d.node.Trust() == nil || d.opts.Client == nil {
		return
	}
	last := ""
	applied := map[string]string{}
	round := func(time.Time) {
		err := syncPins(ctx, d.opts.Client, d.opts.Namespace, d.opts.ClusterID, d.node.Trust(), applied, d.leader.Load(), d.log)
		switch {
		case err == nil:
			last = ""
		case apierrors.IsConflict(err):
		case err.Error() != last:
			last = err.Error()
			d.log.Warn("cannot sync this cluster's shared key pins; retrying", "secret", kube.PinsSecret, "err", err)
		}
	}
	// no round at once: trustFor adopted the shared pins before gossip
	// started, and a daemon is not the leader yet at start
	every(ctx, PinSyncInterval, round)
}

// forgetPins drops a decommissioned cluster's pin here and, on the leader,
// from the cluster's shared pins, so its ID can join again with a new key.
func (d *Daemon) forgetPins(origin string) {
	if d.node == nil || d.node.Trust() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.node.Trust().Unpin(origin, nil); err != nil {
		d.log.Error("cannot delete a decommissioned cluster's pin from the store", "remoteCluster", origin, "err", err)
	}
	if !d.leader.Load() || d.opts.Client == nil || d.node.Trust().Strict() {
		return
	}
	resetID := "decommission-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := kube.ResetPin(ctx, d.opts.Client, d.opts.Namespace, origin, resetID); err != nil {
		d.log.Warn("cannot remove a decommissioned cluster from the shared pins", "remoteCluster", origin, "err", err)
	}
}
