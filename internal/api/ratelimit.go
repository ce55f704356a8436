package api

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/example/payments/internal/problem"
)

// RateLimit is how many requests a user may make: Rate per second on
// average, in bursts of up to Burst. A zero Rate turns the limit off.
type RateLimit struct {
	Rate  float64
	Burst int
}

// userLimiter holds a token bucket per user, in memory. Each instance of
// the service limits on its own; behind a load balancer of n instances a
// user gets up to n times the rate, which is the usual trade for a limiter
// that costs no database round trip.
type userLimiter struct {
	limit   RateLimit
	mu      sync.Mutex
	buckets map[int64]*bucket
	swept   time.Time
}

type bucket struct {
	limiter *rate.Limiter
	seen    time.Time
}

func newUserLimiter(limit RateLimit) *userLimiter {
	return &userLimiter{limit: limit, buckets: map[int64]*bucket{}, swept: time.Now()}
}

// idleBucket is how long an unused bucket is kept; a new one starts full,
// so forgetting an idle user's bucket gives nothing away.
const idleBucket = 10 * time.Minute

// allow takes a token from the user's bucket, or says how long until one is there.
func (l *userLimiter) allow(userID int64) (bool, time.Duration) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > idleBucket {
		for id, b := range l.buckets {
			if now.Sub(b.seen) > idleBucket {
				delete(l.buckets, id)
			}
		}
		l.swept = now
	}
	b, ok := l.buckets[userID]
	if !ok {
		b = &bucket{limiter: rate.NewLimiter(rate.Limit(l.limit.Rate), l.limit.Burst)}
		l.buckets[userID] = b
	}
	b.seen = now
	r := b.limiter.ReserveN(now, 1)
	if delay := r.DelayFrom(now); delay > 0 {
		r.CancelAt(now)
		return false, delay
	}
	return true, 0
}

// limitRate answers 429 rate_limited, with Retry-After, to a user over the
// limit. It runs after authentication: the limit is per user.
func (s *Server) limitRate(next http.Handler) http.Handler {
	if s.limiter == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, wait := s.limiter.allow(userFrom(r.Context()).ID); !ok {
			seconds := int(math.Ceil(wait.Seconds()))
			problem.Write(w, problem.New(http.StatusTooManyRequests, problem.RateLimited,
				"Too many requests; retry in %d s.", seconds).WithRetryAfter(seconds))
			return
		}
		next.ServeHTTP(w, r)
	})
}
