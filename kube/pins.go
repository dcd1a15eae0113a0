package kube

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The pins of a cluster (docs/SECURITY.md "Pins"): the Ed25519 key it
// trusts for every other cluster, shared by all its pods in one Secret that
// only the leader writes and that outlives pods and stores. Data: cluster ID
// -> 32-byte public key. An operator's reset (kubectl coastguard pins
// delete, or its decommission) removes a cluster's key and leaves an
// annotation UnpinAnnotationPrefix+cluster = "<reset id>:<base64 key>"
// naming the key to forget, so that no pod re-adds it from its own store.
// Every pod forgets that key once per reset id; the next key that cluster
// presents (even the same one, after a reinstall) is pinned on first use,
// and the leader writes it back, which drops the tombstone.
const (
	PinsSecret            = "coastguard-pins"
	UnpinAnnotationPrefix = "unpin.coastguard.submariner.io/"
)

// Reset is one reset of a cluster's pin: the key to forget, once per ID.
type Reset struct {
	ID  string
	Key []byte
}

// Pins is the content of the pins Secret.
type Pins struct {
	Keys     map[string][]byte // cluster -> trusted key
	Unpinned map[string]Reset  // cluster -> the reset of its key
	// exists: read from a Secret (of resourceVersion), not absent.
	exists          bool
	resourceVersion string
}

// ReadPins reads the pins Secret of ns; an absent Secret is empty pins.
func ReadPins(ctx context.Context, c kubernetes.Interface, ns string) (Pins, error) {
	p := Pins{Keys: map[string][]byte{}, Unpinned: map[string]Reset{}}
	s, err := c.CoreV1().Secrets(ns).Get(ctx, PinsSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("reading Secret %s/%s: %w", ns, PinsSecret, err)
	}
	p.exists, p.resourceVersion = true, s.ResourceVersion
	for id, k := range s.Data {
		if len(k) == ed25519.PublicKeySize {
			p.Keys[id] = k
		}
	}
	for a, v := range s.Annotations {
		id, ok := strings.CutPrefix(a, UnpinAnnotationPrefix)
		if !ok {
			continue
		}
		rid, b64, _ := strings.Cut(v, ":")
		if k, err := base64.StdEncoding.DecodeString(b64); err == nil && len(k) == ed25519.PublicKeySize && rid != "" {
			p.Unpinned[id] = Reset{ID: rid, Key: k}
		}
	}
	return p, nil
}

// Equal reports whether two pin sets hold the same keys and tombstones.
func (p Pins) Equal(o Pins) bool {
	eq := func(a, b []byte) bool { return string(a) == string(b) }
	return maps.EqualFunc(p.Keys, o.Keys, eq) &&
		maps.EqualFunc(p.Unpinned, o.Unpinned, func(a, b Reset) bool { return a.ID == b.ID && eq(a.Key, b.Key) })
}

// WritePins writes p as the pins Secret of ns, over exactly the version
// read (a concurrent change is a Conflict error: read again and retry).
func WritePins(ctx context.Context, c kubernetes.Interface, ns string, p Pins) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: PinsSecret, Namespace: ns, ResourceVersion: p.resourceVersion,
			Labels:      map[string]string{LabelManagedByKey: "coastguard", "app.kubernetes.io/name": "coastguard"},
			Annotations: map[string]string{}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{},
	}
	for id, k := range p.Keys {
		s.Data[id] = k
	}
	for id, r := range p.Unpinned {
		s.Annotations[UnpinAnnotationPrefix+id] = r.ID + ":" + base64.StdEncoding.EncodeToString(r.Key)
	}
	var err error
	if !p.exists {
		_, err = c.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{FieldManager: FieldManager})
	} else {
		_, err = c.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s: %w", ns, PinsSecret, err)
	}
	return nil
}

// Unpin removes cluster id's key from p and records its reset under
// resetID (when it had one); it reports whether p changed.
func (p *Pins) Unpin(id, resetID string) bool {
	k, ok := p.Keys[id]
	if !ok {
		return false
	}
	delete(p.Keys, id)
	p.Unpinned[id] = Reset{ID: resetID, Key: k}
	return true
}

// ResetPin removes cluster id's key from the pins Secret of ns, recording
// the reset under resetID, re-reading on a concurrent write. It reports
// whether id was pinned there.
func ResetPin(ctx context.Context, c kubernetes.Interface, ns, id, resetID string) (bool, error) {
	var err error
	for range 5 {
		var p Pins
		if p, err = ReadPins(ctx, c, ns); err != nil {
			return false, err
		}
		if !p.Unpin(id, resetID) {
			return false, nil
		}
		if err = WritePins(ctx, c, ns, p); err == nil || !apierrors.IsConflict(err) {
			return err == nil, err
		}
	}
	return false, err
}
