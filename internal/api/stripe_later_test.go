package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripesim"
)

// Tests of what Stripe decides after answering (API.md section 2, "Stripe
// decides some outcomes later"): 3-D Secure, refunds that settle or fail
// later. docs/failure-scenarios.md names them.

const threeDSBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_authenticationRequired"}`

// A card that needs 3-D Secure cannot be completed server to server: 402
// card_declined authentication_required, the payment failed, and nothing
// left at Stripe that could still be captured or completed.
func TestCreate_threeDSecureCardIsDeclinedAsAuthenticationRequired(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first, body := b.post(t, aliceKey, pathPayments, "3ds-1", threeDSBody)
	requireProblem(t, first, body, http.StatusPaymentRequired, "card_declined")
	p := decodeProblem(t, body)
	require.Equal(t, "authentication_required", p.DeclineCode)
	require.NotEmpty(t, p.Payment)

	pay := b.getPayment(t, aliceKey, p.Payment)
	require.Equal(t, "failed", pay.Status)
	require.Equal(t, "authentication_required", *pay.FailureCode)
	require.False(t, pay.Captured)

	intents := b.simIntentsFor(t, p.Payment)
	require.Len(t, intents, 1)
	require.Equal(t, "requires_payment_method", intents[0].Status, "the PaymentIntent cannot go on")
	require.Zero(t, intents[0].AmountCapturable)
	require.Zero(t, intents[0].AmountReceived)
	create := b.simRequests(http.MethodPost, "/v1/payment_intents")
	require.Len(t, create, 1)

	again, againBody := b.post(t, aliceKey, pathPayments, "3ds-1", threeDSBody)
	requireReplayOf(t, first, body, again, againBody)
	require.Equal(t, []string{"merchant_event payment.failed"}, b.stagedJobs(t, "alice@example.com", "3ds-1"))
}

// capture=false with a 3-D Secure card: the same refusal, and no
// authorisation to capture or cancel.
func TestCreate_threeDSecureCardWithCaptureFalse(t *testing.T) {
	t.Parallel()
	b := setup(t)

	resp, body := b.post(t, aliceKey, pathPayments, "3ds-auth",
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_authenticationRequired","capture":false}`)
	requireProblem(t, resp, body, http.StatusPaymentRequired, "card_declined")
	p := decodeProblem(t, body)
	require.Equal(t, "authentication_required", p.DeclineCode)
	require.Equal(t, "failed", b.getPayment(t, aliceKey, p.Payment).Status, "never requires_capture")

	intents := b.simIntentsFor(t, p.Payment)
	require.Len(t, intents, 1)
	require.Equal(t, "requires_payment_method", intents[0].Status)
	require.Zero(t, intents[0].AmountCapturable)

	resp, body = b.post(t, aliceKey, capturePath(p.Payment), "3ds-capture", "")
	requireProblem(t, resp, body, http.StatusBadRequest, "payment_not_capturable")
	require.Empty(t, b.simRequests(http.MethodPost, "/v1/payment_intents/"+intents[0].ID+"/capture"),
		"a payment that was never authorised is refused before Stripe")
	require.Equal(t, "failed", b.getPayment(t, aliceKey, p.Payment).Status)
}

// getRefund reads a refund back through the API and requires a 200.
func (b *testBundle) getRefund(t *testing.T, apiKey, id string) refundJSON {
	t.Helper()
	resp, data := b.do(t, http.MethodGet, "/v1/refunds/"+id, apiKey, nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	return decodeRefund(t, data)
}

// refundEvents lists, oldest first, the merchant events staged for a refund.
func (b *testBundle) refundEvents(t *testing.T, refundID string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT args->>'type' FROM staged_jobs
		WHERE kind = 'merchant_event' AND args->'object'->>'id' = $1
		ORDER BY id`, refundID)
	require.NoError(t, err)
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return types
}

// A refund Stripe answers pending holds its amount, and becomes succeeded
// when charge.refund.updated says so; refund.succeeded is announced then.
func TestRefund_pendingRefundSettlesByWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_pendingRefund"}`)

	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, "pending", re.Status)
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded, "nothing went back yet")
	resp, data := b.post(t, aliceKey, pathRefunds, "refund-2", refundBody(pay.ID, 1501))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
	require.Empty(t, b.refundEvents(t, re.ID), "a pending refund is announced when it settles")

	b.sim.Advance(2 * time.Second) // Stripe settles it, and says so
	requireEventually(t, "the refund settles", func() bool { return b.getRefund(t, aliceKey, re.ID).Status == "succeeded" })
	require.EqualValues(t, 500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Nil(t, b.getRefund(t, aliceKey, re.ID).FailureReason)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, re.ID))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE kind = 'receipt_email' AND args->>'refund' = $1", re.ID))
}

// A refund Stripe answered succeeded fails later: its amount is given back
// and may be refunded again, and the merchant hears refund.succeeded, then
// refund.failed.
func TestRefund_succeededThenFailedGivesTheAmountBack(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_refundFail"}`)

	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 1500))
	require.Equal(t, "succeeded", re.Status)
	require.EqualValues(t, 1500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	resp, data := b.post(t, aliceKey, pathRefunds, "refund-2", refundBody(pay.ID, 501))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")

	b.sim.Advance(2 * time.Second) // Stripe fails it, and says so
	requireEventually(t, "the refund fails", func() bool { return b.getRefund(t, aliceKey, re.ID).Status == "failed" })
	failed := b.getRefund(t, aliceKey, re.ID)
	require.Equal(t, "expired_or_canceled_card", *failed.FailureReason)
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded, "the failed refund's amount is given back")
	require.Equal(t, []string{"refund.succeeded", "refund.failed"}, b.refundEvents(t, re.ID))

	again := b.refund(t, aliceKey, "refund-3", refundBody(pay.ID, 2000))
	require.Equal(t, "succeeded", again.Status, "the amount may be refunded again")
	require.EqualValues(t, 2000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)

	// The replay of the first refund is its answer then, not its state now.
	first, firstBody := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 1500))
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, "succeeded", decodeRefund(t, firstBody).Status)
}

// The webhook that settles a pending refund is lost (this simulator sends
// none): the reconciler reads the refund's charge.refund.updated in
// Stripe's event log, and applies it as the webhook would have.
func TestRefund_pendingRefundSettlesByTheReconcilerWhenTheWebhookIsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_pendingRefund"}`)
	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, "pending", re.Status)

	r := b.reconciler()
	run := r.round(t)
	require.Zero(t, run.Moved, "Stripe still says pending: %+v", run)
	require.Equal(t, "pending", b.getRefund(t, aliceKey, re.ID).Status)

	b.sim.Advance(2 * time.Second) // Stripe settles it; nobody hears
	require.Equal(t, "pending", b.getRefund(t, aliceKey, re.ID).Status)
	run = r.round(t)
	require.Equal(t, 1, run.Moved, "%+v", run)
	require.Equal(t, "succeeded", b.getRefund(t, aliceKey, re.ID).Status)
	require.EqualValues(t, 500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, re.ID))
	require.Empty(t, b.simRequests(http.MethodGet, "/v1/refunds"), "no payment's refunds are listed")
}

// Stripe's answer to a pending refund is lost, and the webhook that settles
// the refund arrives before the client retries: the webhook finds the
// refund by its metadata and settles it; the retry replays Stripe's pending
// answer, which does not undo that. One change, one event.
func TestRefund_aWebhookThatSettlesTheRefundBeforeTheFlowRecordsIt(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_pendingRefund"}`)
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/refunds", Method: http.MethodPost, Kind: stripesim.FaultLostResponse}))

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	var refundID string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT id FROM refunds WHERE payment_id = $1", pay.ID).Scan(&refundID))

	b.sim.Advance(2 * time.Second)
	requireEventually(t, "the webhook settles the refund", func() bool { return b.getRefund(t, aliceKey, refundID).Status == "succeeded" })

	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, refundID, re.ID)
	require.Equal(t, "succeeded", re.Status, "the replayed pending answer does not undo the settlement")
	require.NotNil(t, re.StripeRefund)
	require.EqualValues(t, 500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, re.ID))
	require.Len(t, b.simRefundsFor(t, *pay.StripePaymentIntent), 1)
}

// Stripe cancels an authorisation nobody captured within 7 days, and says
// so: the payment is canceled, and a late capture is refused.
func TestCapture_anAuthorisationStripeLetLapseIsCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	require.Equal(t, "requires_capture", auth.Status)

	b.sim.Advance(7 * 24 * time.Hour)
	requireEventually(t, "the payment is canceled", func() bool { return b.getPayment(t, aliceKey, auth.ID).Status == "canceled" })
	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireProblem(t, resp, data, http.StatusBadRequest, "payment_not_capturable")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))
}
