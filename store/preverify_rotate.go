package store

import "github.com/coastguard-mcnp/coastguard/crdt"

// The pre-verifier passes key rotations (crdt.Rotator) through to the
// verifier it wraps, so that wrapping it does not hide them from the
// crdt (docs/SECURITY.md, "Key rotation").

var _ crdt.Rotator = (*preVerifier)(nil)

// Endorse implements crdt.Rotator.
func (p *preVerifier) Endorse(origin string, newKey, endorsement []byte) error {
	if r, ok := p.inner.(crdt.Rotator); ok {
		return r.Endorse(origin, newKey, endorsement)
	}
	return &crdt.TrustError{Reason: crdt.ReasonKeyMismatch, Origin: origin, Detail: "key rotations are not accepted here"}
}

// Endorsement implements crdt.Rotator.
func (p *preVerifier) Endorsement(origin string) []byte {
	if r, ok := p.inner.(crdt.Rotator); ok {
		return r.Endorsement(origin)
	}
	return nil
}

// Predecessor implements crdt.Rotator.
func (p *preVerifier) Predecessor(origin string, key []byte) bool {
	if r, ok := p.inner.(crdt.Rotator); ok {
		return r.Predecessor(origin, key)
	}
	return false
}
