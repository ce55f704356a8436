package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 20: what Stripe does that the service must follow. Tests of charge
// limits are in charge_limits_test.go; these are about releases, expiry and
// webhooks that arrive twice, out of order or late.

// Item 1: a partial capture releases the rest of the authorisation, and
// Stripe counts the release in the charge's amount_refunded, so the
// charge.refunded webhook reports 7,000 refunded for a refund of 1,000
// after capturing 4,000 of 10,000. The payment's amount_refunded is money
// given back (our refunds), never the release: 1,000, then 4,000, and the
// customer's remaining 3,000 may be refunded.
func TestRefund_afterAPartialCaptureTheReleaseIsNoRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	auth := b.createPayment(t, aliceKey, "auth-1", `{"amount":10000,"currency":"usd","payment_method":"pm_card_visa","capture":false}`)
	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", `{"amount":4000}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))

	re := b.refund(t, aliceKey, "refund-1", refundBody(auth.ID, 1000))
	require.Equal(t, "succeeded", re.Status)
	b.requireChargeRefundedApplied(t, 1)
	require.EqualValues(t, 1000, b.getPayment(t, aliceKey, auth.ID).AmountRefunded)

	rest := b.refund(t, aliceKey, "refund-2", refundBody(auth.ID, 3000))
	require.Equal(t, "succeeded", rest.Status, "the customer's remaining 3,000 may be refunded")
	b.requireChargeRefundedApplied(t, 2)
	pay := b.getPayment(t, aliceKey, auth.ID)
	require.EqualValues(t, 4000, pay.AmountCaptured)
	require.EqualValues(t, 4000, pay.AmountRefunded)

	resp, data = b.post(t, aliceKey, pathRefunds, "refund-3", refundBody(auth.ID, 1))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
}

// requireChargeRefundedApplied waits until the service has taken in n
// charge.refunded webhooks.
func (b *testBundle) requireChargeRefundedApplied(t *testing.T, n int) {
	t.Helper()
	requireEventually(t, "charge.refunded delivered", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'charge.refunded'") == n
	})
}

// Item 5: Stripe cancels an authorisation nobody captured within 7 days,
// and its payment_intent.canceled webhook is lost. A capture then is
// refused by Stripe, and Stripe's refusal carries the PaymentIntent,
// canceled: the service records that (the payment canceled, with its one
// payment.canceled event) and answers 400 payment_not_capturable, stored
// like any terminal answer.
func TestCapture_afterTheAuthorisationExpiredWithItsWebhookLost(t *testing.T) {
	t.Parallel()
	b := setup(t) // no webhooks: Stripe's cancel is never heard of
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)

	b.sim.Advance(7*24*time.Hour + time.Second)
	require.Equal(t, "requires_capture", b.getPayment(t, aliceKey, auth.ID).Status, "nobody told the service")

	first, body := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireRefusal(t, first, body, http.StatusBadRequest, "payment_not_capturable", "canceled")
	pay := b.getPayment(t, aliceKey, auth.ID)
	require.Equal(t, "canceled", pay.Status)
	require.False(t, pay.Captured)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))

	again, againBody := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireReplayOf(t, first, body, again, againBody)
	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-2", "")
	requireProblem(t, resp, data, http.StatusBadRequest, "payment_not_capturable")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"),
		"one change, one event")
}

// Item 5, with the webhook: the payment is canceled by it, with one
// payment.canceled; a capture is refused and its answer stored.
func TestCapture_afterTheAuthorisationExpiredIsRefusedAndStored(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)

	b.sim.Advance(7 * 24 * time.Hour)
	requireEventually(t, "the payment is canceled", func() bool { return b.getPayment(t, aliceKey, auth.ID).Status == "canceled" })
	intents := b.simIntentsFor(t, auth.ID)
	require.Equal(t, "canceled", intents[0].Status)

	first, body := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireRefusal(t, first, body, http.StatusBadRequest, "payment_not_capturable", "canceled")
	again, againBody := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", "")
	requireReplayOf(t, first, body, again, againBody)
	require.Equal(t, "canceled", b.getPayment(t, aliceKey, auth.ID).Status)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))
}
