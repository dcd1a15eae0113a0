//go:build race

package crdt

// raceEnabled shortens the simulator under -race (the detector slows it
// ~10x; the concurrency-free crdt package gains nothing from long runs).
const raceEnabled = true
