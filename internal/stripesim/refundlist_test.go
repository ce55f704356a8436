package stripesim_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

// GET /v1/refunds lists a payment intent's refunds, newest first, across
// pages (stripe-go follows starting_after), and nobody else's.
func TestListRefundsOfAPaymentIntent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	other, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	var made []string
	for range 3 {
		re, err := f.stripe.Refunds.New(refundParams(pi.ID, 100, ""))
		require.NoError(t, err)
		made = append([]string{re.ID}, made...)
	}
	_, err = f.stripe.Refunds.New(refundParams(other.ID, 100, ""))
	require.NoError(t, err)

	params := &stripe.RefundListParams{PaymentIntent: stripe.String(pi.ID)}
	params.Limit = stripe.Int64(2)
	var listed []string
	it := f.stripe.Refunds.List(params)
	for it.Next() {
		listed = append(listed, it.Refund().ID)
	}
	require.NoError(t, it.Err())
	require.Equal(t, made, listed)
}
