package gossip

import "time"

// Deadlines of the tests that run a real mesh on loopback. They wait on
// conditions (require.Eventually returns as soon as the condition holds),
// never for a fixed time, so a generous deadline costs nothing on a quiet
// machine and keeps the tests passing on a loaded one (a CPU hog on every
// core: issue 18). No test asserts how fast anything happens; performance
// lives in the benchmarks.
const (
	// waitMembership bounds membership changes: joins, failure detection
	// (memberlist's suspicion timeouts stretch under load), heals.
	waitMembership = 60 * time.Second
	// waitConverge bounds replica convergence and data arrival.
	waitConverge = 60 * time.Second
	// waitEvent bounds a single local reaction (a counter moving).
	waitEvent = 30 * time.Second
	// pollEvery is how often a condition is checked.
	pollEvery = 50 * time.Millisecond
)

// waitFor polls cond every pollEvery until it holds or within passes; it
// reports whether it held. Unlike require.Eventually's message arguments,
// which are evaluated before the wait, a caller can describe the state at
// the deadline.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}
