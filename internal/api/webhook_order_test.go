package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stripesim"
)

// Issue 20, item 4: Stripe delivers webhooks at least once, in any order,
// sometimes late. Through the service's real /v1/stripe/webhooks, with the
// simulator's webhook faults (or, where the simulator sends a single event
// about an object, events made here and signed as Stripe signs them), the
// service ends where Stripe is, and each change is announced once.

// eventsOfType counts the merchant events staged of one type.
func (b *testBundle) eventsOfType(t *testing.T, typ string) int {
	t.Helper()
	return b.count(t, "SELECT count(*) FROM staged_jobs WHERE kind = 'merchant_event' AND args->>'type' = $1", typ)
}

// webhookOutcomes reads the receiver's counter of deliveries with an outcome.
func (b *testBundle) webhookOutcomes(t *testing.T, outcome string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^payments_stripe_webhooks_total\{outcome="` + outcome + `"\} (\d+)$`).FindStringSubmatch(b.metrics(t))
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}

// Every event is delivered twice, over a whole life: an authorisation
// captured in part, a refund Stripe settles later, and a payment whose
// answer from Stripe was lost, so that its webhooks (twice each) record it.
// Each change is applied once and announced once.
func TestWebhooks_duplicatedDeliveriesChangeNothingTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	require.NoError(t, b.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookDuplicate, Count: 1000}))

	auth := b.createPayment(t, aliceKey, "auth-1",
		`{"amount":5000,"currency":"usd","payment_method":"pm_card_pendingRefund","capture":false}`)
	resp, data := b.post(t, aliceKey, capturePath(auth.ID), "capture-1", `{"amount":3000}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(data))
	re := b.refund(t, aliceKey, "refund-1", refundBody(auth.ID, 1000))
	require.Equal(t, "pending", re.Status)
	b.sim.Advance(2 * time.Second) // Stripe settles the refund; its webhook comes twice

	b.addFault(t, stripesim.FaultLostResponse, 0)
	resp, data = b.post(t, aliceKey, pathPayments, "lost-1", visaBody)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")

	requireEventually(t, "the refund settles", func() bool { return b.getRefund(t, aliceKey, re.ID).Status == "succeeded" })
	requireEventually(t, "the lost payment succeeds by webhook", func() bool {
		return b.count(t, "SELECT count(*) FROM payments WHERE status = 'succeeded'") == 2
	})
	requireEventually(t, "every duplicate was delivered", func() bool {
		return b.webhookOutcomes(t, "duplicate") == b.count(t, "SELECT count(*) FROM stripe_events")
	})

	pay := b.getPayment(t, aliceKey, auth.ID)
	require.EqualValues(t, 3000, pay.AmountCaptured)
	require.EqualValues(t, 1000, pay.AmountRefunded)
	require.Equal(t, 1, b.eventsOfType(t, "payment.captured"))
	require.Equal(t, 1, b.eventsOfType(t, "payment.succeeded"))
	require.Equal(t, 1, b.eventsOfType(t, "refund.succeeded"))
	require.Zero(t, b.eventsOfType(t, "payment.canceled")+b.eventsOfType(t, "payment.failed")+b.eventsOfType(t, "refund.failed"))
}

// Stripe's answer to an authorisation is lost, its
// payment_intent.amount_capturable_updated is held back, and 7 days later
// Stripe cancels the authorisation: payment_intent.canceled arrives first,
// the authorisation after it. The payment ends canceled, as at Stripe, with
// one payment.canceled; the late authorisation is ignored, and so is the
// replayed answer of the client's retry.
func TestWebhooks_anAuthorisationDeliveredAfterItsCancelIsIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	require.NoError(t, b.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookReorder,
		Type: "payment_intent.amount_capturable_updated"}))
	b.addFault(t, stripesim.FaultLostResponse, 0)
	resp, data := b.post(t, aliceKey, pathPayments, "auth-1", authoriseBody)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")

	b.sim.Advance(7 * 24 * time.Hour)
	requireEventually(t, "both events delivered", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type LIKE 'payment_intent.%' AND type <> 'payment_intent.created'") == 2
	})
	var outcome string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT outcome FROM stripe_events WHERE type = 'payment_intent.amount_capturable_updated'").Scan(&outcome))
	require.Equal(t, "stale", outcome)

	resp, data = b.post(t, aliceKey, pathPayments, "auth-1", authoriseBody)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(data))
	pay := decodePayment(t, data)
	require.Equal(t, "canceled", pay.Status, "the retry shows the payment as Stripe has it")
	require.Equal(t, "canceled", b.simIntentsFor(t, pay.ID)[0].Status)
	require.Equal(t, 1, b.eventsOfType(t, "payment.canceled"))
	require.Zero(t, b.eventsOfType(t, "payment.captured")+b.eventsOfType(t, "payment.succeeded"))
}

// Stripe's answer is lost and payment_intent.succeeded comes late: the
// client's retry records the payment first, and the late webhook changes
// nothing. One payment.succeeded.
func TestWebhooks_aLateWebhookAfterTheFlowRecordedTheChange(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	require.NoError(t, b.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookDelay,
		Type: "payment_intent.succeeded", DelayMS: 500}))
	b.addFault(t, stripesim.FaultLostResponse, 0)
	resp, data := b.post(t, aliceKey, pathPayments, "order-1", visaBody)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")

	pay := b.createPayment(t, aliceKey, "order-1", visaBody)
	require.Equal(t, "succeeded", pay.Status)
	requireEventually(t, "the late webhook delivered", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'payment_intent.succeeded'") == 1
	})
	require.Equal(t, "succeeded", b.getPayment(t, aliceKey, pay.ID).Status)
	require.Equal(t, 1, b.eventsOfType(t, "payment.succeeded"))
}

// deliverRefundEvent sends, signed as Stripe signs, a charge.refund.updated
// carrying the simulator's refund with status (and failure_reason) changed,
// created at created.
func (b *testBundle) deliverRefundEvent(t *testing.T, eventID, stripeRefund, status, failureReason string, created int64) string {
	t.Helper()
	var refund map[string]any
	refunds, err := b.sim.Objects("refund")
	require.NoError(t, err)
	for _, raw := range refunds {
		var r map[string]any
		require.NoError(t, json.Unmarshal(raw, &r))
		if r["id"] == stripeRefund {
			refund = r
		}
	}
	require.NotNil(t, refund, "no refund %s at the simulator", stripeRefund)
	refund["status"] = status
	if failureReason != "" {
		refund["failure_reason"] = failureReason
	}
	payload, err := json.Marshal(map[string]any{
		"id": eventID, "object": "event", "api_version": stripesim.APIVersion, "created": created,
		"type": "charge.refund.updated", "data": map[string]any{"object": refund},
	})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/stripe/webhooks", bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", stripesim.Sign(payload, webhookSecret, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct{ Outcome string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Outcome
}

// A refund Stripe answered pending: the event saying it succeeded arrives
// before an older one still saying pending. It stays succeeded, announced
// once; the refund's moves only go forward.
func TestWebhooks_aStalePendingRefundEventAfterTheSucceededOne(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_pendingRefund"}`)
	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, "pending", re.Status)
	now := time.Now().Unix()

	require.Equal(t, "applied", b.deliverRefundEvent(t, "evt_settled", *re.StripeRefund, "succeeded", "", now+2))
	require.NotEqual(t, "applied", b.deliverRefundEvent(t, "evt_stale", *re.StripeRefund, "pending", "", now+1))
	require.Equal(t, "duplicate", b.deliverRefundEvent(t, "evt_settled", *re.StripeRefund, "succeeded", "", now+2))

	require.Equal(t, "succeeded", b.getRefund(t, aliceKey, re.ID).Status)
	require.EqualValues(t, 500, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, re.ID))
}

// A refund that succeeded and then failed, its events reordered: the
// failure arrives first, then the older success. It ends failed, its amount
// given back, with refund.succeeded (from Stripe's answer) then
// refund.failed, each once.
func TestWebhooks_aRefundThatFailedStaysFailedWhenTheOlderSuccessArrivesLate(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_refundFail"}`)
	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 2000))
	require.Equal(t, "succeeded", re.Status)
	now := time.Now().Unix()

	require.Equal(t, "applied", b.deliverRefundEvent(t, "evt_failed", *re.StripeRefund, "failed", "expired_or_canceled_card", now+2))
	require.NotEqual(t, "applied", b.deliverRefundEvent(t, "evt_old_success", *re.StripeRefund, "succeeded", "", now+1))

	got := b.getRefund(t, aliceKey, re.ID)
	require.Equal(t, "failed", got.Status)
	require.Equal(t, "expired_or_canceled_card", *got.FailureReason)
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded", "refund.failed"}, b.refundEvents(t, re.ID))

	// Stripe's own failure webhook, when the simulator gets to it, changes
	// nothing more.
	b.sim.Advance(2 * time.Second)
	requireEventually(t, "Stripe's webhook delivered", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'charge.refund.updated'") == 3
	})
	require.Equal(t, []string{"refund.succeeded", "refund.failed"}, b.refundEvents(t, re.ID))
}
