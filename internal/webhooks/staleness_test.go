package webhooks_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 14, item 8: the staleness marker (payments.stripe_event_at) must not
// let an event of one stream, or an event that could not apply, make a later
// delivered event that matters stale forever.

// A charge event (a refund made at Stripe's dashboard, after a capture the
// service has not recorded yet) is newer than the payment_intent.succeeded
// that is delivered after it. The two streams are about different things:
// the charge event must not make the PaymentIntent's stale.
func TestWebhook_aChargeEventDoesNotMakeAPaymentIntentEventStale(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().Unix()
	refunded := map[string]any{"id": "ch_w", "object": "charge", "amount": 2000, "amount_captured": 2000,
		"amount_refunded": 500, "refunded": false, "payment_intent": "pi_w", "metadata": map[string]string{"payment": "pay_w"}}
	status, _ := b.deliver(t, event("evt_refunded", "charge.refunded", now+2, refunded), secret, time.Now())
	require.Equal(t, http.StatusOK, status)

	status, out := b.deliver(t, event("evt_captured", "payment_intent.succeeded", now+1, intent("pi_w", "succeeded", 2000)), secret, time.Now())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "applied", out["outcome"])
	st, captured, _ := b.payment(t)
	require.Equal(t, "succeeded", st)
	require.EqualValues(t, 2000, captured)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.captured'"))
}

// The create flow of an authorisation (capture=false) has not recorded
// Stripe's answer yet, and Stripe's events arrive out of order: the
// PaymentIntent was canceled (at the dashboard) after it was authorised. The
// cancel, delivered first, is what the payment must end as: it may not be
// lost as "no change" while the older authorisation event then applies.
func TestWebhook_anEventThatArrivesBeforeThePaymentCanTakeItIsNotLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, unrecordIntent)
	require.NoError(t, err)
	now := time.Now().Unix()

	_, out := b.deliver(t, event("evt_canceled", "payment_intent.canceled", now+5, intent("pi_w", "canceled", 0)), secret, time.Now())
	require.Equal(t, "applied", out["outcome"])
	_, out = b.deliver(t, event("evt_auth", "payment_intent.amount_capturable_updated", now, intent("pi_w", "requires_capture", 0)), secret, time.Now())
	require.Equal(t, "stale", out["outcome"])

	st, _, _ := b.payment(t)
	require.Equal(t, "canceled", st)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))
}

// An event the service does not act on for this payment (an authorisation
// reported for a payment made with capture=true) is recorded as no change
// and leaves no mark: the older event that does apply still does.
func TestWebhook_anEventNotActedOnLeavesNoStalenessMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, unrecordIntent+"; UPDATE payments SET capture = true")
	require.NoError(t, err)
	now := time.Now().Unix()

	_, out := b.deliver(t, event("evt_auth", "payment_intent.amount_capturable_updated", now+5, intent("pi_w", "requires_capture", 0)), secret, time.Now())
	require.Equal(t, "no_change", out["outcome"])
	st, _, _ := b.payment(t)
	require.Equal(t, "processing", st, "capture=true: never requires_capture")

	_, out = b.deliver(t, event("evt_failed", "payment_intent.payment_failed", now, intent("pi_w", "requires_payment_method", 0)), secret, time.Now())
	require.Equal(t, "applied", out["outcome"])
	st, _, _ = b.payment(t)
	require.Equal(t, "failed", st)
}
