package api_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripesim"
)

// Stripe stores a 500 under an idempotency key once the request's execution
// began, and answers every later request with that key with the same 500
// (Idempotent-Replayed: true). Retrying the same child key can then never
// succeed: the child key is spent. The service reconciles (does the object
// exist at Stripe? Stripe's lists and objects say at once), and, finding
// nothing, moves on to a new generation of the child key once the grace
// after the first replayed 500 is over (the 500's request may still be
// executing at Stripe: recovery.DefaultSpentKeyGrace). The client gets 503
// meanwhile, with a Retry-After that says when the grace ends, and then
// the one right answer, with exactly one object at Stripe.

// setupStored is setup with a clock the test moves.
func setupStored(t *testing.T) (*testBundle, *clocktest.Clock) {
	t.Helper()
	clock := clocktest.New(time.Now().Truncate(time.Second))
	return setup(t, setupOpts{engine: recovery.Config{Now: clock.Now}}), clock
}

// armStored500 arms a stored 500 on the next Stripe POST whose path starts
// with pathPrefix.
func (b *testBundle) armStored500(t *testing.T, pathPrefix string) {
	t.Helper()
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: pathPrefix, Method: http.MethodPost, Kind: stripesim.FaultStoredError500}))
}

// requireSpentThenRenewed checks the Stripe calls of one step: the first
// got the 500, the calls after it with the same child key its replay, and
// every later one carries the child key's next generation, never replayed.
// It returns how many calls used the spent key.
func requireSpentThenRenewed(t *testing.T, calls []stripesim.RequestRecord) int {
	t.Helper()
	spent := calls[0].IdempotencyKey
	require.Equal(t, http.StatusInternalServerError, calls[0].Status)
	require.False(t, calls[0].Replayed)
	n := 1
	for n < len(calls) && calls[n].IdempotencyKey == spent {
		require.True(t, calls[n].Replayed, "a later call with the spent key gets the stored 500")
		n++
	}
	require.Greater(t, n, 1, "the key was found spent by a replay")
	require.Less(t, n, len(calls), "a new key was used: %+v", calls)
	for _, c := range calls[n:] {
		require.Equal(t, spent+"-g1", c.IdempotencyKey, "the next generation of the child key")
		require.False(t, c.Replayed)
	}
	return n
}

// requireRetryAfterIs checks the Retry-After of a 503 in whole seconds.
func requireRetryAfterIs(t *testing.T, resp *http.Response, want time.Duration) {
	t.Helper()
	require.Equal(t, strconv.Itoa(int(want.Seconds())), resp.Header.Get("Retry-After"))
}

// spentThenGrace sends the request that meets Stripe's stored 500 and the
// client's retry a couple of seconds later, which finds the child key spent
// and nothing at Stripe: both 503, the retry's Retry-After the whole grace.
func (b *testBundle) spentThenGrace(t *testing.T, clock *clocktest.Clock, path, key, body string) {
	t.Helper()
	resp, data := b.post(t, aliceKey, path, key, body)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	requireRetryAfterIs(t, resp, 2*time.Second) // a 500 may pass: retry soon

	clock.Advance(2 * time.Second)
	resp, data = b.post(t, aliceKey, path, key, body)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	requireRetryAfterIs(t, resp, recovery.DefaultSpentKeyGrace) // spent, nothing found: when the grace ends
}

func TestStored500_createMovesToANewChildKeyAndChargesOnce(t *testing.T) {
	t.Parallel()
	b, clock := setupStored(t)
	b.armStored500(t, "/v1/payment_intents")

	b.spentThenGrace(t, clock, pathPayments, "order-1", visaBody)
	// Within the grace the 500's request may still be executing at Stripe:
	// nothing found is not yet believed.
	clock.Advance(recovery.DefaultSpentKeyGrace - time.Second)
	resp, data := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	requireRetryAfterIs(t, resp, time.Second)
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 3)
	require.Empty(t, b.simIntents(t))

	clock.Advance(time.Second) // the grace since the retry that found the key spent
	first, firstBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	pay := decodePayment(t, firstBody)
	require.Equal(t, "succeeded", pay.Status)

	intents := b.simIntents(t)
	require.Len(t, intents, 1, "exactly one PaymentIntent")
	require.Equal(t, *pay.StripePaymentIntent, intents[0].ID)
	require.Equal(t, pay.ID, intents[0].Metadata["payment"])
	calls := b.simRequests(http.MethodPost, "/v1/payment_intents")
	require.Len(t, calls, 5)
	require.Equal(t, 4, requireSpentThenRenewed(t, calls), "inside the grace the spent key stays the key")
	require.NotEmpty(t, b.simRequests(http.MethodGet, "/v1/payment_intents"), "reconciled by Stripe's list before moving on")
	require.Empty(t, b.simRequests(http.MethodGet, "/v1/payment_intents/search"), "never by its lagging search")

	again, againBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireReplayOf(t, first, firstBody, again, againBody)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments"))
}

// A declined card behind the stored 500: the new child key's call is
// declined, and the 402 is the final answer, replayed.
func TestStored500_createOfADeclinedCardAnswers402Once(t *testing.T) {
	t.Parallel()
	b, clock := setupStored(t)
	b.armStored500(t, "/v1/payment_intents")
	declined := `{"amount":2000,"currency":"usd","payment_method":"pm_card_chargeDeclined"}`

	b.spentThenGrace(t, clock, pathPayments, "order-1", declined)
	clock.Advance(recovery.DefaultSpentKeyGrace)
	first, firstBody := b.post(t, aliceKey, pathPayments, "order-1", declined)
	requireProblem(t, first, firstBody, http.StatusPaymentRequired, "card_declined")

	intents := b.simIntents(t)
	require.Len(t, intents, 1, "exactly one PaymentIntent, declined")
	require.Equal(t, "requires_payment_method", intents[0].Status)
	require.Zero(t, intents[0].AmountReceived)
	requireSpentThenRenewed(t, b.simRequests(http.MethodPost, "/v1/payment_intents"))

	again, againBody := b.post(t, aliceKey, pathPayments, "order-1", declined)
	requireReplayOf(t, first, firstBody, again, againBody)
	var status string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM payments").Scan(&status))
	require.Equal(t, "failed", status)
}

// A capture is reconciled by reading the PaymentIntent, which shows a
// capture at once; the grace applies as to every spent key (a capture
// Stripe still executes would capture what the new key then could not).
func TestStored500_captureMovesToANewChildKeyAndCapturesOnce(t *testing.T) {
	t.Parallel()
	b, clock := setupStored(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	capturePrefix := "/v1/payment_intents/" + *auth.StripePaymentIntent + "/capture"
	b.armStored500(t, capturePrefix)

	b.spentThenGrace(t, clock, capturePath(auth.ID), "capture-1", "")
	require.Equal(t, "requires_capture", b.simIntentsFor(t, auth.ID)[0].Status)

	clock.Advance(recovery.DefaultSpentKeyGrace)
	first, firstBody := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	require.Equal(t, http.StatusOK, first.StatusCode, string(firstBody))
	captured := decodePayment(t, firstBody)
	require.Equal(t, "succeeded", captured.Status)
	require.EqualValues(t, 2000, captured.AmountCaptured)

	intents := b.simIntentsFor(t, auth.ID)
	require.Len(t, intents, 1)
	require.Equal(t, "succeeded", intents[0].Status)
	require.EqualValues(t, 2000, intents[0].AmountReceived)
	requireSpentThenRenewed(t, b.simRequests(http.MethodPost, capturePrefix))

	again, againBody := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireReplayOf(t, first, firstBody, again, againBody)
}

// A refund is reconciled by listing the PaymentIntent's refunds, which
// shows a refund at once; after the grace the step moves on.
func TestStored500_refundMovesToANewChildKeyAndRefundsOnce(t *testing.T) {
	t.Parallel()
	b, clock := setupStored(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)
	b.armStored500(t, "/v1/refunds")

	b.spentThenGrace(t, clock, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	require.Empty(t, b.simRefundsFor(t, *pay.StripePaymentIntent))

	clock.Advance(recovery.DefaultSpentKeyGrace)
	first, firstBody := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, http.StatusCreated, first.StatusCode, string(firstBody))
	re := decodeRefund(t, firstBody)
	require.Equal(t, "succeeded", re.Status)
	require.EqualValues(t, 500, re.Amount)

	refunds := b.simRefundsFor(t, *pay.StripePaymentIntent)
	require.Len(t, refunds, 1, "exactly one Stripe refund")
	require.Equal(t, *re.StripeRefund, refunds[0].ID)
	require.EqualValues(t, 500, refunds[0].Amount)
	requireSpentThenRenewed(t, b.simRequests(http.MethodPost, "/v1/refunds"))
	require.NotEmpty(t, b.simRequests(http.MethodGet, "/v1/refunds"), "reconciled before moving on")
	require.EqualValues(t, 500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)

	again, againBody := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	requireReplayOf(t, first, firstBody, again, againBody)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM refunds"))
}
