package gossip

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Trust is the origin-key policy of a node (docs/SECURITY.md): it maps each
// cluster ID to the one Ed25519 public key allowed to sign for it, and
// implements crdt.Verifier.
//
//   - Strict mode: only keys from the operator's trust bundle are accepted.
//   - Default (trust on first use): the first key that presents a valid
//     signature for a cluster is pinned (persisted by Persist, in bbolt),
//     and every other key for that cluster is refused loudly
//     (dropped{reason="key_mismatch"} and an error log line) for ever,
//     until an operator removes the pin.
type Trust struct {
	mu     sync.Mutex
	pins   map[string][]byte
	strict bool
	// Persist stores a new pin; nil keeps pins in memory only.
	persist func(origin string, key []byte) error
	log     *slog.Logger
	warned  map[string]time.Time
	// mismatches carries rate-limited key mismatches to whoever reports
	// them as Kubernetes Events (daemon); full means dropped (the metric
	// and the log line still count every one).
	mismatches chan KeyMismatch
	// Key rotations accepted (docs/SECURITY.md): the endorsement of the
	// current pin by the previous key, and that previous key, whose
	// signatures stay valid so relays not yet re-pinned are not refused.
	endorsed map[string][]byte
	prev     map[string][]byte
	// Repin persists a rotated pin (nil: memory only, e.g. strict mode
	// where the trust bundle stays the root on restart).
	Repin func(origin string, old, key []byte) error
	// Forget deletes a persisted pin (Unpin); nil: memory only.
	Forget func(origin string) error
	self   string
}

// KeyMismatch is a peer presenting, for a cluster ID, another key than the
// one this node trusts for it (reported at most once a minute per cluster).
type KeyMismatch struct {
	Cluster   string
	Trusted   []byte
	Presented []byte
}

// KeyFingerprint is the printable fingerprint of a public key:
// "SHA256:" and the unpadded base64 of its SHA-256 (as ssh-keygen -l).
func KeyFingerprint(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	h := sha256.Sum256(key)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(h[:])
}

// Mismatches delivers key mismatches (rate-limited, see KeyMismatch).
func (t *Trust) Mismatches() <-chan KeyMismatch { return t.mismatches }

// NewTrust builds the policy. pins are the persisted TOFU pins, or the trust
// bundle with strict set. self/selfKey pin the local cluster's own key.
func NewTrust(pins map[string][]byte, strict bool, self string, selfKey []byte,
	persist func(origin string, key []byte) error, log *slog.Logger) (*Trust, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &Trust{pins: map[string][]byte{}, strict: strict, persist: persist, log: log, warned: map[string]time.Time{}, self: self,
		mismatches: make(chan KeyMismatch, 64), endorsed: map[string][]byte{}, prev: map[string][]byte{}}
	for o, k := range pins {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("gossip: key of cluster %q has %d bytes, want %d", o, len(k), ed25519.PublicKeySize)
		}
		t.pins[o] = bytes.Clone(k)
	}
	if self != "" && selfKey != nil {
		if old, ok := t.pins[self]; ok && !bytes.Equal(old, selfKey) {
			return nil, fmt.Errorf("gossip: this cluster %q is pinned (or listed in the trust bundle) with a different key than --signing-key-file", self)
		}
		if _, ok := t.pins[self]; !ok {
			t.pins[self] = bytes.Clone(selfKey)
			if persist != nil && !strict {
				if err := persist(self, selfKey); err != nil {
					return nil, fmt.Errorf("gossip: pin own key: %w", err)
				}
			}
		}
	}
	return t, nil
}

// Key returns the trusted key of origin (nil if none yet).
func (t *Trust) Key(origin string) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pins[origin]
}

func (t *Trust) loud(origin, reason string, key []byte) {
	t.mu.Lock()
	last, ok := t.warned[origin]
	now := time.Now()
	if ok && now.Sub(last) < time.Minute {
		t.mu.Unlock()
		return
	}
	t.warned[origin] = now
	trusted := t.pins[origin]
	t.mu.Unlock()
	t.log.Error("REFUSING data for a cluster signed with a key that is not its trusted key: a rogue or mis-keyed cluster claims this ID",
		"remote_cluster", origin, "reason", reason, "presented_key", base64.StdEncoding.EncodeToString(key),
		"presented_fingerprint", KeyFingerprint(key), "trusted_fingerprint", KeyFingerprint(trusted))
	if reason == crdt.ReasonKeyMismatch {
		select {
		case t.mismatches <- KeyMismatch{Cluster: origin, Trusted: bytes.Clone(trusted), Presented: bytes.Clone(key)}:
		default:
		}
	}
}

// Verify implements crdt.Verifier.
func (t *Trust) Verify(origin string, key, msg, sig []byte) error {
	t.mu.Lock()
	pin, pinned := t.pins[origin]
	t.mu.Unlock()
	if pinned {
		t.mu.Lock()
		prev := t.prev[origin]
		t.mu.Unlock()
		if prev != nil && (bytes.Equal(key, prev) || (key == nil && len(sig) == ed25519.SignatureSize && !ed25519.Verify(pin, msg, sig))) {
			// signed by the key the current one replaced (endorsed rotation)
			pin, key = prev, prev
		}
		if key != nil && !bytes.Equal(key, pin) {
			t.loud(origin, crdt.ReasonKeyMismatch, key)
			return &crdt.TrustError{Reason: crdt.ReasonKeyMismatch, Origin: origin, Detail: "presented key differs from the pinned key"}
		}
		if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pin, msg, sig) {
			return &crdt.TrustError{Reason: crdt.ReasonBadSignature, Origin: origin, Detail: "signature does not verify with the pinned key"}
		}
		return nil
	}
	if t.strict {
		if key != nil {
			t.loud(origin, crdt.ReasonUnknownKey, key)
		}
		return &crdt.TrustError{Reason: crdt.ReasonUnknownKey, Origin: origin, Detail: "cluster is not in the trust bundle"}
	}
	if len(key) != ed25519.PublicKeySize {
		return &crdt.TrustError{Reason: crdt.ReasonUnknownKey, Origin: origin, Detail: "no key presented and none pinned"}
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(key, msg, sig) {
		return &crdt.TrustError{Reason: crdt.ReasonBadSignature, Origin: origin, Detail: "signature does not verify with the presented key"}
	}
	t.mu.Lock()
	if pin, ok := t.pins[origin]; ok { // raced with another first use
		t.mu.Unlock()
		if !bytes.Equal(pin, key) {
			t.loud(origin, crdt.ReasonKeyMismatch, key)
			return &crdt.TrustError{Reason: crdt.ReasonKeyMismatch, Origin: origin, Detail: "presented key differs from the pinned key"}
		}
		return nil
	}
	t.pins[origin] = bytes.Clone(key)
	t.mu.Unlock()
	t.log.Warn("pinned a cluster's signing key on first use", "remote_cluster", origin, "key", base64.StdEncoding.EncodeToString(key))
	if t.persist != nil {
		if err := t.persist(origin, key); err != nil {
			t.log.Error("could not persist a key pin; it holds until restart", "remote_cluster", origin, "err", err)
		}
	}
	return nil
}

// Signer signs with a cluster's Ed25519 private key (crdt.Signer).
type Signer struct{ priv ed25519.PrivateKey }

// NewSigner wraps a private key.
func NewSigner(priv ed25519.PrivateKey) *Signer { return &Signer{priv: priv} }

// PublicKey implements crdt.Signer.
func (s *Signer) PublicKey() []byte { return s.priv.Public().(ed25519.PublicKey) }

// Sign implements crdt.Signer.
func (s *Signer) Sign(msg []byte) []byte { return ed25519.Sign(s.priv, msg) }

// ParseSigningKey parses a signing key file: the base64 of a 32-byte
// Ed25519 seed (as written by `coastguardd keys generate`) or of a 64-byte
// private key; blank lines and # comments are ignored. A rotated key file
// (`coastguardd keys rotate`) also has an "endorsement <base64>" line,
// returned by ParseSigningKeyFile.
func ParseSigningKey(b []byte) (ed25519.PrivateKey, error) {
	k, _, err := ParseSigningKeyFile(b)
	return k, err
}

// ParseSigningKeyFile parses a signing key file and its optional
// endorsement line (nil when absent).
func ParseSigningKeyFile(b []byte) (ed25519.PrivateKey, []byte, error) {
	var lines []string
	var endorsement []byte
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(l, "endorsement "); ok {
			e, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
			if err != nil || len(e) != crdt.EndorseSize || endorsement != nil {
				return nil, nil, fmt.Errorf("endorsement line: want one base64 %d-byte endorsement", crdt.EndorseSize)
			}
			endorsement = e
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) != 1 {
		return nil, nil, fmt.Errorf("want exactly one base64 key line, got %d", len(lines))
	}
	raw, err := base64.StdEncoding.DecodeString(lines[0])
	if err != nil {
		return nil, nil, fmt.Errorf("not base64: %w", err)
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), endorsement, nil
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(raw), endorsement, nil
	}
	return nil, nil, fmt.Errorf("key of %d bytes, want %d (seed) or %d", len(raw), ed25519.SeedSize, ed25519.PrivateKeySize)
}

// LoadSigningKeyFile reads a signing key file (see ParseSigningKey).
func LoadSigningKeyFile(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseSigningKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParseTrustBundle parses "<cluster-id> <base64 Ed25519 public key>" lines
// (blank lines and # comments ignored).
func ParseTrustBundle(b []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"<cluster-id> <base64 key>\"", line)
		}
		k, err := base64.StdEncoding.DecodeString(f[1])
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("line %d: key of cluster %q is not a base64 32-byte Ed25519 public key", line, f[0])
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("line %d: cluster %q listed twice", line, f[0])
		}
		out[f[0]] = k
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("trust bundle lists no cluster")
	}
	return out, nil
}

// Authority is a Node's retire authority (crdt.RetireAuthority) for the
// Replica's verifier, which its builder sets before the Node exists: pass
// MayRetire to SetVerifier and the Authority as Config.Authority. Until New
// binds it, it allows no retirement without the origin's signature (a
// fresh node's own view allows none either: see mayRetire).
type Authority struct{ n atomic.Pointer[Node] }

// MayRetire reports whether the bound Node's membership view allows
// retiring cluster c without its signature.
func (a *Authority) MayRetire(c string) bool {
	n := a.n.Load()
	return n != nil && n.mayRetire(c)
}

// mayRetire is this node's own retire authority: no fresh origin-signed
// heartbeat of cluster c has been received for ReconnectTimeout (beat.go),
// whatever the membership view says; for a cluster that has sent none
// since this node started, no member of it has been alive in our view for
// ReconnectTimeout (a cluster never seen counts from this node's start).
func (n *Node) mayRetire(c string) bool {
	if c == n.cfg.ClusterID {
		return false
	}
	if last, ok := n.beats.last(c); ok {
		return n.cfg.Now().Sub(last) >= n.cfg.ReconnectTimeout
	}
	st, ok := n.members.clusters(n.cfg.Now())[c]
	if ok && st.Alive {
		return false
	}
	last := n.started
	if ok && st.LastAlive.After(last) {
		last = st.LastAlive
	}
	return n.cfg.Now().Sub(last) >= n.cfg.ReconnectTimeout
}

// Trust returns the node's origin-key policy (nil when unsigned).
func (n *Node) Trust() *Trust { return n.cfg.Trust }

// Key returns the trusted key of origin; a nil Trust trusts none.
func (t *Trust) keyOrNil(origin string) []byte {
	if t == nil {
		return nil
	}
	return t.Key(origin)
}

// Fingerprint is the fingerprint of the key trusted for origin ("" when
// none is pinned or listed, or t is nil).
func (t *Trust) Fingerprint(origin string) string { return KeyFingerprint(t.keyOrNil(origin)) }

// CheckEndorsement verifies that endorsement is oldKey signing newKey over
// for origin (crdt.EndorseMessage).
func CheckEndorsement(origin string, oldKey, newKey, endorsement []byte) error {
	if len(endorsement) != crdt.EndorseSize || len(newKey) != ed25519.PublicKeySize {
		return &crdt.TrustError{Reason: crdt.ReasonBadSignature, Origin: origin, Detail: "malformed key endorsement"}
	}
	if !bytes.Equal(endorsement[:crdt.KeySize], oldKey) {
		return &crdt.TrustError{Reason: crdt.ReasonKeyMismatch, Origin: origin,
			Detail: "key endorsed by " + KeyFingerprint(endorsement[:crdt.KeySize]) + ", not by the trusted key " + KeyFingerprint(oldKey)}
	}
	if !ed25519.Verify(oldKey, crdt.EndorseMessage(origin, newKey), endorsement[crdt.KeySize:]) {
		return &crdt.TrustError{Reason: crdt.ReasonBadSignature, Origin: origin, Detail: "key endorsement does not verify"}
	}
	return nil
}

// Endorse implements crdt.Rotator: when endorsement is the trusted key of
// origin signing newKey over, newKey becomes the trusted key (persisted by
// Repin) and the old one stays valid for what it signed.
func (t *Trust) Endorse(origin string, newKey, endorsement []byte) error {
	t.mu.Lock()
	pin, ok := t.pins[origin]
	t.mu.Unlock()
	if !ok {
		return &crdt.TrustError{Reason: crdt.ReasonUnknownKey, Origin: origin, Detail: "no trusted key to endorse a rotation"}
	}
	if bytes.Equal(pin, newKey) {
		return nil
	}
	if err := CheckEndorsement(origin, pin, newKey, endorsement); err != nil {
		return err
	}
	t.mu.Lock()
	if !bytes.Equal(t.pins[origin], pin) { // raced with another rotation
		t.mu.Unlock()
		return &crdt.TrustError{Reason: crdt.ReasonKeyMismatch, Origin: origin, Detail: "trusted key changed concurrently"}
	}
	t.prev[origin] = pin
	t.pins[origin] = bytes.Clone(newKey)
	t.endorsed[origin] = bytes.Clone(endorsement)
	t.mu.Unlock()
	t.log.Warn("a cluster rotated its signing key: trusting the new key, endorsed by the old one",
		"remote_cluster", origin, "old_fingerprint", KeyFingerprint(pin), "new_fingerprint", KeyFingerprint(newKey))
	if t.Repin != nil {
		if err := t.Repin(origin, pin, newKey); err != nil {
			t.log.Error("could not persist a rotated key pin; it holds until restart", "remote_cluster", origin, "err", err)
		}
	}
	return nil
}

// Endorsement implements crdt.Rotator.
func (t *Trust) Endorsement(origin string) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endorsed[origin]
}

// Predecessor implements crdt.Rotator.
func (t *Trust) Predecessor(origin string, key []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.prev[origin]
	return p != nil && bytes.Equal(p, key)
}

// EndorsedSigner is a Signer whose key was endorsed by the cluster's
// previous key (coastguardd keys rotate): the endorsement travels with
// every delta of the origin (crdt.EndorsingSigner).
type EndorsedSigner struct {
	Signer
	endorsement []byte
}

// NewEndorsedSigner wraps a rotated key and its endorsement.
func NewEndorsedSigner(priv ed25519.PrivateKey, endorsement []byte) *EndorsedSigner {
	return &EndorsedSigner{Signer: Signer{priv: priv}, endorsement: bytes.Clone(endorsement)}
}

// Endorsement implements crdt.EndorsingSigner.
func (s *EndorsedSigner) Endorsement() []byte { return s.endorsement }

// Endorse signs newKey over as origin's successor key with priv (the key
// being retired): the endorsement line of a rotated key file.
func Endorse(origin string, priv ed25519.PrivateKey, newKey []byte) []byte {
	e := append([]byte(nil), priv.Public().(ed25519.PublicKey)...)
	return append(e, ed25519.Sign(priv, crdt.EndorseMessage(origin, newKey))...)
}

// SetRotated records that origin's trusted key was endorsed by prev
// (the own cluster after `keys rotate`): prev's records stay valid and the
// endorsement is forwarded, as if Endorse had accepted it.
func (t *Trust) SetRotated(origin string, prev, endorsement []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prev[origin] = bytes.Clone(prev)
	t.endorsed[origin] = bytes.Clone(endorsement)
}
