package daemon

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"

	"k8s.io/client-go/tools/record"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/store"
)

// trustFor builds the signer and the origin-key policy: strict with a trust
// bundle, else trust-on-first-use pins persisted in the store.
func trustFor(o Options, rep *store.Replica, log *slog.Logger) (*gossip.Signer, *gossip.Trust, error) {
	sg := gossip.NewSigner(o.SigningKey)
	if o.TrustBundle != nil {
		if _, ok := o.TrustBundle[o.ClusterID]; !ok {
			return nil, nil, fmt.Errorf("trust bundle does not list this cluster %q", o.ClusterID)
		}
		t, err := gossip.NewTrust(o.TrustBundle, true, o.ClusterID, sg.PublicKey(), nil, log)
		return sg, t, err
	}
	pins, err := rep.Store().Pins()
	if err != nil {
		return nil, nil, fmt.Errorf("load key pins: %w", err)
	}
	t, err := gossip.NewTrust(pins, false, o.ClusterID, sg.PublicKey(), rep.Store().PutPin, log)
	return sg, t, err
}

// keyEventLoop reports every (rate-limited) signing-key mismatch the trust
// policy refuses as a Warning Event SigningKeyMismatch on the claimed
// cluster's CoastguardCluster, in addition to the metric and the log line.
// It runs on every pod, leader or not: any pod may be the one a rogue
// reaches.
func (d *Daemon) keyEventLoop(ctx context.Context, rec record.EventRecorder) {
	if d.node == nil || d.node.Trust() == nil {
		return
	}
	ch := d.node.Trust().Mismatches()
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-ch:
			kube.RecordKeyMismatch(ctx, d.opts.Dynamic, rec, m.Cluster,
				gossip.KeyFingerprint(m.Trusted), gossip.KeyFingerprint(m.Presented))
		}
	}
}

// keyFingerprint is the fingerprint of cluster id's signing key as this
// node sees it: its own key for the local cluster, the pinned (or trust
// bundle) key of a remote one; "" when unsigned or not yet pinned.
func (d *Daemon) keyFingerprint(id string) string {
	if id == d.opts.ClusterID && d.opts.SigningKey != nil {
		return gossip.KeyFingerprint(d.opts.SigningKey.Public().(ed25519.PublicKey))
	}
	if d.node == nil {
		return ""
	}
	return d.node.Trust().Fingerprint(id)
}
