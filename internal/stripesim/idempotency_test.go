package stripesim_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/stripesim"
)

func TestReplayReturnsTheSameObject(t *testing.T) {
	t.Parallel()
	f := setup(t)

	first, err := f.stripe.PaymentIntents.New(paymentIntent("replay-1", "pm_card_visa"))
	require.NoError(t, err)
	require.False(t, replayed(first.LastResponse))

	second, err := f.stripe.PaymentIntents.New(paymentIntent("replay-1", "pm_card_visa"))
	require.NoError(t, err)
	require.True(t, replayed(second.LastResponse))
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, "replay-1", second.LastResponse.IdempotencyKey)
	require.Len(t, f.objects(t, "payment_intent"), 1)

	recs := f.requests(t)
	require.Len(t, recs, 2)
	require.Equal(t, []bool{false, true}, []bool{recs[0].Replayed, recs[1].Replayed})
	require.Equal(t, "replay-1", recs[1].IdempotencyKey)
}

func TestDeclineIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	f := setup(t)

	_, err := f.stripe.PaymentIntents.New(paymentIntent("decline-1", "pm_card_chargeDeclined"))
	first := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)

	_, err = f.stripe.PaymentIntents.New(paymentIntent("decline-1", "pm_card_chargeDeclined"))
	second := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
	require.Equal(t, first.PaymentIntent.ID, second.PaymentIntent.ID)
	require.True(t, replayed(second.LastResponse))
	require.Len(t, f.objects(t, "payment_intent"), 1)
}

func TestSameKeyWithOtherParametersIsAnIdempotencyError(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.stripe.PaymentIntents.New(paymentIntent("mismatch-1", "pm_card_visa"))
	require.NoError(t, err)

	other := paymentIntent("mismatch-1", "pm_card_visa")
	other.Amount = stripe.Int64(2001)
	_, err = f.stripe.PaymentIntents.New(other)
	se := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
	require.Contains(t, se.Msg, "same parameters")

	_, err = f.stripe.Customers.New(withKey(&stripe.CustomerParams{}, "mismatch-1"))
	se = requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
	require.Contains(t, se.Msg, "same endpoint")
	require.Len(t, f.objects(t, "payment_intent"), 1)
}

func TestParameterOrderDoesNotMatter(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const auth = "Bearer " + testKey

	status, _, first := f.post(t, "/v1/customers", auth, "order-1", "email=a%40example.com&name=Ada&metadata[x]=1")
	require.Equal(t, http.StatusOK, status)
	status, header, second := f.post(t, "/v1/customers", auth, "order-1", "metadata[x]=1&name=Ada&email=a%40example.com")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "true", header.Get("Idempotent-Replayed"))
	require.Equal(t, first["id"], second["id"])
}

func TestValidationErrorsAreNotStored(t *testing.T) {
	t.Parallel()
	f := setup(t)

	bad := paymentIntent("fix-me", "pm_card_visa")
	bad.Currency = nil
	_, err := f.stripe.PaymentIntents.New(bad)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterMissing)

	_, err = f.stripe.PaymentIntents.New(paymentIntent("fix-me", "pm_card_unknown"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)

	pi, err := f.stripe.PaymentIntents.New(paymentIntent("fix-me", "pm_card_visa"))
	require.NoError(t, err)
	require.False(t, replayed(pi.LastResponse))
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
}

func TestKeysAreScopedByAPIKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	other := newStripe(f.url, "sk_test_another_account")

	a, err := f.stripe.PaymentIntents.New(paymentIntent("shared-key", "pm_card_visa"))
	require.NoError(t, err)
	b, err := other.PaymentIntents.New(paymentIntent("shared-key", "pm_card_mastercard"))
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID)
	require.False(t, replayed(b.LastResponse))
}

func TestKeysAreKeptFor24Hours(t *testing.T) {
	t.Parallel()
	f := setup(t)

	first, err := f.stripe.PaymentIntents.New(paymentIntent("day-old", "pm_card_visa"))
	require.NoError(t, err)

	f.clock.Advance(24*time.Hour - time.Second)
	again, err := f.stripe.PaymentIntents.New(paymentIntent("day-old", "pm_card_visa"))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.True(t, replayed(again.LastResponse))

	f.clock.Advance(time.Second)
	fresh, err := f.stripe.PaymentIntents.New(paymentIntent("day-old", "pm_card_visa"))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, fresh.ID)
	require.False(t, replayed(fresh.LastResponse))
}

func TestConcurrentRequestsWithOneKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// Every request is held for a second after claiming the key, so all of
	// them arrive while the first one runs.
	const n = 5
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultDelay, DelayMS: 1000, Count: n})

	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = f.stripe.PaymentIntents.New(paymentIntent("together", "pm_card_visa"))
		})
	}
	wg.Wait()

	succeeded := 0
	for _, err := range errs {
		if err == nil {
			succeeded++
			continue
		}
		requireStripeError(t, err, http.StatusConflict, stripe.ErrorTypeIdempotency, stripe.ErrorCodeIdempotencyKeyInUse)
	}
	require.Equal(t, 1, succeeded)
	require.Len(t, f.objects(t, "payment_intent"), 1)

	// Once the first has finished, the key replays.
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("together", "pm_card_visa"))
	require.NoError(t, err)
	require.True(t, replayed(pi.LastResponse))
}

func TestKeysAreIgnoredOnGet(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pi, err := f.stripe.PaymentIntents.New(paymentIntent("get-key", "pm_card_visa"))
	require.NoError(t, err)

	get := &stripe.PaymentIntentParams{}
	get.SetIdempotencyKey("get-key")
	got, err := f.stripe.PaymentIntents.Get(pi.ID, get)
	require.NoError(t, err)
	require.Equal(t, pi.ID, got.ID)
	require.False(t, replayed(got.LastResponse))
}
