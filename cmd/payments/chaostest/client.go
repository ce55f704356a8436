package chaostest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	paymentsclient "github.com/example/payments/client"
)

// driver sends requests to the API instances the way a careful client
// does, through the service's own Go client (package client): the same key
// and the same body on every attempt, to an instance picked at random each
// time, until a final answer.
//
// The client's rules are the chaos suite's: final is any 2xx, and any 4xx
// but 409 (the key is in use) and 429; a 409, a 429, a 5xx and a connection
// that died are retried after an exponential back-off with full jitter, and
// at least the Retry-After the service asked for; all within the request's
// budget (the call's context). The driver only adds what a plain client
// hides: it picks the instance of each attempt (instancePicker) and, with
// the client's observer, records every attempt's raw answer for the
// invariant checker.
type driver struct {
	instances []*Instance
	transport http.RoundTripper // shared by every call's picker: one connection pool
	ledger    *Ledger
	stats     *Stats
	budget    time.Duration
	// watch, when set, sees every attempt as it is answered (the HA run's
	// measurements, ha.go).
	watch func(Op, paymentsclient.Attempt)
}

// Back-off bounds: the first retry waits up to minBackoff, each next one up
// to twice as long, never more than maxBackoff (and never less than the
// answer's Retry-After).
const (
	minBackoff      = 25 * time.Millisecond
	maxBackoff      = time.Second
	attemptTimeout  = 20 * time.Second
	maxAttemptsEach = 2000
)

// apiBase is the base URL the driver's clients are made with: instancePicker
// sends each attempt to an instance instead.
const apiBase = "http://payments.chaos"

func newDriver(instances []*Instance, ledger *Ledger, stats *Stats, budget time.Duration) *driver {
	return &driver{
		instances: instances, ledger: ledger, stats: stats, budget: budget,
		transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
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

// instancePicker sends each attempt of a call to an instance: the first to
// the one the call asked for, if any, the others to one picked at random.
type instancePicker struct {
	d        *driver
	rng      *rand.Rand
	first    int
	attempts int
	last     *Instance // the instance of the latest attempt
}

func (p *instancePicker) RoundTrip(req *http.Request) (*http.Response, error) {
	in := p.d.instances[p.rng.IntN(len(p.d.instances))]
	if p.attempts == 0 && p.first >= 0 {
		in = p.d.instances[p.first%len(p.d.instances)]
	}
	p.attempts++
	p.last = in
	target, err := url.Parse(in.URL())
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = target.Scheme, target.Host, ""
	return p.d.transport.RoundTrip(out)
}

// sendWith is send as opts say.
func (d *driver) sendWith(ctx context.Context, rng *rand.Rand, opts sendOptions, r *Record, apiKey string) (a Answer, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, d.budget)
	defer cancel()
	picker := &instancePicker{d: d, rng: rng, first: opts.first}
	var final *paymentsclient.Attempt
	var comeBack time.Time // when the client comes back after its first 503 (comeBackAfter)
	callCtx, stopCall := context.WithCancel(ctx)
	defer stopCall()

	observe := func(at paymentsclient.Attempt) {
		if at.Number > 1 || !comeBack.IsZero() {
			d.stats.Add("retries", 1)
		}
		// The crasher stalls its holders past the lock timeout.
		stalling := picker.last != nil && strings.Contains(picker.last.Failpoint(), "sleep")
		var netErr net.Error
		timedOut := errors.As(at.Err, &netErr) && netErr.Timeout() && ctx.Err() == nil
		d.ledger.Update(r, func(r *Record) {
			r.Attempts++
			if at.Err == nil {
				r.Slowest = max(r.Slowest, at.Duration)
			}
			if timedOut {
				r.TimedOut++
			}
		})
		d.stats.Add("attempts", 1)
		if d.watch != nil {
			d.watch(r.Op, at)
		}
		// A first attempt to an instance that the crasher made stall past
		// the lock timeout is rightly taken over (by the completer), and its
		// own answer is then 409: no broken promise. Any other is.
		if at.Number == 1 && comeBack.IsZero() && opts.fresh && at.Status == http.StatusConflict && !stalling {
			d.ledger.Update(r, func(r *Record) { r.FreshGot409 = true })
		}
		switch {
		case at.Err != nil:
			if ctx.Err() == nil {
				d.stats.Add("retriable: connection error", 1)
			}
		case at.Status == http.StatusConflict:
			d.stats.Add("retriable: 409 in use", 1)
		case at.Status == http.StatusTooManyRequests:
			d.stats.Add("retriable: 429", 1)
		case at.Status == http.StatusServiceUnavailable:
			d.stats.Add("retriable: 503 unavailable", 1)
		case at.Status >= 500:
			d.stats.Add("retriable: "+strconv.Itoa(at.Status), 1)
		default:
			d.stats.Add("final: "+strconv.Itoa(at.Status), 1)
			final = &at
		}
		if at.Status == http.StatusServiceUnavailable && at.Retry && opts.comeBackAfter > 0 && comeBack.IsZero() {
			// Counted from the attempt's start: the key was claimed after it.
			comeBack = time.Now().Add(opts.comeBackAfter - at.Duration)
			d.ledger.Update(r, func(r *Record) { r.CameBackLate = true })
			d.stats.Add("came back after the key's TTL", 1)
			stopCall() // this call ends here; the next one, with the same key, comes back later
		}
	}
	c := paymentsclient.New(apiBase, apiKey,
		paymentsclient.WithHTTPClient(&http.Client{Transport: picker, Timeout: attemptTimeout}),
		paymentsclient.WithBackoff(minBackoff, maxBackoff), paymentsclient.WithMaxAttempts(maxAttemptsEach),
		paymentsclient.WithRetryBudget(d.budget), // the context's budget, however long, not the client's default
		paymentsclient.WithObserver(observe))

	err := d.call(callCtx, c, r)
	if !comeBack.IsZero() && final == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(comeBack)):
			err = d.call(ctx, c, r)
		}
	}
	if final != nil {
		return Answer{Status: final.Status, Body: final.Body, Replayed: final.Replayed(),
			KeyEcho: final.Header.Get("Idempotency-Key"), At: time.Now()}, true
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		var answer *paymentsclient.Error
		if !errors.As(err, &answer) {
			// Not a lack of time nor an answer: the request itself could
			// not be made (decodeBody).
			d.stats.Add("gave up: "+err.Error(), 1)
			return Answer{}, false
		}
	}
	d.stats.Add("gave up", 1)
	return Answer{}, false
}

// call is r as a call of the client: its operation, with its body's
// parameters, under its key. The answer is the observer's to record.
func (d *driver) call(ctx context.Context, c *paymentsclient.Client, r *Record) error {
	key := paymentsclient.WithIdempotencyKey(r.Key)
	var err error
	switch r.Op {
	case OpCreate:
		var p paymentsclient.CreatePaymentParams
		if err = decodeBody(r, &p); err == nil {
			_, err = c.CreatePayment(ctx, p, key)
		}
	case OpCapture:
		var p paymentsclient.CapturePaymentParams
		if err = decodeBody(r, &p); err == nil {
			_, err = c.CapturePayment(ctx, r.Payment, p, key)
		}
	case OpCancel:
		_, err = c.CancelPayment(ctx, r.Payment, key)
	case OpRefund:
		var p paymentsclient.CreateRefundParams
		if err = decodeBody(r, &p); err == nil {
			_, err = c.CreateRefund(ctx, p, key)
		}
	default:
		err = fmt.Errorf("chaos: no client call for %q", r.Op)
	}
	return err
}

// decodeBody reads r's body into a client's parameters: the client encodes
// them again, as the same JSON up to key order, which the service's
// fingerprint of a request ignores.
func decodeBody(r *Record, params any) error {
	if len(bytes.TrimSpace(r.Body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(params); err != nil {
		return fmt.Errorf("chaos: %s's body %s does not fit the client's parameters: %w", r.Op, r.Body, err)
	}
	return nil
}

// attempt is one HTTP exchange, outside the client: for the hostile bodies
// (workload.go), which the typed client cannot send, and which are sent
// once each, not retried. err is set when no answer came back.
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
	resp, err := (&http.Client{Transport: d.transport}).Do(req)
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
