package stripesim_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/stripesim"
)

// Faults that answer before executing leave nothing behind: the retry with
// the same key executes for the first time.
func TestFaultsBeforeExecutingAreNotStored(t *testing.T) {
	t.Parallel()
	for kind, want := range map[stripesim.FaultKind]struct {
		status int
		typ    stripe.ErrorType
		code   stripe.ErrorCode
	}{
		stripesim.FaultError500:  {http.StatusInternalServerError, stripe.ErrorTypeAPI, ""},
		stripesim.FaultRateLimit: {http.StatusTooManyRequests, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeLockTimeout},
	} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: kind})

			_, err := f.stripe.PaymentIntents.New(paymentIntent("retry-me", "pm_card_visa"))
			requireStripeError(t, err, want.status, want.typ, want.code)
			require.Empty(t, f.objects(t, "payment_intent"))

			pi, err := f.stripe.PaymentIntents.New(paymentIntent("retry-me", "pm_card_visa"))
			require.NoError(t, err)
			require.False(t, replayed(pi.LastResponse))
			require.Len(t, f.objects(t, "payment_intent"), 1)
		})
	}
}

// Faults after executing lose the answer, not the work: the object exists
// once, and the retry with the same key returns it.
func TestLostAnswersAreReplayed(t *testing.T) {
	t.Parallel()
	for _, kind := range []stripesim.FaultKind{stripesim.FaultLostResponse, stripesim.FaultDropConnection} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: kind})

			_, err := newStripeOnFreshConnections(f.url, testKey).PaymentIntents.New(paymentIntent("lost", "pm_card_visa"))
			require.Error(t, err)
			var se *stripe.Error
			if kind == stripesim.FaultLostResponse {
				requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
			} else {
				require.False(t, errors.As(err, &se), "a dropped connection is a network error, not an answer: %v", err)
			}
			created := f.objects(t, "payment_intent")
			require.Len(t, created, 1)

			pi, err := f.stripe.PaymentIntents.New(paymentIntent("lost", "pm_card_visa"))
			require.NoError(t, err)
			require.True(t, replayed(pi.LastResponse))
			require.Equal(t, created[0]["id"], pi.ID)
			require.Len(t, f.objects(t, "payment_intent"), 1)

			recs := f.requests(t)
			require.Equal(t, kind, recs[0].Fault)
			require.True(t, recs[1].Replayed)
		})
	}
}

func TestLostDeclineIsReplayed(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultLostResponse})

	_, err := f.stripe.PaymentIntents.New(paymentIntent("lost-decline", "pm_card_chargeDeclinedInsufficientFunds"))
	requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")

	_, err = f.stripe.PaymentIntents.New(paymentIntent("lost-decline", "pm_card_chargeDeclinedInsufficientFunds"))
	se := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
	require.Equal(t, stripe.DeclineCodeInsufficientFunds, se.DeclineCode)
	require.True(t, replayed(se.LastResponse))
}

func TestDelayDoesNotHoldTheLock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	existing, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err)
	// Long enough that the two requests below are answered first even on a
	// loaded machine under the race detector (1 s was not: make test failed
	// on it once in CI's clean clone, and once in a helper's run).
	const delay = 5 * time.Second
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultDelay, DelayMS: int(delay / time.Millisecond)})

	start := time.Now()
	slow := make(chan error, 1)
	go func() {
		_, err := f.stripe.PaymentIntents.New(paymentIntent("slow", "pm_card_visa"))
		slow <- err
	}()
	eventually(t, func() bool { return len(f.requests(t)) == 2 }, "the slow request arrives")

	// Other requests are served while the slow one sleeps.
	_, err = f.stripe.PaymentIntents.Get(existing.ID, nil)
	require.NoError(t, err)
	_, err = f.stripe.PaymentIntents.New(paymentIntent("fast", "pm_card_visa"))
	require.NoError(t, err)
	select {
	case err := <-slow:
		t.Fatalf("the delayed request finished first: %v", err)
	default:
	}

	require.NoError(t, <-slow)
	require.GreaterOrEqual(t, time.Since(start), delay)
}

func TestFaultMatching(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/refunds", Kind: stripesim.FaultError500, Count: 2})
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "get", Kind: stripesim.FaultError500})

	pi, err := f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err, "a POST is not hit by a GET fault")

	for range 2 {
		_, err = f.stripe.Refunds.New(refundParams(pi.ID, 100, ""))
		requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	}
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 100, ""))
	require.NoError(t, err, "the refund fault hit its count")

	var armed []stripesim.Fault
	f.control(t, http.MethodGet, "/_sim/faults", nil, http.StatusOK, &armed)
	require.Equal(t, []stripesim.Fault{{PathPrefix: "/v1/payment_intents", Method: "GET", Kind: stripesim.FaultError500, Count: 1}}, armed)

	f.control(t, http.MethodDelete, "/_sim/faults", nil, http.StatusOK, nil)
	_, err = f.stripe.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)
}

// A stored 500 is Stripe's answer for the key from then on: the first
// request gets a 500, every retry with the key the same 500, replayed, and
// nothing is ever executed. Another key is not affected.
func TestStoredError500IsReplayedToEveryRetry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultStoredError500})

	_, err := f.stripe.PaymentIntents.New(paymentIntent("spent", "pm_card_visa"))
	first := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.False(t, replayed(first.LastResponse))

	for range 2 {
		_, err = f.stripe.PaymentIntents.New(paymentIntent("spent", "pm_card_visa"))
		again := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.True(t, replayed(again.LastResponse), "the stored 500 is replayed")
		require.Equal(t, first.Msg, again.Msg)
		require.Equal(t, first.RequestID, again.LastResponse.Header.Get("Original-Request"))
	}
	require.Empty(t, f.objects(t, "payment_intent"), "nothing was executed")

	pi, err := f.stripe.PaymentIntents.New(paymentIntent("another-key", "pm_card_visa"))
	require.NoError(t, err, "the fault hit its count; a new key executes")
	require.False(t, replayed(pi.LastResponse))
	require.Len(t, f.objects(t, "payment_intent"), 1)

	recs := f.requests(t)
	require.Len(t, recs, 4)
	require.Equal(t, stripesim.FaultStoredError500, recs[0].Fault)
	require.Equal(t, []bool{false, true, true, false}, []bool{recs[0].Replayed, recs[1].Replayed, recs[2].Replayed, recs[3].Replayed})
}

// A late 500 is a stored 500 whose request goes on executing: the client
// gets the 500 at once, and every retry with the key the same 500, replayed;
// the request's work (here a charged PaymentIntent) appears delay_ms later
// on the simulator's clock, as at a Stripe that answered 500 while the
// request was still being processed.
func TestLate500ExecutesAfterItsStored500(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addFault(t, stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultLate500, DelayMS: 30_000})

	_, err := f.stripe.PaymentIntents.New(paymentIntent("late", "pm_card_visa"))
	first := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.False(t, replayed(first.LastResponse))
	require.Empty(t, f.objects(t, "payment_intent"), "not yet")

	f.clock.Advance(29 * time.Second)
	_, err = f.stripe.PaymentIntents.New(paymentIntent("late", "pm_card_visa"))
	again := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.True(t, replayed(again.LastResponse), "the stored 500 is replayed")
	require.Empty(t, f.objects(t, "payment_intent"), "not yet")

	f.clock.Advance(time.Second)
	_, err = f.stripe.PaymentIntents.New(paymentIntent("late", "pm_card_visa"))
	again = requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.True(t, replayed(again.LastResponse), "the key keeps its 500 after the work is done")
	intents := f.objects(t, "payment_intent")
	require.Len(t, intents, 1, "the request executed late")
	require.Equal(t, "succeeded", intents[0]["status"])

	recs := f.requests(t)
	require.Len(t, recs, 3)
	require.Equal(t, stripesim.FaultLate500, recs[0].Fault)
}

// A fault with an idempotency key suffix hits only requests whose
// Idempotency-Key ends with it: "the next call of one step" of a service
// whose child keys end with the step's name, whatever else it sends first.
func TestFaultMatchingByIdempotencyKeySuffix(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.addFault(t, stripesim.Fault{IdempotencyKeySuffix: "-capture", Kind: stripesim.FaultError500})

	pi, err := f.stripe.PaymentIntents.New(paymentIntent("k1-payment_intent", "pm_card_visa"))
	require.NoError(t, err, "another key's suffix")
	_, err = f.stripe.PaymentIntents.New(paymentIntent("", "pm_card_visa"))
	require.NoError(t, err, "no key")
	_, err = f.stripe.PaymentIntents.New(paymentIntent("k1-capture-g1", "pm_card_visa"))
	require.NoError(t, err, "the suffix is the key's end")
	_, err = f.stripe.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)

	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 100, "k2-capture"))
	requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 100, "k2-capture"))
	require.NoError(t, err, "the fault hit its count")

	f.addFault(t, stripesim.Fault{IdempotencyKeySuffix: "-refund", PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultError500})
	_, err = f.stripe.Refunds.New(refundParams(pi.ID, 100, "k3-refund"))
	require.NoError(t, err, "both must match: the path is another")
	var armed []stripesim.Fault
	f.control(t, http.MethodGet, "/_sim/faults", nil, http.StatusOK, &armed)
	require.Equal(t, []stripesim.Fault{{IdempotencyKeySuffix: "-refund", PathPrefix: "/v1/payment_intents", Kind: stripesim.FaultError500, Count: 1}}, armed)
}
