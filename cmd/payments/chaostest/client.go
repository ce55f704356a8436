package chaostest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// driver sends requests to the API instances the way a careful client
// does: the same key and the same body on every attempt, to an instance
// picked at random each time, until a final answer.
//
// Final is any 2xx, and any 4xx but 409 (the key is in use) and 429. A 409,
// a 429, a 5xx and a connection that died are retried after an exponential
// backoff with full jitter, at least half the Retry-After the service asked
// for; all within the request's budget.
type driver struct {
	instances []*Instance
	http      *http.Client
	ledger    *Ledger
	stats     *Stats
	budget    time.Duration
}

// Backoff bounds: the first retry waits up to minBackoff, each next one up
// to twice as long, never more than maxBackoff.
const (
	minBackoff      = 25 * time.Millisecond
	maxBackoff      = time.Second
	maxRetryAfter   = 2 * time.Second
	attemptTimeout  = 20 * time.Second
	maxAttemptsEach = 2000
)

func newDriver(instances []*Instance, ledger *Ledger, stats *Stats, budget time.Duration) *driver {
	return &driver{
		instances: instances, ledger: ledger, stats: stats, budget: budget,
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
		}},
	}
}

// send sends r until a final answer and returns it; ok is false when the
// budget ran out (or ctx ended) first. Each attempt is counted in r.
func (d *driver) send(ctx context.Context, rng *rand.Rand, r *Record, apiKey string) (a Answer, ok bool) {
	return d.sendWith(ctx, rng, sendOptions{first: -1}, r, apiKey)
}

// sendOptions say how sendWith goes about a request.
type sendOptions struct {
	first int // the instance of the first attempt (-1: any)
	// fresh: this is the key's very first request, and no other sender has
	// it: a 409 to its first attempt is a broken promise (rule 5).
	fresh bool
	// comeBackAfter, when set, is how long the client waits after its
	// first 503 before it tries again (a client that comes back late).
	comeBackAfter time.Duration
}

// sendWith is send as opts say.
func (d *driver) sendWith(ctx context.Context, rng *rand.Rand, opts sendOptions, r *Record, apiKey string) (a Answer, ok bool) {
	first := opts.first
	deadline := time.Now().Add(d.budget)
	for attempt := 0; attempt < maxAttemptsEach; attempt++ {
		if attempt > 0 {
			d.stats.Add("retries", 1)
		}
		in := d.instances[rng.IntN(len(d.instances))]
		if attempt == 0 && first >= 0 {
			in = d.instances[first%len(d.instances)]
		}
		started := time.Now()
		stalling := strings.Contains(in.Failpoint(), "sleep") // the crasher stalls its holders past the lock timeout
		status, body, header, err := d.attempt(ctx, in.URL(), r, apiKey)
		took, timedOut := time.Since(started), errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		d.ledger.Update(r, func(r *Record) {
			r.Attempts++
			if err == nil {
				r.Slowest = max(r.Slowest, took)
			}
			if timedOut {
				r.TimedOut++
			}
		})
		d.stats.Add("attempts", 1)
		// A first attempt to an instance that the crasher made stall past
		// the lock timeout is rightly taken over (by the completer), and its
		// own answer is then 409: no broken promise. Any other is.
		if attempt == 0 && opts.fresh && status == http.StatusConflict && !stalling {
			d.ledger.Update(r, func(r *Record) { r.FreshGot409 = true })
		}
		var retryAfter time.Duration
		switch {
		case err != nil:
			d.stats.Add("retriable: connection error", 1)
		case status == http.StatusConflict:
			d.stats.Add("retriable: 409 in use", 1)
		case status == http.StatusTooManyRequests:
			d.stats.Add("retriable: 429", 1)
		case status == http.StatusServiceUnavailable:
			d.stats.Add("retriable: 503 unavailable", 1)
		case status >= 500:
			d.stats.Add("retriable: "+strconv.Itoa(status), 1)
		default:
			d.stats.Add("final: "+strconv.Itoa(status), 1)
			return Answer{Status: status, Body: body, Replayed: header.Get("Idempotent-Replayed") == "true",
				KeyEcho: header.Get("Idempotency-Key"), At: time.Now()}, true
		}
		if header != nil {
			if secs, err := strconv.Atoi(header.Get("Retry-After")); err == nil {
				retryAfter = min(time.Duration(secs)*time.Second, maxRetryAfter)
			}
		}
		wait := time.Duration(rng.Int64N(int64(min(maxBackoff, minBackoff<<min(attempt, 10)))))
		if retryAfter > 0 {
			wait = max(wait, retryAfter/2+time.Duration(rng.Int64N(int64(retryAfter/2))))
		}
		if status == http.StatusServiceUnavailable && opts.comeBackAfter > 0 {
			// Counted from the attempt's start: the key was claimed after it.
			wait, opts.comeBackAfter = max(0, opts.comeBackAfter-time.Since(started)), 0
			d.ledger.Update(r, func(r *Record) { r.CameBackLate = true })
			d.stats.Add("came back after the key's TTL", 1)
		}
		if time.Now().Add(wait).After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return Answer{}, false
		case <-time.After(wait):
		}
	}
	d.stats.Add("gave up", 1)
	return Answer{}, false
}

// attempt is one HTTP exchange; err is set when no answer came back.
func (d *driver) attempt(ctx context.Context, base string, r *Record, apiKey string) (int, []byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, base+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", r.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, body, resp.Header, nil
}
