package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"maps"

	"k8s.io/client-go/tools/record"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/kube"
	"github.com/coastguard-mcnp/coastguard/store"
)

// trustFor builds the signer and the origin-key policy: strict with a trust
// bundle, else trust-on-first-use pins persisted in the store. A rotated
// key (coastguardd keys rotate) carries its endorsement by the previous
// key: it is sent with every own delta, and the own pin moves to the new
// key when the old one endorsed it.
func trustFor(o Options, rep *store.Replica, log *slog.Logger) (crdt.Signer, *gossip.Trust, error) {
	if log == nil {
		log = slog.Default()
	}
	var sg crdt.Signer = gossip.NewSigner(o.SigningKey)
	if o.SigningKeyEndorsement != nil {
		sg = gossip.NewEndorsedSigner(o.SigningKey, o.SigningKeyEndorsement)
	}
	self := []byte(o.SigningKey.Public().(ed25519.PublicKey))
	var rotatedFrom []byte
	// ownRotation moves the own pin from the endorsing key to ours.
	ownRotation := func(pins map[string][]byte, persist func(origin string, old, key []byte) error) error {
		old, ok := pins[o.ClusterID]
		if !ok || bytes.Equal(old, self) || o.SigningKeyEndorsement == nil {
			return nil
		}
		if err := gossip.CheckEndorsement(o.ClusterID, old, self, o.SigningKeyEndorsement); err != nil {
			return fmt.Errorf("this cluster %q is pinned to another key and the signing key's endorsement does not prove a rotation from it: %w", o.ClusterID, err)
		}
		if persist != nil {
			if err := persist(o.ClusterID, old, self); err != nil {
				return fmt.Errorf("re-pin own rotated key: %w", err)
			}
		}
		log.Warn("this cluster's signing key was rotated: own pin moved to the endorsed new key",
			"old_fingerprint", gossip.KeyFingerprint(old), "new_fingerprint", gossip.KeyFingerprint(self))
		pins[o.ClusterID] = self
		rotatedFrom = old
		return nil
	}
	// After a restart the own pin is already the new key: the endorsement
	// still names the predecessor, whose records relays may still carry.
	predecessor := func(t *gossip.Trust) {
		if rotatedFrom == nil && len(o.SigningKeyEndorsement) == crdt.EndorseSize &&
			gossip.CheckEndorsement(o.ClusterID, o.SigningKeyEndorsement[:crdt.KeySize], self, o.SigningKeyEndorsement) == nil {
			rotatedFrom = o.SigningKeyEndorsement[:crdt.KeySize]
		}
		if rotatedFrom != nil {
			t.SetRotated(o.ClusterID, rotatedFrom, o.SigningKeyEndorsement)
		}
	}
	if o.TrustBundle != nil {
		if _, ok := o.TrustBundle[o.ClusterID]; !ok {
			return nil, nil, fmt.Errorf("trust bundle does not list this cluster %q", o.ClusterID)
		}
		bundle := maps.Clone(o.TrustBundle)
		if err := ownRotation(bundle, nil); err != nil {
			return nil, nil, err
		}
		t, err := gossip.NewTrust(bundle, true, o.ClusterID, self, nil, log)
		if err == nil {
			predecessor(t)
		}
		return sg, t, err
	}
	pins, err := rep.Store().Pins()
	if err != nil {
		return nil, nil, fmt.Errorf("load key pins: %w", err)
	}
	if err := ownRotation(pins, rep.Store().ReplacePin); err != nil {
		return nil, nil, err
	}
	t, err := gossip.NewTrust(pins, false, o.ClusterID, self, rep.Store().PutPin, log)
	if err == nil {
		t.Repin = rep.Store().ReplacePin
		predecessor(t)
	}
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
