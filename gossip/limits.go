package gossip

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxSenderLimiters bounds the per-sender table: past it the table starts
// afresh (a flood of invented sender names cannot grow it without bound).
const maxSenderLimiters = 4096

// senderLimits is the per-sender message rate limit (Config.PeerRateLimit,
// PeerRateBurst): one token bucket per sender name, under its own lock.
type senderLimits struct {
	limit rate.Limit
	burst int

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

func newSenderLimits(perSec float64, burst int) *senderLimits {
	return &senderLimits{limit: rate.Limit(perSec), burst: burst, limiters: map[string]*rate.Limiter{}}
}

// allow takes one token of sender's bucket.
func (s *senderLimits) allow(sender string) bool { return s.allowN(sender, 1) }

// allowN takes n tokens of sender's bucket.
func (s *senderLimits) allowN(sender string, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.limiters[sender]
	if !ok {
		if len(s.limiters) > maxSenderLimiters {
			s.limiters = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(s.limit, s.burst)
		s.limiters[sender] = l
	}
	return l.AllowN(time.Now(), n)
}

// tokens returns the tokens left in sender's bucket (a full bucket for a
// sender not seen yet).
func (s *senderLimits) tokens(sender string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.limiters[sender]; l != nil {
		return l.Tokens()
	}
	return float64(s.burst)
}
