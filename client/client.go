package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Client calls the payments API as one user (one API key). It is safe for
// concurrent use.
type Client struct {
	baseURL     string
	apiKey      string
	http        *http.Client
	maxAttempts int           // 0: no limit but the budget
	retryBudget time.Duration // no attempt starts later than this after the call began
	minBackoff  time.Duration
	maxBackoff  time.Duration
	observe     func(Attempt)
	clock       clock
}

// serviceLockTimeout is the service's default PAYMENTS_LOCK_TIMEOUT
// (README, "Configuration"): a request whose process died holds its key
// that long after its last heartbeat, and every other request with the key
// is answered 409 idempotency_key_in_use meanwhile.
const serviceLockTimeout = 90 * time.Second

// Defaults of the retry policy.
const (
	// DefaultRetryBudget is how long a call keeps retrying by default: long
	// enough to outlast the lock of a crashed holder of its key (one lock
	// timeout), and that of a process that took the request over and died
	// in turn (a second), with 20 s to spare for the back-off's last wait
	// and the request's own run. A shorter budget would give up on a key
	// that the service is about to free, and leave the intent to a later
	// call that may never come.
	DefaultRetryBudget = 2*serviceLockTimeout + 20*time.Second
	DefaultMinBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
)

// MaxResponseBytes bounds the body of an answer the client reads: a larger
// one is an error (ErrResponseTooLarge), never a buffer that grows without
// end. The API's largest answers (a list of 100 payments with their
// metadata, GET /metrics, GET /openapi.json) are far below it.
const MaxResponseBytes = 10 << 20

// ErrResponseTooLarge is an answer whose body was over MaxResponseBytes.
// It is final: the same request would get the same answer again.
var ErrResponseTooLarge = fmt.Errorf("payments: the answer is larger than %d bytes", MaxResponseBytes)

// UserAgent is what the client sends as User-Agent:
// "payments-go/<version> <Go version>", the version being this module's
// (its tag when it is a dependency; "devel" in its own repository).
var UserAgent = "payments-go/" + moduleVersion() + " " + runtime.Version()

func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	const path = "github.com/example/payments"
	for _, dep := range info.Deps {
		if dep.Path == path && dep.Version != "" {
			return dep.Version
		}
	}
	if info.Main.Path == path && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends the requests with hc instead of a client with a
// 60-second time-out per attempt. Its Timeout bounds one attempt; the
// context bounds the whole call, retries included.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithMaxAttempts bounds the attempts of one call, the first included (1:
// never retry), on top of the retry budget. n < 1 is taken as 1. By
// default the number is not bounded: the budget is.
func WithMaxAttempts(n int) Option { return func(c *Client) { c.maxAttempts = max(n, 1) } }

// WithRetryBudget sets how long a call keeps retrying: no attempt starts
// later than d after the call began (default DefaultRetryBudget; 0: never
// retry). The context's deadline, when sooner, ends the call first.
func WithRetryBudget(d time.Duration) Option {
	return func(c *Client) { c.retryBudget = max(d, 0) }
}

// WithBackoff sets the back-off: the wait before the n-th retry is a random
// duration up to min(initial × 2ⁿ⁻¹, maxWait), and never less than the
// answer's Retry-After.
func WithBackoff(initial, maxWait time.Duration) Option {
	return func(c *Client) { c.minBackoff, c.maxBackoff = max(initial, time.Millisecond), max(maxWait, initial) }
}

// WithObserver calls observe after every attempt, in the goroutine of the
// call, before the client waits for the next one.
func WithObserver(observe func(Attempt)) Option { return func(c *Client) { c.observe = observe } }

// Attempt is one HTTP exchange of a call, as WithObserver sees it.
type Attempt struct {
	Number         int    // 1 for the first attempt of the call
	Method         string // the request's method
	URL            string // where the attempt was sent (as the transport finally sent it)
	IdempotencyKey string // the call's key; "" for a call that needs none
	Status         int    // the answer's status; 0 when none came back
	Header         http.Header
	Body           []byte        // the answer's body, as sent
	Err            error         // set when no (whole) answer came back
	Duration       time.Duration // from sending the request to reading the whole answer
	// Retry says whether the client will try again, and Wait how long it
	// waits first.
	Retry bool
	Wait  time.Duration
}

// Replayed tells whether the answer was replayed from its key's stored answer.
func (a Attempt) Replayed() bool { return a.Header.Get("Idempotent-Replayed") == "true" }

// New returns a client of the API at baseURL (such as
// "http://127.0.0.1:8080") that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		baseURL: strings.TrimRight(baseURL, "/"), apiKey: apiKey,
		http:        &http.Client{Timeout: 60 * time.Second},
		retryBudget: DefaultRetryBudget, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
		clock: realClock{},
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// RequestOption configures one call.
type RequestOption func(*callOptions)

type callOptions struct {
	idempotencyKey string
}

// WithIdempotencyKey makes a POST carry key as its Idempotency-Key (1 to 255
// visible ASCII characters), instead of a random key made for the call.
// The same key sent again later gets the first call's answer, replayed.
func WithIdempotencyKey(key string) RequestOption {
	return func(o *callOptions) { o.idempotencyKey = key }
}

// call is one API call: a request sent until a final answer, whose JSON
// body is decoded into out. It returns whether that answer was a replay.
type call struct {
	method string
	path   string     // escaped
	query  url.Values // may be nil
	body   any        // nil: no body
	out    any        // where a 2xx answer is decoded; nil: not decoded
	keyed  bool       // a POST: carries an Idempotency-Key
	once   bool       // never retried
	opts   []RequestOption
}

// do runs the call under the retry policy of the package comment. Every
// error it returns once the key is made carries the key: *Error for an
// answer, *NetworkError for none.
func (c *Client) do(ctx context.Context, cl call) (replayed bool, err error) {
	var o callOptions
	for _, opt := range cl.opts {
		opt(&o)
	}
	key := o.idempotencyKey
	if cl.keyed && key == "" {
		// One key per call, made before the first attempt and sent on
		// every retry: that is what makes the retries safe.
		key = "client-" + uuid.NewString()
	}
	var body []byte
	if cl.body != nil {
		if body, err = json.Marshal(cl.body); err != nil {
			return false, &NetworkError{Method: cl.method, Path: cl.path, IdempotencyKey: key,
				Err: fmt.Errorf("encoding the request: %w", err)}
		}
	}
	target := c.baseURL + cl.path
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}

	started := c.clock.Now()
	for n := 1; ; n++ {
		a := c.attempt(ctx, cl.method, target, key, body)
		a.Number = n
		final, err := c.judge(a)
		if final {
			c.observed(a)
			if err != nil {
				return a.Replayed(), err
			}
			if raw, ok := cl.out.(*rawText); ok {
				*raw = a.Body
			} else if cl.out != nil {
				if err := json.Unmarshal(a.Body, cl.out); err != nil {
					return a.Replayed(), &NetworkError{Method: cl.method, Path: cl.path, IdempotencyKey: key,
						RequestID: a.Header.Get(requestIDHeader), Attempts: n,
						Err: fmt.Errorf("decoding the %d answer: %w", a.Status, err)}
				}
			}
			return a.Replayed(), nil
		}
		// err is the attempt's *Error, or its network error: retriable.
		if ctx.Err() != nil {
			c.observed(a)
			return false, c.gaveUp(cl, key, n, err, ctx.Err())
		}
		if cl.once || (c.maxAttempts > 0 && n >= c.maxAttempts) {
			c.observed(a)
			return false, c.gaveUp(cl, key, n, err, fmt.Errorf("no final answer after %d attempts", n))
		}
		wait := c.backoff(n, retryAfter(a.Header))
		if c.clock.Now().Add(wait).Sub(started) > c.retryBudget {
			c.observed(a)
			return false, c.gaveUp(cl, key, n, err,
				fmt.Errorf("no final answer within the retry budget of %v (%d attempts)", c.retryBudget, n))
		}
		a.Retry, a.Wait = true, wait
		c.observed(a)
		if deadline, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(deadline) {
			// The wait would outlast the context: give up now rather than
			// sleep until it ends.
			return false, c.gaveUp(cl, key, n, err, fmt.Errorf("%w before the next attempt was due", context.DeadlineExceeded))
		}
		if c.clock.Sleep(ctx, wait) != nil {
			return false, c.gaveUp(cl, key, n, err, ctx.Err())
		}
	}
}

func (c *Client) observed(a Attempt) {
	if c.observe != nil {
		c.observe(a)
	}
}

// gaveUp is the error of a call that stopped retrying (why) after n
// attempts, the last of which ended in last: the answer's *Error, which
// carries the key, wrapped; or, when no answer came back, a *NetworkError.
func (c *Client) gaveUp(cl call, key string, n int, last, why error) error {
	if e, ok := errors.AsType[*Error](last); ok {
		return fmt.Errorf("payments: %s %s: %w (after %d attempts; the last: %w)", cl.method, cl.path, why, n, e)
	}
	return &NetworkError{Method: cl.method, Path: cl.path, IdempotencyKey: key, Attempts: n,
		Err: fmt.Errorf("%w (the last attempt: %w)", why, last)}
}

// attempt is one HTTP exchange.
func (c *Client) attempt(ctx context.Context, method, target, key string, body []byte) Attempt {
	a := Attempt{Method: method, URL: target, IdempotencyKey: key}
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		a.Err = err
		return a
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	started := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		a.Err, a.Duration = err, time.Since(started)
		return a
	}
	defer resp.Body.Close()
	if resp.Request != nil {
		a.URL = resp.Request.URL.String()
	}
	a.Body, a.Err = io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	a.Duration = time.Since(started)
	if a.Err != nil {
		return a // an answer cut short is no answer
	}
	a.Status, a.Header = resp.StatusCode, resp.Header
	if len(a.Body) > MaxResponseBytes {
		a.Body, a.Err = nil, ErrResponseTooLarge
	}
	return a
}

// judge says whether an attempt's outcome is final, and the error it means
// (nil for a 2xx).
func (c *Client) judge(a Attempt) (final bool, err error) {
	if errors.Is(a.Err, ErrResponseTooLarge) {
		return true, &NetworkError{Method: a.Method, Path: pathOf(a.URL), IdempotencyKey: a.IdempotencyKey,
			RequestID: a.Header.Get(requestIDHeader), Attempts: a.Number, Err: a.Err}
	}
	if a.Err != nil {
		return false, a.Err
	}
	if a.Status >= 200 && a.Status < 300 {
		return true, nil
	}
	e := toError(a)
	switch {
	case a.Status == http.StatusConflict && (e.Code == CodeIdempotencyKeyInUse || e.Code == CodePaymentProcessing || e.Code == ""),
		a.Status == http.StatusTooManyRequests,
		a.Status >= 500:
		return false, e
	default:
		return true, e
	}
}

// backoff is the wait before retry n (n ≥ 1): full jitter, a uniform random
// duration up to min(minBackoff × 2ⁿ⁻¹, maxBackoff), and at least what the
// service asked for in Retry-After.
func (c *Client) backoff(n int, retryAfter time.Duration) time.Duration {
	bound := c.maxBackoff
	if n-1 < 32 {
		bound = min(c.minBackoff<<(n-1), c.maxBackoff)
	}
	wait := time.Duration(rand.Int64N(int64(bound) + 1))
	return max(wait, retryAfter)
}

// retryAfter reads Retry-After: seconds, or an HTTP date.
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// pathOf is the path of an attempt's URL, for errors.
func pathOf(target string) string {
	if u, err := url.Parse(target); err == nil {
		return u.Path
	}
	return target
}

// clock is the time the retries are measured and waited in (a fake one
// in tests).
type clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error // ctx.Err() when ctx ends first
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// escape makes s one segment of a path.
func escape(s string) string { return url.PathEscape(s) }

var errEmptyID = errors.New("payments: an id is required")
