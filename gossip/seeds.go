package gossip

import (
	"sync"
	"time"
)

// seedBackoff spaces out lookups of seeds that do not resolve (a
// clusterset DNS name is empty until Lighthouse exports the Service) and
// keeps the log to one line per seed per minute, however often the rejoin
// loop runs.
type seedBackoff struct {
	mu    sync.Mutex
	base  time.Duration
	max   time.Duration
	seeds map[string]*seedState
}

type seedState struct {
	failures   int
	next       time.Time // do not look the seed up before this
	lastLogged time.Time
}

// seedLogEvery is how often an unresolvable seed is logged.
const seedLogEvery = time.Minute

func newSeedBackoff(base, max time.Duration) *seedBackoff {
	if base <= 0 {
		base = time.Second
	}
	if max < base {
		max = base
	}
	return &seedBackoff{base: base, max: max, seeds: map[string]*seedState{}}
}

// due reports whether seed may be looked up at now.
func (b *seedBackoff) due(seed string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seeds[seed]
	return s == nil || !now.Before(s.next)
}

// failed records a failed lookup and reports whether to log it now, with the
// number of failures so far.
func (b *seedBackoff) failed(seed string, now time.Time) (log bool, failures int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seeds[seed]
	if s == nil {
		s = &seedState{}
		b.seeds[seed] = s
	}
	s.failures++
	d := b.base
	for i := 1; i < s.failures && d < b.max; i++ {
		d *= 2
	}
	if d > b.max {
		d = b.max
	}
	s.next = now.Add(d)
	if s.lastLogged.IsZero() || now.Sub(s.lastLogged) >= seedLogEvery {
		s.lastLogged = now
		return true, s.failures
	}
	return false, s.failures
}

// succeeded forgets a seed's failures.
func (b *seedBackoff) succeeded(seed string) {
	b.mu.Lock()
	delete(b.seeds, seed)
	b.mu.Unlock()
}
