package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/coastguard-mcnp/coastguard/kube"
)

// lead runs for one leadership term.
func (d *Daemon) lead(ctx context.Context, epochHint uint32) {
	if err := d.rep.SetMinEpoch(epochHint); err != nil {
		d.log.Error("cannot persist writer epoch; giving up this term", "err", err)
		return
	}
	if err := d.fenceEpoch(ctx); err != nil {
		d.log.Error("cannot fence the writer epoch on the Lease; giving up this term", "err", err)
		return
	}
	// Seed the applier with what this daemon already computed (from the
	// loaded state, or warm as a standby) before it runs: started with an
	// empty desired set it would delete every generated NetworkPolicy and
	// re-create it on the first enforcement after a restart or failover.
	d.mu.Lock()
	desired := d.outputs.Desired()
	d.mu.Unlock()
	if err := d.applier.SetDesired(desired); err != nil {
		d.log.Error("enforcer produced an invalid NetworkPolicy set", "err", err)
	}
	d.closeGate() // nothing is deleted or shrunk until the view is complete
	d.leader.Store(true)
	d.m.leader.Set(1)
	d.log.Info("leading", "epoch", d.rep.Epoch())

	var wg sync.WaitGroup
	wg.Add(5)
	go func() { defer wg.Done(); d.clusterSetLoop(ctx) }() // CoastguardCluster objects
	go func() { defer wg.Done(); d.gateLoop(ctx) }()
	go func() {
		defer wg.Done()
		if err := d.applier.Run(ctx); err != nil && ctx.Err() == nil {
			d.log.Error("applier stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		newCollector(d.opts.ClusterID, d.opts.TombstoneGCAfter, d.rep, d.node, d.log).Run(ctx)
	}()
	// re-publish every own entry at this term's epoch, then seal the prior
	// epochs; again after every epoch bump (takeover.go)
	go func() { defer wg.Done(); d.takeoverLoop(ctx) }()
	d.enforce.Mark(allPolicies) // re-apply everything and reconcile reports
	d.st.MarkAll()
	if err := d.inv.RunWriter(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, kube.ErrNotLeader) {
		d.log.Error("inventory writer stopped", "err", err)
	}
	wg.Wait()
}

// fenceEpoch records the writer epoch on the Lease before anything is
// written at it, so that no later leader reuses it (kube.RecordEpoch).
func (d *Daemon) fenceEpoch(ctx context.Context) error {
	if d.elector == nil {
		return nil
	}
	return d.elector.RecordEpoch(ctx, d.rep.Epoch())
}

// leaseIdentity returns the identity persisted in dataDir for this node name,
// creating it on first use.
func leaseIdentity(dataDir, node string) (string, error) {
	path := filepath.Join(dataDir, "lease-identity")
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if strings.HasPrefix(id, node+"_") {
			return id, nil
		}
	} else if !os.IsNotExist(err) {
		return "", fmt.Errorf("lease identity: %w", err)
	}
	id := kube.NewIdentity(node)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("lease identity: %w", err)
	}
	return id, nil
}
