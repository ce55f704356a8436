package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/client"
	"github.com/example/payments/internal/openapitest"
)

// The same call sent again with the caller's key gets the first answer,
// replayed: one payment, one charge.
func TestCreatePayment_theCallersKeyReplaysTheFirstAnswer(t *testing.T) {
	c := newClient(t)
	ctx := ctxTimeout(t, time.Minute)
	k := key("replay")
	first, err := c.CreatePayment(ctx, visa(2000), client.WithIdempotencyKey(k))
	require.NoError(t, err)
	require.Equal(t, client.PaymentSucceeded, first.Status)
	require.False(t, first.Replayed)

	again, err := c.CreatePayment(ctx, visa(2000), client.WithIdempotencyKey(k))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, 1, paymentIntentsOf(t, first.ID))
}

// Without a key of the caller's, each call makes its own: two calls are two
// payments, and every attempt of one call carries the same key.
func TestCreatePayment_aKeyPerCallSentOnEveryRetry(t *testing.T) {
	var seen attempts
	lossy := &losingTransport{next: openapitest.Transport(t, nil), lose: 2}
	c := client.New(baseURL, aliceKey, client.WithHTTPClient(&http.Client{Transport: lossy}),
		client.WithObserver(seen.observe), client.WithBackoff(time.Millisecond, 10*time.Millisecond))
	ctx := ctxTimeout(t, time.Minute)

	p, err := c.CreatePayment(ctx, visa(2100))
	require.NoError(t, err)
	require.Len(t, seen.seen, 3)
	k := seen.seen[0].IdempotencyKey
	require.NotEmpty(t, k)
	for _, at := range seen.seen {
		require.Equal(t, k, at.IdempotencyKey)
	}
	require.True(t, p.Replayed, "the first answer was lost: the one the client got is its replay")
	require.Equal(t, 1, paymentIntentsOf(t, p.ID))

	other, err := c.CreatePayment(ctx, visa(2100))
	require.NoError(t, err)
	require.NotEqual(t, p.ID, other.ID)
	require.NotEqual(t, k, seen.seen[len(seen.seen)-1].IdempotencyKey)
}

// The service executed the request, and its answer was lost on the way
// back: the retry, with the same key, gets that answer replayed.
func TestCreatePayment_anAnswerLostOnItsWayBackIsReplayed(t *testing.T) {
	var seen attempts
	lossy := &losingTransport{next: openapitest.Transport(t, nil), lose: 1}
	c := client.New(baseURL, aliceKey, client.WithHTTPClient(&http.Client{Transport: lossy}), client.WithObserver(seen.observe))
	ctx := ctxTimeout(t, time.Minute)

	p, err := c.CreatePayment(ctx, visa(2200), client.WithIdempotencyKey(key("lost-answer")))
	require.NoError(t, err)
	require.True(t, p.Replayed)
	require.Equal(t, []int{0, http.StatusCreated}, seen.statuses())
	require.Error(t, seen.seen[0].Err)
	require.True(t, seen.seen[0].Retry)
	require.Equal(t, 1, paymentIntentsOf(t, p.ID))
}

// Stripe fails (a 500 before it executes, a response it lost): the service
// answers 503 with Retry-After, and the client retries after at least that
// long, until the request resumes and finishes. (A connection Stripe drops
// is retried by the service's own HTTP transport at once, since the request
// carries an Idempotency-Key; it is covered all the same: one charge.)
func TestCreatePayment_stripeFaultsAreRetriedAfterRetryAfter(t *testing.T) {
	for _, kind := range []string{"error_500", "lost_response", "drop_connection"} {
		t.Run(kind, func(t *testing.T) {
			addFault(t, `{"path_prefix":"/v1/payment_intents","method":"POST","kind":"`+kind+`","count":1}`)
			var seen attempts
			c := newClient(t, client.WithObserver(seen.observe))
			ctx := ctxTimeout(t, time.Minute)

			started := time.Now()
			p, err := c.CreatePayment(ctx, visa(2300), client.WithIdempotencyKey(key("stripe-"+kind)))
			require.NoError(t, err)
			require.Equal(t, client.PaymentSucceeded, p.Status)
			require.False(t, p.Replayed, "the retry resumed the request: its answer is the first stored")
			require.Equal(t, 1, paymentIntentsOf(t, p.ID), "one charge, whatever Stripe lost")
			if kind == "drop_connection" {
				return
			}
			require.Equal(t, []int{http.StatusServiceUnavailable, http.StatusCreated}, seen.statuses())
			retryAfter := seen.seen[0].Header.Get("Retry-After")
			require.NotEmpty(t, retryAfter)
			require.GreaterOrEqual(t, seen.seen[0].Wait, must(time.ParseDuration(retryAfter+"s")))
			require.GreaterOrEqual(t, time.Since(started), seen.seen[0].Wait)
		})
	}
}

// A second call with a key whose first request is still running gets 409
// idempotency_key_in_use, retries, and ends with the first request's answer.
func TestCreatePayment_aKeyInUseIsWaitedFor(t *testing.T) {
	addFault(t, `{"path_prefix":"/v1/payment_intents","method":"POST","kind":"delay","count":1,"delay_ms":2500}`)
	c := newClient(t)
	ctx := ctxTimeout(t, time.Minute)
	k := key("in-use")

	type result struct {
		p   *client.Payment
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		p, err := c.CreatePayment(ctx, visa(2400), client.WithIdempotencyKey(k))
		firstDone <- result{p, err}
	}()
	require.Eventually(t, func() bool {
		state, err := c.GetIdempotencyKey(ctx, k)
		return err == nil && state.Locked
	}, 10*time.Second, 20*time.Millisecond)

	var seen attempts
	second := newClient(t, client.WithObserver(seen.observe))
	p, err := second.CreatePayment(ctx, visa(2400), client.WithIdempotencyKey(k))
	require.NoError(t, err)
	first := <-firstDone
	require.NoError(t, first.err)
	require.Equal(t, first.p.ID, p.ID)
	require.True(t, p.Replayed)
	require.Equal(t, http.StatusConflict, seen.seen[0].Status)
	require.True(t, seen.seen[0].Retry)
	require.Equal(t, http.StatusCreated, seen.seen[len(seen.seen)-1].Status)
	require.Equal(t, 1, paymentIntentsOf(t, p.ID))
}

// A final 4xx is never retried: a declined card (stored, so a replay later),
// and an invalid request.
func TestCreatePayment_aFinalAnswerIsNotRetried(t *testing.T) {
	var seen attempts
	c := newClient(t, client.WithObserver(seen.observe))
	ctx := ctxTimeout(t, time.Minute)
	declined := client.CreatePaymentParams{Amount: 2500, Currency: "usd", PaymentMethod: "pm_card_chargeDeclinedInsufficientFunds"}
	k := key("declined")

	_, err := c.CreatePayment(ctx, declined, client.WithIdempotencyKey(k))
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusPaymentRequired, e.Status)
	require.Equal(t, client.CodeCardDeclined, e.Code)
	require.Equal(t, "insufficient_funds", e.DeclineCode)
	require.NotEmpty(t, e.Payment)
	require.False(t, e.Replayed)
	require.Equal(t, k, e.IdempotencyKey)
	require.NotEmpty(t, e.RequestID)
	require.Equal(t, seen.seen[0].Header.Get("X-Request-Id"), e.RequestID)
	require.Len(t, seen.seen, 1)
	p, err := c.GetPayment(ctx, e.Payment)
	require.NoError(t, err)
	require.Equal(t, client.PaymentFailed, p.Status)

	_, err = c.CreatePayment(ctx, declined, client.WithIdempotencyKey(k))
	require.ErrorAs(t, err, &e)
	require.True(t, e.Replayed)
	require.Equal(t, client.CodeCardDeclined, e.Code)

	seen.seen = nil
	_, err = c.CreatePayment(ctx, client.CreatePaymentParams{Amount: 10, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.CodeValidationFailed, e.Code)
	require.Len(t, seen.seen, 1)

	_, err = c.CreatePayment(ctx, visa(2600), client.WithIdempotencyKey(k))
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusUnprocessableEntity, e.Status)
	require.Equal(t, client.CodeIdempotencyKeyReused, e.Code)
}

// Retries stop after the configured number of attempts, with the last
// answer as the error; and at the context's deadline, without sleeping
// past it.
func TestClient_retriesAreBounded(t *testing.T) {
	addFault(t, `{"path_prefix":"/v1/payment_intents","method":"POST","kind":"error_500","count":10}`)
	ctx := ctxTimeout(t, time.Minute)

	var seen attempts
	c := newClient(t, client.WithMaxAttempts(2), client.WithObserver(seen.observe))
	_, err := c.CreatePayment(ctx, visa(2700), client.WithIdempotencyKey(key("bounded")))
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.CodePaymentProcessorUnavailable, e.Code)
	require.Len(t, seen.seen, 2)
	require.False(t, seen.seen[1].Retry)

	// Retry-After is 2 s: a second attempt would be due after the deadline.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	started := time.Now()
	_, err = newClient(t).CreatePayment(short, visa(2700), client.WithIdempotencyKey(key("deadline")))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorAs(t, err, &e)
	require.Less(t, time.Since(started), time.Second)
}

// 429 is retried after its Retry-After. (The demo service's rate limit is
// too generous to reach in a test: this one server answers as an
// overloaded service would.)
func TestClient_429IsRetriedAfterRetryAfter(t *testing.T) {
	var calls atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Too Many Requests","status":429,"code":"rate_limited"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[],"has_more":false}`))
	}))
	defer server.Close()
	var seen attempts
	c := client.New(server.URL, aliceKey, client.WithObserver(seen.observe))
	started := time.Now()
	l, err := c.ListPaymentsPage(ctxTimeout(t, time.Minute), client.ListParams{})
	require.NoError(t, err)
	require.Empty(t, l.Data)
	require.Equal(t, []int{http.StatusTooManyRequests, http.StatusOK}, seen.statuses())
	require.GreaterOrEqual(t, seen.seen[0].Wait, time.Second)
	require.GreaterOrEqual(t, time.Since(started), time.Second)
}

// Every route has its method, and each talks to the service as the
// OpenAPI document says (newClient checks every exchange).
func TestClient_everyRoute(t *testing.T) {
	c := newClient(t)
	ctx := ctxTimeout(t, 2*time.Minute)

	require.NoError(t, c.Health(ctx))
	require.NoError(t, c.Ready(ctx))
	metrics, err := c.Metrics(ctx)
	require.NoError(t, err)
	require.Contains(t, metrics, "payments_http_requests_total")
	doc, err := c.OpenAPIDocument(ctx)
	require.NoError(t, err)
	require.Contains(t, string(doc), `"openapi": "3.1.0"`)

	authorised, err := c.CreatePayment(ctx, client.CreatePaymentParams{
		Amount: 5000, Currency: "eur", PaymentMethod: "pm_card_mastercard", Capture: client.Bool(false),
		Description: client.String("every route"), Metadata: map[string]string{"order": "r-1"},
	}, client.WithIdempotencyKey(key("routes-authorise")))
	require.NoError(t, err)
	require.Equal(t, client.PaymentRequiresCapture, authorised.Status)
	captured, err := c.CapturePayment(ctx, authorised.ID, client.CapturePaymentParams{Amount: client.Int64(3000)})
	require.NoError(t, err)
	require.Equal(t, int64(3000), captured.AmountCaptured)

	toCancel, err := c.CreatePayment(ctx, client.CreatePaymentParams{Amount: 700, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: client.Bool(false)})
	require.NoError(t, err)
	canceled, err := c.CancelPayment(ctx, toCancel.ID)
	require.NoError(t, err)
	require.Equal(t, client.PaymentCanceled, canceled.Status)

	refund, err := c.CreateRefund(ctx, client.CreateRefundParams{
		Payment: captured.ID, Amount: client.Int64(1000), Reason: client.String("requested_by_customer"),
	})
	require.NoError(t, err)
	got, err := c.GetRefund(ctx, refund.ID)
	require.NoError(t, err)
	require.Equal(t, refund.ID, got.ID)

	page, err := c.ListPaymentsPage(ctx, client.ListParams{Limit: client.Int64(1)})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	require.True(t, page.HasMore)
	next, err := c.ListPaymentsPage(ctx, client.ListParams{Limit: client.Int64(1), StartingAfter: &page.Data[0].ID})
	require.NoError(t, err)
	require.NotEqual(t, page.Data[0].ID, next.Data[0].ID)

	state, err := c.GetIdempotencyKey(ctx, key("routes-authorise"))
	require.NoError(t, err)
	require.Equal(t, "finished", state.RecoveryPoint)
	require.Equal(t, http.StatusCreated, *state.ResponseCode)

	endpoint, err := c.CreateWebhookEndpoint(ctx, client.CreateWebhookEndpointParams{
		URL: "http://127.0.0.1:9/hooks", EnabledEvents: []string{"payment.*"},
	})
	require.NoError(t, err)
	require.NotEmpty(t, endpoint.Secret)
	gotEndpoint, err := c.GetWebhookEndpoint(ctx, endpoint.ID)
	require.NoError(t, err)
	require.Empty(t, gotEndpoint.Secret)
	endpoints, err := c.ListWebhookEndpointsPage(ctx, client.ListParams{})
	require.NoError(t, err)
	require.NotEmpty(t, endpoints.Data)
	var listed []string
	for e, err := range c.ListWebhookEndpoints(ctx, client.ListParams{Limit: client.Int64(1)}) {
		require.NoError(t, err)
		listed = append(listed, e.ID)
	}
	require.Contains(t, listed, endpoint.ID)

	// The event of a payment made after the endpoint existed.
	paid, err := c.CreatePayment(ctx, visa(900))
	require.NoError(t, err)
	var event *client.Event
	require.Eventually(t, func() bool {
		for e, err := range c.ListEvents(ctx, client.ListEventsParams{Type: client.String("payment.succeeded"), Limit: client.Int64(100)}) {
			require.NoError(t, err)
			require.Equal(t, "payment.succeeded", e.Type)
			if p, err := e.Payment(); err == nil && p.ID == paid.ID {
				event = e
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	gotEvent, err := c.GetEvent(ctx, event.ID)
	require.NoError(t, err)
	require.Equal(t, event.ID, gotEvent.ID)
	require.Eventually(t, func() bool {
		deliveries, err := c.ListEventDeliveries(ctx, event.ID)
		require.NoError(t, err)
		return len(deliveries.Data) == 1
	}, 30*time.Second, 50*time.Millisecond)
	redelivered, err := c.RedeliverEvent(ctx, event.ID)
	require.NoError(t, err)
	require.Len(t, redelivered.Data, 1)
	require.Equal(t, endpoint.ID, redelivered.Data[0].Endpoint)

	deleted, err := c.DeleteWebhookEndpoint(ctx, endpoint.ID)
	require.NoError(t, err)
	require.True(t, deleted.Deleted)
	_, err = c.GetWebhookEndpoint(ctx, endpoint.ID)
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.CodeNotFound, e.Code)

	// Another user's payment is not found, and an unknown key is refused.
	_, err = client.New(baseURL, bobKey).GetPayment(ctx, paid.ID)
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusNotFound, e.Status)
	_, err = client.New(baseURL, "sk_nobody").GetPayment(ctx, paid.ID)
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.CodeUnauthorized, e.Code)
	require.False(t, errors.Is(err, context.DeadlineExceeded))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
