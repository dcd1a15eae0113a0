package gossip

import (
	"time"

	"golang.org/x/time/rate"
)

// Anti-entropy must not amplify under load. A digest-sum mismatch (or a
// digest showing the sender lacks something) costs a full digest, O(clusters)
// bytes. Under CPU starvation sums mismatch all the time (deltas still in
// flight, pulls timing out), and every full digest triggers pulls that add
// more load: congestion collapse. So the full-digest bytes a node sends are
// bounded by a token bucket, whatever the load: FullDigestBytesPerSec on
// average, FullDigestBurst at once. What the bucket refuses is counted
// (coastguard_gossip_syncs_total{role="digest",result="suppressed"}) and
// simply not sent: the next digest-sum round (every AntiEntropyInterval)
// asks again, and the fast path (heads and pulls) keeps working meanwhile.
const (
	FullDigestBytesPerSec = 32 << 10
	FullDigestBurst       = 64 << 10
)

// Repair mode (decide.go) offers a full digest on every tick; those draw
// from a smaller budget of their own as well, so that a node kept in repair
// mode (a fast path that keeps missing, as under overload) spends at most
// RepairDigestBytesPerSec of its full-digest budget on them and the rest
// stays for answers.
const (
	RepairDigestBytesPerSec = 8 << 10
	RepairDigestBurst       = 16 << 10
)

func newRepairDigestLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(RepairDigestBytesPerSec), RepairDigestBurst)
}

func newDigestLimiter() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(FullDigestBytesPerSec), FullDigestBurst)
}

// allowDigest is the limiter decision for one full digest of size bytes at
// now. A digest larger than the whole burst (very many clusters) takes the
// full bucket, so it still goes out, at most once per burst/rate seconds.
func allowDigest(lim *rate.Limiter, now time.Time, size int) bool {
	return lim.AllowN(now, min(size, lim.Burst()))
}
