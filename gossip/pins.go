package gossip

import "bytes"

// The pins a cluster shares (daemon/pins.go keeps them in a Secret written
// by the leader, so every pod of the cluster trusts the same keys and a pod
// with a fresh store does not pin on first use again): Pins reads them,
// Adopt takes a shared pin over a local one, Unpin forgets one (an
// operator's reset, or the cluster's decommission). Strict mode (a trust
// bundle) ignores both: the bundle is the root.

// Pins returns a copy of every trusted key, the own cluster's included.
func (t *Trust) Pins() map[string][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][]byte, len(t.pins))
	for o, k := range t.pins {
		out[o] = bytes.Clone(k)
	}
	return out
}

// Strict reports whether the trust bundle is the only root.
func (t *Trust) Strict() bool { return t.strict }

// Adopt makes key the trusted key of origin, as the cluster's shared pins
// say, and persists it (Repin). It reports whether anything changed. The
// own cluster and strict mode are never changed.
func (t *Trust) Adopt(origin string, key []byte) (bool, error) {
	if t.strict || origin == t.self {
		return false, nil
	}
	t.mu.Lock()
	old, had := t.pins[origin]
	if had && bytes.Equal(old, key) {
		t.mu.Unlock()
		return false, nil
	}
	t.pins[origin] = bytes.Clone(key)
	delete(t.prev, origin)
	delete(t.endorsed, origin)
	t.mu.Unlock()
	t.log.Warn("trusting the key this cluster's shared pins name for a cluster", "remote_cluster", origin,
		"fingerprint", KeyFingerprint(key), "replaced_fingerprint", KeyFingerprint(old))
	var err error
	switch {
	case had && t.Repin != nil:
		err = t.Repin(origin, old, key)
	case !had && t.persist != nil:
		err = t.persist(origin, key)
	}
	return true, err
}

// Unpin forgets the trusted key of origin when it is key (any key when key
// is nil): the next key presented for origin is pinned on first use. The
// own cluster and strict mode are never unpinned. It reports whether a pin
// was removed.
func (t *Trust) Unpin(origin string, key []byte) (bool, error) {
	if t.strict || origin == t.self {
		return false, nil
	}
	t.mu.Lock()
	old, had := t.pins[origin]
	if !had || (key != nil && !bytes.Equal(old, key)) {
		t.mu.Unlock()
		return false, nil
	}
	delete(t.pins, origin)
	delete(t.prev, origin)
	delete(t.endorsed, origin)
	t.mu.Unlock()
	t.log.Warn("forgot a cluster's pinned key: its next key is pinned on first use", "remote_cluster", origin, "fingerprint", KeyFingerprint(old))
	if t.Forget != nil {
		return true, t.Forget(origin)
	}
	return true, nil
}
