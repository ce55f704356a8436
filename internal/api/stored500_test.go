package api_test

import (
	"net/http"
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
// exist at Stripe?), and then moves on to a new generation of the child key;
// where it reconciles by Stripe's search (a PaymentIntent), it first waits
// out the search's lag. The client gets 503 meanwhile, and then the one
// right answer, with exactly one object at Stripe.

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

func TestStored500_createMovesToANewChildKeyAndChargesOnce(t *testing.T) {
	t.Parallel()
	b, clock := setupStored(t)
	b.armStored500(t, "/v1/payment_intents")

	for range 2 { // the 500, then its replay: the key is spent
		resp, data := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
		requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
		requireRetryAfter(t, resp)
	}
	// Inside the lag, Stripe's search may not show a PaymentIntent made
	// moments ago: the service waits rather than risk a second charge.
	clock.Advance(recovery.DefaultSearchLag / 2)
	resp, data := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 3)
	require.Empty(t, b.simIntents(t))

	clock.Advance(recovery.DefaultSearchLag / 2) // the lag since the second request found the key spent
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
	require.Equal(t, 4, requireSpentThenRenewed(t, calls), "inside the lag the spent key stays the key")
	require.NotEmpty(t, b.simRequests(http.MethodGet, "/v1/payment_intents/search"), "reconciled before moving on")

	again, againBody := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireReplayOf(t, first, firstBody, again, againBody)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments"))
}

// A capture is reconciled by reading the PaymentIntent, which shows a
// capture at once: the retry that finds the key spent moves on at once.
func TestStored500_captureMovesToANewChildKeyAndCapturesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	capturePrefix := "/v1/payment_intents/" + *auth.StripePaymentIntent + "/capture"
	b.armStored500(t, capturePrefix)

	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	require.Equal(t, "requires_capture", b.simIntentsFor(t, auth.ID)[0].Status)

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
// shows a refund at once: the retry that finds the key spent moves on at
// once.
func TestStored500_refundMovesToANewChildKeyAndRefundsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)
	b.armStored500(t, "/v1/refunds")

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	require.Empty(t, b.simRefundsFor(t, *pay.StripePaymentIntent))

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
