// Package memreplica is an in-memory gossip.Replica (crdt.State behind a
// mutex) for tests and the propagation simulator. The daemon uses
// store.Replica, which adds durability.
package memreplica

import (
	"sync"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Replica serialises access to a crdt.State.
type Replica struct {
	mu sync.Mutex
	s  *crdt.State
	// OnApply, when set, is called (outside the lock) with the changes of
	// every successful Apply/ApplyRetire.
	OnApply func([]crdt.Change)
	// Now stamps local writes (default time.Now).
	Now func() time.Time
}

// New returns an empty replica for cluster self.
func New(self string) *Replica {
	r := &Replica{s: crdt.NewState(self), Now: time.Now}
	r.BumpEpoch()
	return r
}

// BumpEpoch moves the writer to the smallest safe epoch (what a daemon does
// when it becomes the writer, and after its cluster was retired).
func (r *Replica) BumpEpoch() uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.s.MinEpoch()
	if err := r.s.SetEpoch(e); err != nil {
		panic(err) // MinEpoch is always accepted
	}
	return e
}

// Write performs a local write (writer side).
func (r *Replica) Write(kind crdt.Kind, name string, value []byte, deleted bool) (crdt.Delta, error) {
	r.mu.Lock()
	d, _, err := r.s.Write(kind, name, value, deleted, r.Now().UnixNano())
	r.mu.Unlock()
	return d, err
}

// Digest returns the current digest.
func (r *Replica) Digest() crdt.Digest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s.Digest()
}

// DeltaSince returns what remote lacks.
func (r *Replica) DeltaSince(remote crdt.Digest, maxEntries int) []crdt.Delta {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s.DeltaSince(remote, maxEntries)
}

// Apply validates every delta first, then applies them in order.
func (r *Replica) Apply(deltas ...crdt.Delta) ([]crdt.Change, error) {
	r.mu.Lock()
	for i := range deltas {
		if err := crdt.ValidateDelta(&deltas[i]); err != nil {
			r.mu.Unlock()
			return nil, err
		}
	}
	var out []crdt.Change
	for _, d := range deltas {
		ch, err := r.s.Apply(d)
		if err != nil {
			r.mu.Unlock()
			return out, err
		}
		out = append(out, ch...)
	}
	r.mu.Unlock()
	if r.OnApply != nil && len(out) > 0 {
		r.OnApply(out)
	}
	return out, nil
}

// ApplyRetire applies a retirement.
func (r *Replica) ApplyRetire(rt crdt.Retire) ([]crdt.Change, error) {
	r.mu.Lock()
	ch, err := r.s.ApplyRetire(rt)
	r.mu.Unlock()
	if err == nil && r.OnApply != nil && len(ch) > 0 {
		r.OnApply(ch)
	}
	return ch, err
}

// View runs fn with the state under the lock.
func (r *Replica) View(fn func(*crdt.State)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r.s)
}

// SetSigner signs own writes (crdt.State.SetSigner).
func (r *Replica) SetSigner(sg crdt.Signer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s.SetSigner(sg)
}

// SetVerifier verifies peers' data (crdt.State.SetVerifier).
func (r *Replica) SetVerifier(v crdt.Verifier, a crdt.RetireAuthority) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s.SetVerifier(v, a)
}

// SignRetire signs a retirement of the own origin.
func (r *Replica) SignRetire(rt crdt.Retire) crdt.Retire {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s.SignRetire(rt)
}

// SetLimits bounds what peers can make this replica hold (crdt.Limits).
func (r *Replica) SetLimits(l crdt.Limits) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s.SetLimits(l)
}
