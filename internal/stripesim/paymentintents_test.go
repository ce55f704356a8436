package stripesim_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

func TestTestCards(t *testing.T) {
	t.Parallel()
	f := setup(t)

	for _, pm := range []string{"pm_card_visa", "pm_card_mastercard"} {
		t.Run(pm, func(t *testing.T) {
			t.Parallel()
			pi, err := f.stripe.PaymentIntents.New(paymentIntent("", pm))
			require.NoError(t, err)
			require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
			require.EqualValues(t, 2000, pi.AmountReceived)
			require.Equal(t, pm, pi.PaymentMethod.ID)
			require.NotEmpty(t, pi.LatestCharge.ID)
			require.False(t, pi.Livemode)
		})
	}

	declines := map[string]stripe.DeclineCode{
		"pm_card_chargeDeclined":                  stripe.DeclineCodeGenericDecline,
		"pm_card_chargeDeclinedInsufficientFunds": stripe.DeclineCodeInsufficientFunds,
		"pm_card_chargeDeclinedLostCard":          stripe.DeclineCodeLostCard,
	}
	for pm, declineCode := range declines {
		t.Run(pm, func(t *testing.T) {
			t.Parallel()
			_, err := f.stripe.PaymentIntents.New(paymentIntent("", pm))
			se := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
			require.Equal(t, declineCode, se.DeclineCode)
			require.NotEmpty(t, se.Msg)
			require.NotEmpty(t, se.ChargeID)

			var cardErr *stripe.CardError
			require.ErrorAs(t, err, &cardErr)
			require.Equal(t, declineCode, cardErr.DeclineCode)

			pi := se.PaymentIntent
			require.NotNil(t, pi)
			require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, pi.Status)
			require.Equal(t, declineCode, pi.LastPaymentError.DeclineCode)
			require.Equal(t, pm, pi.LastPaymentError.PaymentMethod.ID)

			stored, err := f.stripe.PaymentIntents.Get(pi.ID, nil)
			require.NoError(t, err)
			require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, stored.Status)
		})
	}

	t.Run("unknown payment method", func(t *testing.T) {
		t.Parallel()
		_, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_nonsense"))
		se := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		require.Equal(t, "payment_method", se.Param)
	})
}

func TestCreateWithoutConfirm(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := paymentIntent("", "pm_card_visa")
	p.Confirm = nil
	p.Description = stripe.String("order 42")
	p.AddMetadata("order_id", "42")

	pi, err := f.stripe.PaymentIntents.New(p)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresConfirmation, pi.Status)
	require.Nil(t, pi.LatestCharge)
	require.Equal(t, "order 42", pi.Description)
	require.Equal(t, map[string]string{"order_id": "42"}, pi.Metadata)
}

func TestManualCapture(t *testing.T) {
	t.Parallel()
	f := setup(t)

	pi, err := f.stripe.PaymentIntents.New(manualPaymentIntent(""))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
	require.EqualValues(t, 2000, pi.AmountCapturable)
	require.EqualValues(t, 0, pi.AmountReceived)

	_, err = f.stripe.PaymentIntents.Capture(pi.ID, withKey(&stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(2001)}, "cap-too-much"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge)

	captured, err := f.stripe.PaymentIntents.Capture(pi.ID, withKey(&stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(1500)}, "cap-1"))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, captured.Status)
	require.EqualValues(t, 1500, captured.AmountReceived)
	require.EqualValues(t, 0, captured.AmountCapturable)

	// Capturing twice is a state error, stored and replayed like any result.
	_, err = f.stripe.PaymentIntents.Capture(pi.ID, withKey(&stripe.PaymentIntentCaptureParams{}, "cap-2"))
	se := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, se.PaymentIntent.Status)
	_, err = f.stripe.PaymentIntents.Capture(pi.ID, withKey(&stripe.PaymentIntentCaptureParams{}, "cap-2"))
	se = requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	require.True(t, replayed(se.LastResponse))

	var charge map[string]any
	for _, ch := range f.objects(t, "charge") {
		charge = ch
	}
	require.Equal(t, true, charge["captured"])
	require.EqualValues(t, 1500, charge["amount_captured"])
}

func TestCaptureOfAutomaticPaymentIntentFails(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)

	_, err = f.stripe.PaymentIntents.Capture(pi.ID, nil)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)

	authorised, err := f.stripe.PaymentIntents.New(manualPaymentIntent(""))
	require.NoError(t, err)
	canceled, err := f.stripe.PaymentIntents.Cancel(authorised.ID, withKey(&stripe.PaymentIntentCancelParams{
		CancellationReason: stripe.String("requested_by_customer"),
	}, "cancel-1"))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, canceled.Status)
	require.Equal(t, stripe.PaymentIntentCancellationReasonRequestedByCustomer, canceled.CancellationReason)
	require.NotZero(t, canceled.CanceledAt)
	require.EqualValues(t, 0, canceled.AmountCapturable)

	_, err = f.stripe.PaymentIntents.Capture(authorised.ID, nil)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)

	succeeded, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.Cancel(succeeded.ID, nil)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
}

func TestMissingObjectsAre404(t *testing.T) {
	t.Parallel()
	f := setup(t)

	_, err := f.stripe.PaymentIntents.Get("pi_missing", nil)
	requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
	_, err = f.stripe.PaymentIntents.Capture("pi_missing", nil)
	requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
	_, err = f.stripe.Refunds.Get("re_missing", nil)
	requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
	_, err = f.stripe.Customers.Get("cus_missing", nil)
	requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
}

func TestCustomers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cus, err := f.stripe.Customers.New(&stripe.CustomerParams{Email: stripe.String("ada@example.com")})
	require.NoError(t, err)
	require.Regexp(t, `^cus_`, cus.ID)

	p := paymentIntent("", "pm_card_visa")
	p.Customer = stripe.String(cus.ID)
	pi, err := f.stripe.PaymentIntents.New(p)
	require.NoError(t, err)
	require.Equal(t, cus.ID, pi.Customer.ID)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	f := setup(t)

	for name, auth := range map[string]string{
		"missing": "",
		"live":    "Bearer sk_live_0123456789abcdef",
		"garbage": "Bearer nope",
	} {
		status, header, body := f.post(t, "/v1/customers", auth, "", "")
		require.Equal(t, http.StatusUnauthorized, status, name)
		require.NotEmpty(t, header.Get("Request-Id"))
		require.Equal(t, "invalid_request_error", body["error"].(map[string]any)["type"])
	}

	status, _, _ := f.post(t, "/v1/customers", "", "", "")
	require.Equal(t, http.StatusUnauthorized, status)
}

func TestRequestShapeErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const auth = "Bearer " + testKey

	status, header, body := f.post(t, "/v1/payment_intents", auth, "shape-1", "amount=2000&currency=usd&bogus=1")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "shape-1", header.Get("Idempotency-Key"))
	require.Equal(t, "parameter_unknown", body["error"].(map[string]any)["code"])

	status, _, body = f.post(t, "/v1/payment_intents", auth, "", "amount=twenty&currency=usd")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "parameter_invalid_integer", body["error"].(map[string]any)["code"])

	status, _, body = f.post(t, "/v1/payment_intents/pi_x/refund", auth, "", "")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body["error"].(map[string]any)["message"], "Unrecognized request URL")
}
