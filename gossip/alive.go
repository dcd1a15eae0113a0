package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Membership you can base authority on (issue 29, item 2). memberlist takes
// any alive message that decrypts with the shared gossip key, so before
// this check one alive message from any key holder could re-label another
// cluster's member. Every alive message (UDP gossip, push/pull and joins:
// memberlist runs the Alive delegate on all of them) now passes check
// before memberlist applies it:
//
//   - its metadata decodes and names a cluster;
//   - a node name, once accepted, stays bound to its cluster for the
//     life of this process: an alive naming another cluster for it is
//     refused (meta_cluster_change);
//   - with signatures on (Config.Trust), the metadata is signed by the
//     cluster's key (meta.go) under the same policy as entries: the pinned
//     key, a trust bundle key in strict mode, or the key it presents pinned
//     on first use; an endorsed rotation re-pins (meta_signature);
//   - unsigned (version 1) metadata, what the previous coastguardd release
//     sends, is refused (meta_unsigned) unless Config.AllowUnsignedMeta is
//     set for a rolling upgrade; even then a node name that signed cannot
//     fall back to the old format, and the name/cluster binding holds.
//     (New names are accepted unsigned even for a cluster that signs: a
//     daemon that starts mid-rollout sees its cluster's old and new pods
//     in any order. While the flag is on, a key holder can add unsigned
//     members under new names; they can still neither re-label a member
//     nor keep a cluster that beats from being judged by its heartbeats.)
//
// Incarnations (which this delegate cannot see: memberlist hands it a Node
// without one) are bounded on the wire, incarnation.go.
const (
	dropMetaInvalid   = "meta_invalid"        // undecodable metadata, or no cluster
	dropMetaUnsigned  = "meta_unsigned"       // version 1 metadata while signatures are on
	dropMetaSignature = "meta_signature"      // metadata not signed by the cluster's trusted key
	dropMetaCluster   = "meta_cluster_change" // a known node name claims another cluster
)

// maxBindings bounds the node name -> cluster bindings kept. Beyond it new
// names are still verified on every alive message, only not remembered.
const maxBindings = 16384

// binding is what an accepted alive message established for a node name.
type binding struct {
	cluster string
	signed  bool
	meta    string // the last metadata accepted (verified) for the name
}

// memberAuth decides on alive messages. It has its own lock; it is called
// by memberlist with memberlist's node lock held and never calls back into
// memberlist.
type memberAuth struct {
	trust         *Trust
	allowUnsigned bool

	mu    sync.Mutex
	bound map[string]binding
}

func newMemberAuth(tr *Trust, allowUnsigned bool) *memberAuth {
	return &memberAuth{trust: tr, allowUnsigned: allowUnsigned,
		bound: map[string]binding{}}
}

// check returns nil when the alive message of node name with metadata
// meta may be applied, else the drop reason and why.
func (ma *memberAuth) check(name string, meta []byte) (string, error) {
	m, err := parseMeta(meta)
	if err != nil {
		return dropMetaInvalid, fmt.Errorf("metadata: %w", err)
	}
	if m.cluster == "" {
		return dropMetaInvalid, errors.New("metadata names no cluster")
	}
	ma.mu.Lock()
	b, known := ma.bound[name]
	ma.mu.Unlock()
	if known && b.cluster != m.cluster {
		return dropMetaCluster, fmt.Errorf("member %q belongs to cluster %q; refusing metadata naming %q", name, b.cluster, m.cluster)
	}
	if known && b.meta == string(meta) {
		return "", nil // verified before
	}
	if ma.trust != nil {
		// A name that signed may not fall back to the unsigned format.
		if reason, err := ma.verify(name, &m, known && b.signed); err != nil {
			return reason, err
		}
	}
	ma.mu.Lock()
	defer ma.mu.Unlock()
	if b, ok := ma.bound[name]; ok || len(ma.bound) < maxBindings {
		if ok && b.cluster != m.cluster { // raced with another alive
			return dropMetaCluster, fmt.Errorf("member %q belongs to cluster %q; refusing metadata naming %q", name, b.cluster, m.cluster)
		}
		ma.bound[name] = binding{cluster: m.cluster, signed: m.signed() || b.signed, meta: string(meta)}
	}
	return "", nil
}

// verify checks m's signature under the trust policy. signedBefore is set
// when the name presented signed metadata before.
func (ma *memberAuth) verify(name string, m *metaInfo, signedBefore bool) (string, error) {
	if !m.signed() {
		switch {
		case !ma.allowUnsigned:
			return dropMetaUnsigned, fmt.Errorf("member %q of cluster %q sends unsigned (version %d) metadata", name, m.cluster, m.version)
		case signedBefore:
			return dropMetaUnsigned, fmt.Errorf("member %q of cluster %q sends unsigned metadata, but it signed before", name, m.cluster)
		}
		return "", nil
	}
	tr := ma.trust
	if pin := tr.Key(m.cluster); m.endorse != nil && pin != nil && !bytes.Equal(pin, m.key) {
		if err := tr.Endorse(m.cluster, m.key, m.endorse); err != nil {
			return metaRefusal(err), fmt.Errorf("member %q: %w", name, err)
		}
	}
	if err := tr.Verify(m.cluster, m.key, metaSigMessage(name, m.cluster, m.flags, m.build), m.sig); err != nil {
		return metaRefusal(err), fmt.Errorf("member %q: %w", name, err)
	}
	return "", nil
}

// metaRefusal is the drop reason of metadata the trust policy refused: a
// key other than the one trusted for the cluster is key_mismatch, as for
// entries (someone claims that cluster's ID: the CoastguardKeyMismatch
// alert), anything else meta_signature.
func metaRefusal(err error) string {
	if crdt.TrustReason(err) == crdt.ReasonKeyMismatch {
		return crdt.ReasonKeyMismatch
	}
	return dropMetaSignature
}

// clusterOf returns the cluster a node name is bound to ("" if none).
func (ma *memberAuth) clusterOf(name string) string {
	ma.mu.Lock()
	defer ma.mu.Unlock()
	return ma.bound[name].cluster
}

// aliveDelegate implements memberlist.AliveDelegate.
type aliveDelegate Node

// NotifyAlive refuses (memberlist ignores the message) an alive message
// that memberAuth.check refuses, counting it by reason.
func (a *aliveDelegate) NotifyAlive(peer *memberlist.Node) error {
	n := (*Node)(a)
	if peer.Name == n.cfg.NodeName && n.cfg.Signer == nil {
		return nil // our own unsigned metadata (memberlist refutes others' claims about us)
	}
	reason, err := n.auth.check(peer.Name, peer.Meta)
	if err != nil {
		n.drop(reason, "alive message refused", "member", peer.Name, "addr", peer.Address(), "err", err)
		return err
	}
	return nil
}
