package stripesim_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

func refundParams(pi string, amount int64, key string) *stripe.RefundParams {
	p := &stripe.RefundParams{PaymentIntent: stripe.String(pi)}
	if amount > 0 {
		p.Amount = stripe.Int64(amount)
	}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

func TestRefundsNeverExceedWhatWasCaptured(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)

	partial := refundParams(pi.ID, 500, "refund-1")
	partial.Reason = stripe.String("requested_by_customer")
	partial.AddMetadata("ticket", "T-1")
	first, err := f.stripe.Refunds.New(partial)
	require.NoError(t, err)
	require.EqualValues(t, 500, first.Amount)
	require.Equal(t, stripe.RefundStatusSucceeded, first.Status)
	require.Equal(t, pi.ID, first.PaymentIntent.ID)
	require.Equal(t, pi.LatestCharge.ID, first.Charge.ID)
	require.Equal(t, stripe.RefundReasonRequestedByCustomer, first.Reason)
	require.Equal(t, "T-1", first.Metadata["ticket"])

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 1501, "refund-2"))
	se := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge)
	require.Equal(t, "amount", se.Param)

	// Without an amount, the rest is refunded.
	rest, err := f.stripe.Refunds.New(refundParams(pi.ID, 0, "refund-3"))
	require.NoError(t, err)
	require.EqualValues(t, 1500, rest.Amount)

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 1, "refund-4"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeAlreadyRefunded)

	got, err := f.stripe.Refunds.Get(first.ID, nil)
	require.NoError(t, err)
	require.EqualValues(t, 500, got.Amount)

	charge := f.objects(t, "charge")[0]
	require.EqualValues(t, 2000, charge["amount_refunded"])
	require.Equal(t, true, charge["refunded"])
	require.Len(t, f.objects(t, "refund"), 2)
}

func TestRefundOfPartialCaptureIsCappedAtTheCapture(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(manualPaymentIntent(""))
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(1200)})
	require.NoError(t, err)

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 1201, ""))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge)
	re, err := f.stripe.Refunds.New(refundParams(pi.ID, 0, ""))
	require.NoError(t, err)
	require.EqualValues(t, 1200, re.Amount)
}

func TestRefundOfUncapturedPaymentIntentFails(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(manualPaymentIntent(""))
	require.NoError(t, err)

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 0, "refund-uncaptured"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeNotRefundable)

	// The answer depended on the payment intent's state, so it is stored:
	// capturing meanwhile does not change what the key says.
	_, err = f.stripe.PaymentIntents.Capture(pi.ID, nil)
	require.NoError(t, err)
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 0, "refund-uncaptured"))
	se := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeNotRefundable)
	require.True(t, replayed(se.LastResponse))

	_, err = f.stripe.Refunds.New(refundParams("pi_missing", 0, ""))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
}
