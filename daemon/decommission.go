package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// DecommissionedMarker is written into the data dir after a decommission; a
// daemon refuses to start while it exists (delete it to rejoin on purpose).
const DecommissionedMarker = "DECOMMISSIONED"

// retirer gossips the retirement of this cluster and leaves the mesh
// (gossip.Node).
type retirer interface {
	Decommission(ctx context.Context, r crdt.Retire) error
}

// ownReplica is what a decommission needs of the replica (store.Replica):
// it builds, signs and applies the own cluster's retirement.
type ownReplica interface {
	RetireOwn() (crdt.Retire, error)
}

// settlingApplier is what a decommission needs of the applier.
type settlingApplier interface {
	SetDesired(desired []networkingv1.NetworkPolicy) error
	Settled() bool
}

// decommissioner retires this cluster from the cluster set (the proposal's
// "cluster removed" flow): it gossips the retirement, removes the
// NetworkPolicies generated here, leaves the marker in the data dir and
// stops the daemon. Only the leader can.
type decommissioner struct {
	roles       *roles
	rep         ownReplica
	node        retirer
	applier     settlingApplier
	releaseGate func(reason string)
	dataDir     string
	stop        func()
	log         *slog.Logger
	settle      time.Duration // how long to wait for the deletes (30s)
	poll        time.Duration // how often to check (100ms)
}

// Decommission runs the flow once; a second call fails.
func (c *decommissioner) Decommission(ctx context.Context) error {
	if !c.roles.leader.Load() {
		return errNotLeaderDecommission
	}
	if !c.roles.decommissioned.CompareAndSwap(false, true) {
		return errors.New("already decommissioned")
	}
	c.log.Warn("decommissioning cluster: retiring its entries everywhere")
	r, err := c.rep.RetireOwn()
	if err != nil {
		return fmt.Errorf("retiring the own cluster: %w", err)
	}
	if err := c.node.Decommission(ctx, r); err != nil {
		return fmt.Errorf("gossiping retirement: %w", err)
	}
	// remove the NetworkPolicies we generated here: an explicit
	// decommission releases the empty-view gate
	c.releaseGate("decommission")
	if err := c.applier.SetDesired(nil); err != nil {
		return err
	}
	deadline := time.Now().Add(c.settle)
	for !c.applier.Settled() && time.Now().Before(deadline) {
		time.Sleep(c.poll)
	}
	if err := os.WriteFile(filepath.Join(c.dataDir, DecommissionedMarker),
		[]byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return err
	}
	c.log.Warn("cluster decommissioned; stopping")
	go func() { time.Sleep(200 * time.Millisecond); c.stop() }()
	return nil
}

var errNotLeaderDecommission = errors.New("this daemon is not its cluster's leader; run decommission on the Lease holder")

// checkNotDecommissioned refuses to start from a decommissioned data dir.
func checkNotDecommissioned(dataDir, cluster string) error {
	marker := filepath.Join(dataDir, DecommissionedMarker)
	if _, err := os.Stat(marker); err == nil {
		return fmt.Errorf("cluster %s was decommissioned from this data dir (%s exists); remove the file to rejoin the cluster set",
			cluster, marker)
	}
	return nil
}
