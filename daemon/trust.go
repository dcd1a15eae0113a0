package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"maps"
	"time"

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
	own := &ownKey{cluster: o.ClusterID, self: []byte(o.SigningKey.Public().(ed25519.PublicKey)), endorsement: o.SigningKeyEndorsement, log: log}
	if o.TrustBundle != nil {
		if _, ok := o.TrustBundle[o.ClusterID]; !ok {
			return nil, nil, fmt.Errorf("trust bundle does not list this cluster %q", o.ClusterID)
		}
		bundle := maps.Clone(o.TrustBundle)
		if err := own.rotate(bundle, nil); err != nil {
			return nil, nil, err
		}
		t, err := gossip.NewTrust(bundle, true, o.ClusterID, own.self, nil, log)
		if err == nil {
			own.predecessor(t)
		}
		return sg, t, err
	}
	pins, err := rep.Store().Pins()
	if err != nil {
		return nil, nil, fmt.Errorf("load key pins: %w", err)
	}
	if err := own.rotate(pins, rep.Store().ReplacePin); err != nil {
		return nil, nil, err
	}
	t, err := gossip.NewTrust(pins, false, o.ClusterID, own.self, rep.Store().PutPin, log)
	if err != nil {
		return nil, nil, err
	}
	t.Repin, t.Forget = rep.Store().ReplacePin, rep.Store().DeletePin
	own.predecessor(t)
	adoptSharedPins(o, t, log)
	return sg, t, nil
}

// adoptSharedPins takes the cluster's shared pins (pins.go) before gossip
// starts, so a pod with a fresh store trusts what its cluster already
// trusts instead of pinning on first use again. Unreadable: the pin loop
// retries, and the store's pins hold meanwhile.
func adoptSharedPins(o Options, t *gossip.Trust, log *slog.Logger) {
	if o.Client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shared, err := kube.ReadPins(ctx, o.Client, o.Namespace)
	if err != nil {
		log.Warn("cannot read this cluster's shared key pins at start; the pin loop retries", "secret", kube.PinsSecret, "err", err)
		return
	}
	for c, k := range shared.Keys {
		if _, err := t.Adopt(c, k); err != nil {
			log.Error("cannot persist an adopted pin; it holds until restart", "remoteCluster", c, "err", err)
		}
	}
}

// ownKey is this cluster's signing identity as the trust policy sees it:
// the key, and the endorsement that proves a rotation from its predecessor.
type ownKey struct {
	cluster     string
	self        []byte
	endorsement []byte
	rotatedFrom []byte
	log         *slog.Logger
}

// rotate moves the own pin from the endorsing key to ours.
func (k *ownKey) rotate(pins map[string][]byte, persist func(origin string, old, key []byte) error) error {
	old, ok := pins[k.cluster]
	if !ok || bytes.Equal(old, k.self) || k.endorsement == nil {
		return nil
	}
	if err := gossip.CheckEndorsement(k.cluster, old, k.self, k.endorsement); err != nil {
		return fmt.Errorf("this cluster %q is pinned to another key and the signing key's endorsement does not prove a rotation from it: %w", k.cluster, err)
	}
	if persist != nil {
		if err := persist(k.cluster, old, k.self); err != nil {
			return fmt.Errorf("re-pin own rotated key: %w", err)
		}
	}
	k.log.Warn("this cluster's signing key was rotated: own pin moved to the endorsed new key",
		"old_fingerprint", gossip.KeyFingerprint(old), "new_fingerprint", gossip.KeyFingerprint(k.self))
	pins[k.cluster] = k.self
	k.rotatedFrom = old
	return nil
}

// predecessor tells the trust policy which key this one replaced. After a
// restart the own pin is already the new key: the endorsement still names
// the predecessor, whose records relays may still carry.
func (k *ownKey) predecessor(t *gossip.Trust) {
	if k.rotatedFrom == nil && len(k.endorsement) == crdt.EndorseSize &&
		gossip.CheckEndorsement(k.cluster, k.endorsement[:crdt.KeySize], k.self, k.endorsement) == nil {
		k.rotatedFrom = k.endorsement[:crdt.KeySize]
	}
	if k.rotatedFrom != nil {
		t.SetRotated(k.cluster, k.rotatedFrom, k.endorsement)
	}
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
