package reach

import (
	"fmt"
	"slices"
	"sort"
)

// Load inserts pods and policies in bulk and builds every layer once (the
// "full recompute"); later changes are incremental.
func (e *Engine) Load(pods []Pod, policies map[string]Policy) error {
	for _, p := range pods {
		e.SetPod(p) // no layers yet unless policies exist: cheap
	}
	var errs []error
	keys := make([]string, 0, len(policies))
	for k := range policies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	e.bulk = true
	for _, k := range keys {
		if err := e.SetPolicy(k, policies[k]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	e.bulk = false
	e.Rebuild()
	if len(errs) > 0 {
		return fmt.Errorf("%d unusable policies (they allow nothing): %v", len(errs), errs[0])
	}
	return nil
}

// Rebuild recomputes isolation and every layer from scratch.
func (e *Engine) Rebuild() {
	e.ingIso.reset()
	e.egrIso.reset()
	for _, p := range e.policies {
		if p.ingressIso {
			e.ingIso.or(p.targets)
		}
		if p.egressIso {
			e.egrIso.or(p.targets)
		}
	}
	if len(e.probes) == 0 {
		e.probes = []Probe{{Protocol: "TCP"}}
	}
	e.layers = make([]*layer, len(e.probes))
	for qi := range e.probes {
		e.buildLayer(qi)
	}
}

// Probes lists the port classes of the matrix.
func (e *Engine) Probes() []Probe { return slices.Clone(e.probes) }

// Pods returns the number of pods.
func (e *Engine) Pods() int { return len(e.byKey) }

func (e *Engine) layerFor(q Probe) *layer {
	for i, p := range e.probes {
		if p == q {
			return e.layers[i]
		}
	}
	// a port no rule names behaves like the protocol's "other" class;
	// build a throw-away layer for it
	tmp := &Engine{}
	*tmp = *e
	tmp.probes = []Probe{{Protocol: q.Protocol, Port: q.Port}}
	tmp.layers = []*layer{nil}
	tmp.buildLayer(0)
	return tmp.layers[0]
}

// Allowed reports whether src may send to dst on q: src's egress (in its
// cluster) and dst's ingress (in its cluster) both admit it.
func (e *Engine) Allowed(src, dst string, q Probe) (bool, error) {
	s, d := e.byKey[src], e.byKey[dst]
	if s == nil || d == nil {
		return false, fmt.Errorf("unknown pod %q or %q", src, dst)
	}
	l := e.layerFor(q)
	return l.egress[s.slot].has(d.slot) && l.inAllow[s.slot].has(d.slot), nil
}

// Row returns the pods src reaches on q, as keys, sorted.
func (e *Engine) Row(src string, q Probe) []string {
	s := e.byKey[src]
	if s == nil {
		return nil
	}
	l := e.layerFor(q)
	r := l.egress[s.slot].clone()
	r.and(l.inAllow[s.slot])
	r.and(e.alive)
	var out []string
	r.each(func(i int) { out = append(out, e.pods[i].Key()) })
	sort.Strings(out)
	return out
}

// Reachable counts the allowed (src, dst) pairs on q (src != dst).
func (e *Engine) Reachable(q Probe) int {
	l := e.layerFor(q)
	n := 0
	row := newBitset(e.words * 64)
	e.alive.each(func(s int) {
		row.copyFrom(l.egress[s])
		row.and(l.inAllow[s])
		row.and(e.alive)
		row.clear(s)
		n += row.count()
	})
	return n
}

// Bytes estimates the memory held by the matrix layers and rule sets.
func (e *Engine) Bytes() int {
	n := 0
	for _, l := range e.layers {
		if l != nil {
			n += 2 * len(l.egress) * e.words * 8
		}
	}
	for _, p := range e.policies {
		n += len(p.targets) * 8
		for _, r := range p.rules {
			n += len(r.bits) * 8
		}
	}
	for _, b := range e.index {
		n += len(b) * 8
	}
	return n
}
