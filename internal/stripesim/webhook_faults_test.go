package stripesim_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/stripesim"
)

// Issue 20, item 4: Stripe delivers an event at least once, in any order,
// sometimes late. POST /_sim/webhook_faults makes the simulator do so.

// delivered is what the receiver got, as (type, event id) pairs.
func (r *receiver) delivered() (types, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		types = append(types, string(ev.Type))
		ids = append(ids, ev.ID)
	}
	return types, ids
}

func TestWebhookFaultDuplicateSendsAnEventTwice(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "duplicate", "count": 2}, http.StatusOK, nil)

	_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)

	waitForEvents(t, rcv, 5)
	types, ids := rcv.delivered()
	require.Equal(t, []string{"payment_intent.created", "payment_intent.created", "charge.succeeded", "charge.succeeded",
		"payment_intent.succeeded"}, types)
	require.Equal(t, ids[0], ids[1], "the same event, under its one id")
	require.Equal(t, ids[2], ids[3])
	require.Empty(t, f.sim.WebhookFaults(), "the fault's count is spent")
}

// reorder holds an event back until the next event about the same object
// was sent: payment_intent.amount_capturable_updated arrives after the
// payment_intent.succeeded of the capture that followed it.
func TestWebhookFaultReorderHoldsAnEventUntilTheNextOneForItsObject(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	require.NoError(t, f.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookReorder,
		Type: "payment_intent.amount_capturable_updated"}))

	pi, err := f.stripe.PaymentIntents.New(manualPaymentIntent(""))
	require.NoError(t, err)
	types := waitForEvents(t, rcv, 2)
	require.Equal(t, []string{"payment_intent.created", "charge.succeeded"}, types, "held back")

	_, err = f.stripe.PaymentIntents.Capture(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"payment_intent.created", "charge.succeeded", "charge.captured",
		"payment_intent.succeeded", "payment_intent.amount_capturable_updated"}, waitForEvents(t, rcv, 5))
}

// An event held for reordering whose object changes no more is sent when
// the webhook faults are cleared.
func TestClearingWebhookFaultsReleasesHeldEvents(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults",
		map[string]any{"kind": "reorder", "type": "payment_intent.succeeded"}, http.StatusOK, nil)
	_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, []string{"payment_intent.created", "charge.succeeded"}, waitForEvents(t, rcv, 2))

	f.control(t, http.MethodDelete, "/_sim/webhook_faults", nil, http.StatusOK, nil)
	require.Equal(t, []string{"payment_intent.created", "charge.succeeded", "payment_intent.succeeded"}, waitForEvents(t, rcv, 3))
}

// delay holds an event delay_ms while later events go out.
func TestWebhookFaultDelayLetsLaterEventsOvertake(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults",
		map[string]any{"kind": "delay", "count": 1, "delay_ms": 1000}, http.StatusOK, nil)

	_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, []string{"charge.succeeded", "payment_intent.succeeded", "payment_intent.created"}, waitForEvents(t, rcv, 3))
}

func TestWebhookFaultValidation(t *testing.T) {
	t.Parallel()
	f, _ := setupWithReceiver(t, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "meteor"}, http.StatusBadRequest, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "delay"}, http.StatusBadRequest, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "duplicate", "count": -1}, http.StatusBadRequest, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "duplicate", "path": "x"}, http.StatusBadRequest, nil)

	var armed stripesim.WebhookFault
	f.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "duplicate"}, http.StatusOK, &armed)
	require.Equal(t, stripesim.WebhookFault{Kind: stripesim.WebhookDuplicate, Count: 1}, armed)
	var listed []stripesim.WebhookFault
	f.control(t, http.MethodGet, "/_sim/webhook_faults", nil, http.StatusOK, &listed)
	require.Equal(t, []stripesim.WebhookFault{armed}, listed)
	f.sim.Reset()
	require.Empty(t, f.sim.WebhookFaults(), "reset forgets them")

	quiet := setup(t) // no webhook endpoint: nothing to garble
	quiet.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "duplicate"}, http.StatusBadRequest, nil)
}

// drop never sends the events it hits; with count 0 it hits every event
// from now on, until the webhook faults are cleared.
func TestWebhookFaultDropNeverSendsTheEvent(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	f.control(t, http.MethodPost, "/_sim/webhook_faults",
		map[string]any{"kind": "drop", "count": 1, "type": "charge.succeeded"}, http.StatusOK, nil)
	_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, []string{"payment_intent.created", "payment_intent.succeeded"}, waitForEvents(t, rcv, 2))
	require.Empty(t, f.sim.WebhookFaults(), "the fault's count is spent")

	var armed stripesim.WebhookFault
	f.control(t, http.MethodPost, "/_sim/webhook_faults", map[string]any{"kind": "drop", "count": 0}, http.StatusOK, &armed)
	require.Equal(t, stripesim.WebhookFault{Kind: stripesim.WebhookDrop, Forever: true}, armed)
	for range 3 {
		_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
		require.NoError(t, err)
	}
	require.Len(t, f.sim.WebhookFaults(), 1, "a drop with count 0 never wears out")

	f.control(t, http.MethodDelete, "/_sim/webhook_faults", nil, http.StatusOK, nil)
	_, err = f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	// Only the new payment's events arrive: the three before were dropped.
	require.Equal(t, []string{"payment_intent.created", "payment_intent.succeeded",
		"payment_intent.created", "charge.succeeded", "payment_intent.succeeded"}, waitForEvents(t, rcv, 5))
}

// A refund, however it was made, sends charge.refunded and refund.created,
// as Stripe does; refund.created carries the refund.
func TestRefundSendsChargeRefundedAndRefundCreated(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	waitForEvents(t, rcv, 3)
	re, err := f.stripe.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(300)})
	require.NoError(t, err)
	require.Equal(t, []string{"payment_intent.created", "charge.succeeded", "payment_intent.succeeded",
		"charge.refunded", "refund.created"}, waitForEvents(t, rcv, 5))
	rcv.mu.Lock()
	created := rcv.events[4]
	rcv.mu.Unlock()
	var sr stripe.Refund
	require.NoError(t, json.Unmarshal(created.Data.Raw, &sr))
	require.Equal(t, re.ID, sr.ID)
	require.EqualValues(t, 300, sr.Amount)
	require.Equal(t, pi.ID, sr.PaymentIntent.ID)
}
