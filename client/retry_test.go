package client_test

// The retry budget, the errors of calls that got no answer, and the
// client's limits, against servers that answer as the service would in
// cases the demo service cannot be made to reach on demand (a lock held by
// a dead process for 90 s, an answer that never ends). A fake clock stands
// in for the waits: nothing here sleeps.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/client"
)

// fakeClock is a clock that moves only when the client sleeps.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_763_800_000, 0)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return ctx.Err()
}

func (f *fakeClock) option() client.Option { return client.WithFakeClock(f.Now, f.Sleep) }

const paymentJSON = `{"id":"pay_1","object":"payment","amount":2000,"currency":"usd","status":"succeeded",` +
	`"captured":true,"amount_captured":2000,"amount_refunded":0,"payment_method":"pm_card_visa",` +
	`"stripe_payment_intent":"pi_1","failure_code":null,"failure_message":null,"description":null,` +
	`"metadata":{},"created":1763800000}`

func writeProblem(w http.ResponseWriter, status int, code string, retryAfter string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Request-Id", "req-"+code)
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"type":"about:blank","title":"t","status":` + strconv.Itoa(status) + `,"code":"` + code + `"}`))
}

// lockHeldUntil answers 409 idempotency_key_in_use with Retry-After: 1, as
// the service does while a request holds the key, until the clock reaches
// free; then 201. It records the keys and times of the attempts.
type lockHeldUntil struct {
	clock *fakeClock
	free  time.Time
	mu    sync.Mutex
	keys  []string
	at    []time.Time
}

func (l *lockHeldUntil) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := l.clock.Now()
	l.mu.Lock()
	l.keys, l.at = append(l.keys, r.Header.Get("Idempotency-Key")), append(l.at, now)
	l.mu.Unlock()
	if now.Before(l.free) {
		writeProblem(w, http.StatusConflict, "idempotency_key_in_use", "1")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(paymentJSON))
}

// The process that held the key died: its lock lapses after the service's
// lock timeout (90 s by default). A call with default settings keeps
// retrying, at least a Retry-After apart, until it does, and gets the
// answer; one whose key stays held past the budget gives up, with the key.
func TestClient_theRetryBudgetOutlastsACrashedHoldersLock(t *testing.T) {
	clock := newFakeClock()
	holder := &lockHeldUntil{clock: clock, free: clock.Now().Add(90 * time.Second)}
	server := httptest.NewServer(holder)
	defer server.Close()
	started := clock.Now()

	p, err := client.New(server.URL, aliceKey, clock.option()).
		CreatePayment(ctxTimeout(t, time.Minute), visa(2000), client.WithIdempotencyKey("order-held"))
	require.NoError(t, err)
	require.Equal(t, "pay_1", p.ID)
	require.GreaterOrEqual(t, clock.Now().Sub(started), 90*time.Second)
	require.Greater(t, len(holder.keys), 8, "more attempts than the old default of 8")
	for i, k := range holder.keys {
		require.Equal(t, "order-held", k)
		if i > 0 {
			require.GreaterOrEqual(t, holder.at[i].Sub(holder.at[i-1]), time.Second, "Retry-After is honoured")
		}
	}

	// A key held for good: the call ends after the budget, no sooner, and
	// not much later, with the last answer and the key.
	clock = newFakeClock()
	never := &lockHeldUntil{clock: clock, free: clock.Now().Add(24 * time.Hour)}
	server2 := httptest.NewServer(never)
	defer server2.Close()
	started = clock.Now()
	_, err = client.New(server2.URL, aliceKey, clock.option()).CreatePayment(ctxTimeout(t, time.Minute), visa(2000))
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.CodeIdempotencyKeyInUse, e.Code)
	require.Equal(t, never.keys[0], e.IdempotencyKey)
	require.Equal(t, "req-idempotency_key_in_use", e.RequestID)
	elapsed := never.at[len(never.at)-1].Sub(started)
	require.Greater(t, elapsed, client.DefaultRetryBudget-client.DefaultMaxBackoff)
	require.LessOrEqual(t, elapsed, client.DefaultRetryBudget)
	require.Greater(t, client.DefaultRetryBudget, 2*90*time.Second, "two lock timeouts of the service")
}

// 409 payment_processing (a capture, cancel or refund of a payment whose
// creation has not finished) stores nothing: it is retried too.
func TestClient_paymentProcessingIsRetried(t *testing.T) {
	clock := newFakeClock()
	calls := 0
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			writeProblem(w, http.StatusConflict, "payment_processing", "1")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(paymentJSON))
	}))
	defer server.Close()
	_, err := client.New(server.URL, aliceKey, clock.option()).
		CancelPayment(ctxTimeout(t, time.Minute), "pay_1")
	require.NoError(t, err)
	require.Equal(t, 2, calls)
}

// A call that got no answer returns a *NetworkError with the key it made
// (the caller needs it to send the intent again), both when its attempts
// ran out and when its context ended.
func TestClient_aCallWithNoAnswerCarriesItsKey(t *testing.T) {
	dropping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		require.NoError(t, err)
		_ = conn.Close()
	}))
	defer dropping.Close()
	var seen attempts
	clock := newFakeClock()
	c := client.New(dropping.URL, aliceKey, clock.option(), client.WithMaxAttempts(3), client.WithObserver(seen.observe))

	_, err := c.CreatePayment(ctxTimeout(t, time.Minute), visa(2000))
	var ne *client.NetworkError
	require.ErrorAs(t, err, &ne)
	require.Len(t, seen.seen, 3)
	require.NotEmpty(t, seen.seen[0].IdempotencyKey)
	require.Equal(t, seen.seen[0].IdempotencyKey, ne.IdempotencyKey, "the key the call made")
	require.Equal(t, 3, ne.Attempts)
	require.Equal(t, "/v1/payments", ne.Path)
	require.False(t, errors.As(err, new(*client.Error)), "no answer came back")

	_, err = c.CreateRefund(ctxTimeout(t, time.Minute), client.CreateRefundParams{Payment: "pay_1"}, client.WithIdempotencyKey("refund-1"))
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "refund-1", ne.IdempotencyKey)

	// The context's deadline passes while the server says nothing.
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer hanging.Close()
	defer close(release)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = client.New(hanging.URL, aliceKey).CreatePayment(short, visa(2000), client.WithIdempotencyKey("order-deadline"))
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "order-deadline", ne.IdempotencyKey)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// The client names itself, and reads at most MaxResponseBytes of an
// answer: a larger one is an error, at once, not a buffer without end.
func TestClient_userAgentAndAnswerLimit(t *testing.T) {
	var userAgent string
	calls := 0
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		userAgent = r.Header.Get("User-Agent")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-big")
		w.WriteHeader(http.StatusCreated)
		// Valid JSON, padded past the limit with white space.
		_, _ = w.Write([]byte(paymentJSON))
		pad := []byte(strings.Repeat(" ", 1<<16))
		for written := len(paymentJSON); written <= client.MaxResponseBytes; written += len(pad) {
			if _, err := w.Write(pad); err != nil {
				return
			}
		}
	}))
	defer server.Close()

	_, err := client.New(server.URL, aliceKey).CreatePayment(ctxTimeout(t, time.Minute), visa(2000), client.WithIdempotencyKey("order-big"))
	require.ErrorIs(t, err, client.ErrResponseTooLarge)
	var ne *client.NetworkError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, "order-big", ne.IdempotencyKey)
	require.Equal(t, "req-big", ne.RequestID)
	require.Equal(t, 1, calls, "the same request would get the same answer: not retried")
	require.True(t, strings.HasPrefix(userAgent, "payments-go/"), userAgent)
	require.True(t, strings.HasSuffix(userAgent, " "+runtime.Version()), userAgent)
}
