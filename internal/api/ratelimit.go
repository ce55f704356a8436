package api

import (
	"context"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// DefaultFailedAuthLimit is docs/API.md section 2's limit on failed
// authentications per client address: 20 a second on average, in bursts of
// 40.
var DefaultFailedAuthLimit = RateLimit{Rate: 20, Burst: 40}

// maxAddrBuckets bounds how many client addresses addrLimiter remembers:
// some 10 MB at most, however many addresses a hostile client sends from.
const maxAddrBuckets = 1 << 16

// addrLimiter limits failed authentications per client address, in memory
// (per instance, as userLimiter). The client address is the connection's
// (http.Request.RemoteAddr, see clientAddr): X-Forwarded-For is not read,
// so behind a proxy every client shares the proxy's allowance (which
// touches no client whose key this instance has seen valid: see
// Server.authenticate).
//
// A lookup is admitted while the address has a token for it and for every
// lookup of it still running, and only a failed one takes its token: so a
// valid key costs its address nothing, and however many guesses arrive at
// once, no more are looked up than the tokens there are. Lookups past
// that wait for those in flight rather than fail (see take).
//
// Its memory is bounded: when maxAddrBuckets addresses are remembered and
// another comes, the buckets that have filled up again are dropped (a full
// bucket is what a new one would be, so that forgets nothing); if more than
// half are still in use, all are dropped. A client with that many
// addresses then gets a new burst for each, once per sweep: bounded work,
// as the Authenticator's cache is bounded.
type addrLimiter struct {
	limit      RateLimit
	maxBuckets int
	mu         sync.Mutex
	buckets    map[netip.Prefix]*addrBucket
	limited    prometheus.Counter
}

type addrBucket struct {
	tokens   *rate.Limiter
	inFlight int           // lookups admitted and not yet settled
	settled  chan struct{} // closed, and made anew, when one settles
}

func newAddrLimiter(limit RateLimit, reg prometheus.Registerer) *addrLimiter {
	l := &addrLimiter{limit: limit, maxBuckets: maxAddrBuckets, buckets: map[netip.Prefix]*addrBucket{},
		limited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payments_auth_failures_limited_total",
			Help: "Requests answered 429 because their client address failed to authenticate too often; the key store was not asked.",
		})}
	reg.MustRegister(l.limited)
	return l
}

// lookupQueueWait bounds how long a lookup waits for the lookups in flight
// from its address to settle (see take). A lookup is one indexed query, a
// few milliseconds; two seconds is hundreds of them, and well inside any
// client's timeout.
const lookupQueueWait = 2 * time.Second

// take admits one lookup of client's key, before it is made. It returns
// settle, to call with the outcome (only a failure takes a token), or nil
// and how long until the client may try again.
//
// A lookup is admitted while the address has a token for it and for every
// lookup in flight. When the tokens are short only because of lookups in
// flight (a platform or a NAT sending many merchants' keys at once to an
// instance that has not seen them yet), it waits for those to settle, up
// to lookupQueueWait or ctx's end: valid keys give their tokens back, and
// guesses still never outnumber the tokens. Only tokens spent by failures
// refuse at once.
func (l *addrLimiter) take(ctx context.Context, client netip.Prefix) (settle func(failed bool), wait time.Duration) {
	if l == nil {
		return func(bool) {}, 0
	}
	var giveUp <-chan time.Time
	for {
		settle, wait, settled := l.tryTake(client)
		if settle != nil || settled == nil {
			return settle, wait
		}
		if giveUp == nil {
			timer := time.NewTimer(lookupQueueWait)
			defer timer.Stop()
			giveUp = timer.C
		}
		select {
		case <-settled:
		case <-giveUp:
			l.limited.Inc()
			return nil, wait
		case <-ctx.Done():
			l.limited.Inc()
			return nil, wait
		}
	}
}

// tryTake is one try of take: admitted (settle), refused (wait), or to
// wait for a lookup in flight to settle (settled, closed when one does).
func (l *addrLimiter) tryTake(client netip.Prefix) (settle func(failed bool), wait time.Duration, settled <-chan struct{}) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[client]
	if !ok {
		if len(l.buckets) >= l.maxBuckets {
			l.sweep(now)
		}
		b = &addrBucket{tokens: rate.NewLimiter(rate.Limit(l.limit.Rate), l.limit.Burst), settled: make(chan struct{})}
		l.buckets[client] = b
	}
	tokens := b.tokens.TokensAt(now)
	if missing := float64(b.inFlight) + 1 - tokens; missing > 0 {
		wait = time.Duration(missing / l.limit.Rate * float64(time.Second))
		if tokens >= 1 { // held by lookups in flight, which may give them back
			return nil, wait, b.settled
		}
		l.limited.Inc()
		return nil, wait, nil
	}
	b.inFlight++
	return func(failed bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		b.inFlight--
		if failed {
			b.tokens.ReserveN(time.Now(), 1) // its token was kept for it: there is one
		}
		close(b.settled)
		b.settled = make(chan struct{})
	}, 0, nil
}

// sweep makes room (see addrLimiter); l.mu is held.
func (l *addrLimiter) sweep(now time.Time) {
	for client, b := range l.buckets {
		if b.inFlight == 0 && b.tokens.TokensAt(now) >= float64(l.limit.Burst) {
			delete(l.buckets, client)
		}
	}
	if len(l.buckets) > l.maxBuckets/2 {
		clear(l.buckets)
	}
}

// FailedAuthGate is the limiter of failed authentications, for another
// door into the service: the console's sign-in (internal/console) is
// charged to the same allowance per client address as the API's keys.
type FailedAuthGate struct{ l *addrLimiter }

// Take admits one authentication of r's client before its credential is
// checked: settle, to call with the outcome, or nil and how long until
// the client may try again.
func (g FailedAuthGate) Take(r *http.Request) (settle func(failed bool), wait time.Duration) {
	return g.l.take(r.Context(), clientAddr(r))
}

// clientAddr is the client a failed authentication is charged to: the
// connection's address, an IPv6 one by its /64 (the least a single
// customer is given, RFC 6177, so one host cannot spread its guesses over
// its own 2^64 addresses). A RemoteAddr that does not parse (none does on
// a Unix socket) is the zero prefix, one client for all of them.
func clientAddr(r *http.Request) netip.Prefix {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	addr := ap.Addr().Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

// tooManyFailures is the answer to a client past its allowance of failed
// authentications.
func tooManyFailures(wait time.Duration) *problem.Problem {
	seconds := max(1, int(math.Ceil(wait.Seconds())))
	return problem.New(http.StatusTooManyRequests, problem.RateLimited,
		"Too many failed authentications from your address; retry in %d s with a valid API key.", seconds).WithRetryAfter(seconds)
}
