package stripesim_test

import (
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
