package stripesim_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/stripesim"
)

func TestAuthenticationRequiredWaitsForTheCustomer(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)

	pi, err := f.stripe.PaymentIntents.New(paymentIntent("3ds-1", "pm_card_authenticationRequired"))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresAction, pi.Status)
	require.NotNil(t, pi.NextAction)
	require.Equal(t, stripe.PaymentIntentNextActionTypeUseStripeSDK, pi.NextAction.Type)
	require.Nil(t, pi.LatestCharge, "nothing reached the issuer before the customer authenticated")
	require.Zero(t, pi.AmountCapturable)

	_, err = f.stripe.PaymentIntents.Capture(pi.ID, nil)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	canceled, err := f.stripe.PaymentIntents.Cancel(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, canceled.Status)
	require.Nil(t, canceled.NextAction)

	require.Equal(t, []string{"payment_intent.created", "payment_intent.requires_action", "payment_intent.canceled"},
		waitForEvents(t, rcv, 3))
	require.Empty(t, f.objects(t, "charge"))
}

func TestAuthenticationRequiredWithErrorOnRequiresActionIs402(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := manualPaymentIntent("3ds-err")
	p.PaymentMethod = stripe.String("pm_card_authenticationRequired")
	p.ErrorOnRequiresAction = stripe.Bool(true)

	_, err := f.stripe.PaymentIntents.New(p)
	se := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeAuthenticationRequired)
	require.EqualValues(t, "authentication_required", se.DeclineCode)
	require.NotNil(t, se.PaymentIntent)
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, se.PaymentIntent.Status)

	// Stored like a decline: the key answers it again.
	_, err = f.stripe.PaymentIntents.New(p)
	se = requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeAuthenticationRequired)
	require.True(t, replayed(se.LastResponse))

	pis := f.objects(t, "payment_intent")
	require.Len(t, pis, 1)
	require.Equal(t, "requires_payment_method", pis[0]["status"])
	require.Nil(t, pis[0]["next_action"])
	require.NotNil(t, pis[0]["last_payment_error"])
	_, err = f.stripe.PaymentIntents.Capture(se.PaymentIntent.ID, nil)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)

	// error_on_requires_action changes nothing for a card that needs no authentication.
	visa := paymentIntent("visa-err", "pm_card_visa")
	visa.ErrorOnRequiresAction = stripe.Bool(true)
	ok, err := f.stripe.PaymentIntents.New(visa)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, ok.Status)
}

// chargeOf is the simulator's charge of a payment intent.
func (f *fixture) chargeOf(t *testing.T, pi string) map[string]any {
	t.Helper()
	for _, ch := range f.objects(t, "charge") {
		if ch["payment_intent"] == pi {
			return ch
		}
	}
	require.FailNow(t, "no charge for "+pi)
	return nil
}

func TestPendingRefundSettlesLater(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_pendingRefund"))
	require.NoError(t, err)
	waitForEvents(t, rcv, 3)

	re, err := f.stripe.Refunds.New(refundParams(pi.ID, 500, "pending-1"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusPending, re.Status)
	require.EqualValues(t, 500, f.chargeOf(t, pi.ID)["amount_refunded"], "a pending refund counts, as at Stripe")

	f.sim.Advance(time.Second)
	got, err := f.stripe.Refunds.Get(re.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusPending, got.Status, "not yet")

	f.control(t, http.MethodPost, "/_sim/advance", map[string]any{"seconds": 1}, http.StatusOK, nil)
	got, err = f.stripe.Refunds.Get(re.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, got.Status)
	require.EqualValues(t, 500, f.chargeOf(t, pi.ID)["amount_refunded"])

	types := waitForEvents(t, rcv, 6)
	require.Equal(t, []string{"charge.refunded", "refund.created", "charge.refund.updated"}, types[3:])
	rcv.mu.Lock()
	updated := rcv.events[5]
	rcv.mu.Unlock()
	require.Equal(t, re.ID, updated.Data.Object["id"])
	require.Equal(t, "succeeded", updated.Data.Object["status"])
	require.Nil(t, updated.Data.Object["failure_reason"])
	require.Empty(t, updated.Request.ID, "no request made this change")
	require.Equal(t, f.clock.Now().Add(2*time.Second).Unix(), updated.Created, "it happened on the simulator's clock")
}

func TestRefundFailsAfterSucceeding(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_refundFail"))
	require.NoError(t, err)

	re, err := f.stripe.Refunds.New(refundParams(pi.ID, 0, "fail-1"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, re.Status)
	require.EqualValues(t, 2000, re.Amount)
	ch := f.chargeOf(t, pi.ID)
	require.EqualValues(t, 2000, ch["amount_refunded"])
	require.Equal(t, true, ch["refunded"])
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 0, "fail-2"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeAlreadyRefunded)

	f.sim.Advance(2 * time.Second)
	got, err := f.stripe.Refunds.Get(re.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusFailed, got.Status)
	require.Equal(t, stripe.RefundFailureReasonExpiredOrCanceledCard, got.FailureReason)
	ch = f.chargeOf(t, pi.ID)
	require.EqualValues(t, 0, ch["amount_refunded"], "the failed refund's amount is back on the charge")
	require.Equal(t, false, ch["refunded"])

	// That amount may be refunded again; the new refund fails later too.
	again, err := f.stripe.Refunds.New(refundParams(pi.ID, 2000, "fail-3"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, again.Status)

	types := waitForEvents(t, rcv, 8)
	require.Equal(t, []string{"charge.refunded", "refund.created", "charge.refund.updated", "charge.refunded", "refund.created"}, types[3:8])
	// The replay of the first refund's key is the answer it had then.
	replay, err := f.stripe.Refunds.New(refundParams(pi.ID, 0, "fail-1"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, replay.Status)
	require.True(t, replayed(replay.LastResponse))
}

// Nobody calls the simulator: the wall-clock timer applies the change and
// sends its webhook.
func TestLaterChangesHappenOnTheWallClockToo(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, nil)
	f := setup(t, func(c *stripesim.Config) {
		c.Now = nil // the real clock
		c.WebhookURL = rcv.url
		c.WebhookSecret = webhookSecret
	})
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_pendingRefund"))
	require.NoError(t, err)
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 0, ""))
	require.NoError(t, err)

	eventually(t, func() bool {
		types, _, _ := rcv.received()
		return len(types) == 6 && types[5] == "charge.refund.updated"
	}, "charge.refund.updated sent about two seconds later")
}

func TestAdvanceRejectsNonsense(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, body := range []any{map[string]any{}, map[string]any{"seconds": -1}, map[string]any{"seconds": "2"},
		map[string]any{"seconds": 1, "minutes": 1}} {
		f.control(t, http.MethodPost, "/_sim/advance", body, http.StatusBadRequest, nil)
	}
	var out struct{ Now int64 }
	f.control(t, http.MethodPost, "/_sim/advance", map[string]any{"seconds": 86400}, http.StatusOK, &out)
	require.Equal(t, f.clock.Now().Add(24*time.Hour).Unix(), out.Now)
}

// A day on the simulator's clock is a day for its idempotency keys too.
func TestAdvanceExpiresIdempotencyKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first, err := f.stripe.Customers.New(withKey(&stripe.CustomerParams{}, "cus-key"))
	require.NoError(t, err)
	f.sim.Advance(25 * time.Hour)
	second, err := f.stripe.Customers.New(withKey(&stripe.CustomerParams{}, "cus-key"))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, second.ID)
}

// An authorisation nobody captures is canceled by Stripe after 7 days.
func TestUncapturedAuthorisationExpiresAfterSevenDays(t *testing.T) {
	t.Parallel()
	f, rcv := setupWithReceiver(t, nil)
	expiring, err := f.stripe.PaymentIntents.New(manualPaymentIntent("auth-1"))
	require.NoError(t, err)
	captured, err := f.stripe.PaymentIntents.New(manualPaymentIntent("auth-2"))
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.Capture(captured.ID, nil)
	require.NoError(t, err)

	f.control(t, http.MethodPost, "/_sim/advance", map[string]any{"seconds": 7*24*3600 - 1}, http.StatusOK, nil)
	got, err := f.stripe.PaymentIntents.Get(expiring.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, got.Status)

	f.sim.Advance(time.Hour) // past it: the cancel says when it happened
	got, err = f.stripe.PaymentIntents.Get(expiring.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, got.Status)
	require.Equal(t, f.clock.Now().Add(7*24*time.Hour).Unix(), got.CanceledAt)
	require.Equal(t, stripe.PaymentIntentCancellationReasonAutomatic, got.CancellationReason)
	require.Zero(t, got.AmountCapturable)
	got, err = f.stripe.PaymentIntents.Get(captured.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status, "a captured payment stays captured")

	types := waitForEvents(t, rcv, 9)
	require.Equal(t, "payment_intent.canceled", types[8])
}

// Config.AuthorisationLifetime shortens the 7 days, for chaos runs.
func TestAuthorisationLifetimeIsConfigurable(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *stripesim.Config) { c.AuthorisationLifetime = time.Minute })
	pi, err := f.stripe.PaymentIntents.New(manualPaymentIntent("auth-short"))
	require.NoError(t, err)
	f.sim.Advance(time.Minute - time.Second)
	got, err := f.stripe.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, got.Status)
	f.sim.Advance(time.Second)
	got, err = f.stripe.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, got.Status)
	require.Equal(t, stripe.PaymentIntentCancellationReasonAutomatic, got.CancellationReason)
}
