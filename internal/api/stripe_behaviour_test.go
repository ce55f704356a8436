package api_test

import (
	"net/http"
	"testing"

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
