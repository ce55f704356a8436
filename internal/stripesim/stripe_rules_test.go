package stripesim_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

// Issue 20, item 3: like Stripe, the simulator refuses a charge under its
// currency's minimum (400 amount_too_small, param amount) and a currency
// Stripe does not charge in (400 invalid_request_error, param currency).
// Both are validation: nothing is stored and the key stays free.
func TestChargeUnderTheMinimumOrInAnUnsupportedCurrencyIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)

	small := paymentIntent("limits-1", "pm_card_visa")
	small.Amount = stripe.Int64(49)
	_, err := f.stripe.PaymentIntents.New(small)
	se := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooSmall)
	require.Equal(t, "amount", se.Param)
	require.Contains(t, se.Msg, "0.50 usd")

	yen := paymentIntent("", "pm_card_visa")
	yen.Amount, yen.Currency = stripe.Int64(49), stripe.String("jpy")
	_, err = f.stripe.PaymentIntents.New(yen)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooSmall)

	odd := paymentIntent("limits-2", "pm_card_visa")
	odd.Currency = stripe.String("xyz")
	_, err = f.stripe.PaymentIntents.New(odd)
	var oddErr *stripe.Error
	require.ErrorAs(t, err, &oddErr)
	require.Equal(t, http.StatusBadRequest, oddErr.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeInvalidRequest, oddErr.Type)
	require.Equal(t, "currency", oddErr.Param)
	require.Empty(t, f.objects(t, "payment_intent"), "nothing was created")

	// The keys are free: the fixed requests execute.
	small.Amount = stripe.Int64(50)
	pi, err := f.stripe.PaymentIntents.New(small)
	require.NoError(t, err)
	require.False(t, replayed(pi.LastResponse))
	odd.Currency, odd.Amount = stripe.String("gbp"), stripe.Int64(30)
	pi, err = f.stripe.PaymentIntents.New(odd)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
}

// Issue 20, item 1: capturing part of an authorisation releases the rest,
// and Stripe counts the release in the charge's amount_refunded ("any
// additional amount is automatically refunded"), though no money went back
// to anyone. What may still be refunded is what was captured, less real
// refunds. Authorise 10,000, capture 4,000, refund 1,000: the charge shows
// 7,000 refunded, and 3,000 may still be refunded.
func TestPartialCaptureReleasesTheRestAsStripeCountsIt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	auth := manualPaymentIntent("")
	auth.Amount = stripe.Int64(10000)
	pi, err := f.stripe.PaymentIntents.New(auth)
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(4000)})
	require.NoError(t, err)
	requireCharge(t, f, 4000, 6000, false)

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 1000, ""))
	require.NoError(t, err)
	requireCharge(t, f, 4000, 7000, false)
	events := f.objects(t, "event")
	last := events[len(events)-2] // then refund.created
	require.Equal(t, "charge.refunded", last["type"])
	require.EqualValues(t, 7000, last["data"].(map[string]any)["object"].(map[string]any)["amount_refunded"],
		"charge.refunded reports the release in its total")

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 3001, ""))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge)
	re, err := f.stripe.Refunds.New(refundParams(pi.ID, 0, ""))
	require.NoError(t, err)
	require.EqualValues(t, 3000, re.Amount, "what is left is the capture less real refunds")
	requireCharge(t, f, 4000, 10000, true)
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 0, ""))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeAlreadyRefunded)
}

// Canceling an authorisation releases all of it: the uncaptured charge is
// refunded in full, as Stripe marks it.
func TestCancelReleasesTheWholeAuthorisation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(manualPaymentIntent(""))
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.Cancel(pi.ID, nil)
	require.NoError(t, err)
	requireCharge(t, f, 0, 2000, true)
}

// requireCharge checks the simulator's only charge.
func requireCharge(t *testing.T, f *fixture, captured, refunded int64, fully bool) {
	t.Helper()
	charges := f.objects(t, "charge")
	require.Len(t, charges, 1)
	raw, err := json.Marshal(charges[0])
	require.NoError(t, err)
	var ch stripe.Charge
	require.NoError(t, json.Unmarshal(raw, &ch))
	require.Equal(t, captured, ch.AmountCaptured)
	require.Equal(t, refunded, ch.AmountRefunded)
	require.Equal(t, fully, ch.Refunded)
}
