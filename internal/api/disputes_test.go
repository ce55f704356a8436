package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/webhooks"
)

// Tests of disputes (docs/API.md section 2: the payment's dispute, 400
// payment_disputed; section 5: charge.dispute.*), with the simulator's
// pm_card_createDispute, as Stripe's test mode disputes a charge.

const disputedBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_createDispute"}`

// simDisputeOf is the id of the simulator's dispute of a PaymentIntent.
func (b *testBundle) simDisputeOf(t *testing.T, intent string) string {
	t.Helper()
	raw, err := b.sim.Objects("dispute")
	require.NoError(t, err)
	for _, obj := range raw {
		var dp struct {
			ID            string `json:"id"`
			PaymentIntent string `json:"payment_intent"`
		}
		require.NoError(t, json.Unmarshal(obj, &dp))
		if dp.PaymentIntent == intent {
			return dp.ID
		}
	}
	require.FailNow(t, "no dispute of "+intent)
	return ""
}

// The customer's bank disputes a payment: the payment shows the dispute
// (payment.disputed), a refund of it is 400 payment_disputed, stored and
// replayed, with nothing asked of Stripe; the dispute closes lost
// (payment.dispute_closed); an older event delivered late moves nothing
// back; a refund after it reaches Stripe, whose charge_disputed is the
// same stored payment_disputed.
func TestDisputes_aChargebackIsRecordedAndRefusesRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", disputedBody)
	require.Nil(t, pay.Dispute)

	b.sim.Advance(2 * time.Second) // the bank disputes the charge
	dpID := b.simDisputeOf(t, *pay.StripePaymentIntent)
	requireEventually(t, "the dispute is recorded", func() bool { return b.getPayment(t, aliceKey, pay.ID).Dispute != nil })
	b.webhooksReceived(t)
	got := b.getPayment(t, aliceKey, pay.ID)
	require.Equal(t, dpID, got.Dispute.ID)
	require.Equal(t, "needs_response", got.Dispute.Status)
	require.Equal(t, "fraudulent", got.Dispute.Reason)
	require.EqualValues(t, 2000, got.Dispute.Amount)
	require.NotZero(t, got.Dispute.Created)
	require.Equal(t, []string{"payment.succeeded", "payment.disputed"}, b.stagedEvents(t, pay.ID),
		"created and funds_withdrawn: one dispute, one event")

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	requireProblem(t, resp, data, http.StatusBadRequest, "payment_disputed")
	again, againData := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	requireReplayOf(t, resp, data, again, againData)
	require.Empty(t, b.simRequests(http.MethodPost, "/v1/refunds"), "decided against the payment's state")
	require.Zero(t, b.count(t, "SELECT count(*) FROM refunds"))

	require.NoError(t, b.sim.CloseDispute(dpID, "lost"))
	requireEventually(t, "the dispute is closed", func() bool { return b.getPayment(t, aliceKey, pay.ID).Dispute.Status == "lost" })
	b.webhooksReceived(t)
	require.Equal(t, []string{"payment.succeeded", "payment.disputed", "payment.dispute_closed"}, b.stagedEvents(t, pay.ID))

	// charge.dispute.created, delivered again (under another id, as the
	// event log would) after the dispute closed: stale, nothing moves back.
	rcv := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: webhookSecret})
	require.Equal(t, payments.EventStale, deliverAs(t, rcv, b.simEvent(t, "charge.dispute.created", dpID), "evt_late_created"))
	require.Equal(t, "lost", b.getPayment(t, aliceKey, pay.ID).Dispute.Status)
	require.Len(t, b.stagedEvents(t, pay.ID), 3)

	// Lost: the service asks Stripe, which refuses (charge_disputed): the
	// same stored answer.
	resp, data = b.post(t, aliceKey, pathRefunds, "refund-2", refundBody(pay.ID, 500))
	requireProblem(t, resp, data, http.StatusBadRequest, "payment_disputed")
	require.Len(t, b.simRequests(http.MethodPost, "/v1/refunds"), 1)
	require.EqualValues(t, 0, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	again, againData = b.post(t, aliceKey, pathRefunds, "refund-2", refundBody(pay.ID, 500))
	requireReplayOf(t, resp, data, again, againData)
}

// A dispute the service has not heard of (every webhook lost): Stripe's
// charge_disputed is answered as 400 payment_disputed, stored; a dispute
// won opens the payment to refunds again.
func TestDisputes_stripesChargeDisputedIsPaymentDisputed(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", disputedBody)
	b.dropWebhooks(t)
	b.sim.Advance(2 * time.Second)
	dpID := b.simDisputeOf(t, *pay.StripePaymentIntent)
	require.Nil(t, b.getPayment(t, aliceKey, pay.ID).Dispute, "not known to the service")

	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	requireProblem(t, resp, data, http.StatusBadRequest, "payment_disputed")
	again, againData := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	requireReplayOf(t, resp, data, again, againData)
	require.Len(t, b.simRequests(http.MethodPost, "/v1/refunds"), 1)

	// The lost events reach the service another way (the event log), in
	// Stripe's order; the dispute is then won.
	rcv := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: webhookSecret})
	require.Equal(t, payments.EventApplied, deliverAs(t, rcv, b.simEvent(t, "charge.dispute.created", dpID), "evt_log_1"))
	require.Equal(t, payments.EventNoChange, deliverAs(t, rcv, b.simEvent(t, "charge.dispute.funds_withdrawn", dpID), "evt_log_2"))
	require.NoError(t, b.sim.CloseDispute(dpID, "won"))
	require.Equal(t, payments.EventApplied, deliverAs(t, rcv, b.simEvent(t, "charge.dispute.closed", dpID), "evt_log_3"))
	require.Equal(t, payments.EventNoChange, deliverAs(t, rcv, b.simEvent(t, "charge.dispute.funds_reinstated", dpID), "evt_log_4"))
	got := b.getPayment(t, aliceKey, pay.ID)
	require.Equal(t, "won", got.Dispute.Status)
	require.Equal(t, []string{"payment.succeeded", "payment.disputed", "payment.dispute_closed"}, b.stagedEvents(t, pay.ID))

	require.Equal(t, "succeeded", b.refund(t, aliceKey, "refund-2", refundBody(pay.ID, 500)).Status, "won: refundable again")
}
