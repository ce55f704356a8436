package stripesim_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/stripesim"
)

// openAt serves a simulator made by Open on path.
func openAt(t *testing.T, path string, clk *clocktest.Clock) *fixture {
	t.Helper()
	sim, err := stripesim.Open(stripesim.Config{Now: clk.Now}, path)
	require.NoError(t, err)
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() {
		srv.Close()
		sim.Close()
	})
	return &fixture{sim: sim, url: srv.URL, stripe: newStripe(srv.URL, testKey), clock: clk}
}

// A simulator opened on the file of an earlier one knows what the earlier
// one answered: its objects, its idempotency keys (replayed, not executed
// again), and the changes still to come. The earlier one is never closed:
// what it answered was written before the answer, as a crash (SIGKILL)
// would leave it.
func TestOpen_keepsTheStateAcrossARestartAndACrash(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stripesim.json")
	clk := clocktest.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	first := openAt(t, path, clk)

	paid, err := first.stripe.PaymentIntents.New(paymentIntent("paid", "pm_card_visa"))
	require.NoError(t, err)
	authorised, err := first.stripe.PaymentIntents.New(manualPaymentIntent("authorised"))
	require.NoError(t, err)
	partly, err := first.stripe.PaymentIntents.New(manualPaymentIntent("partly"))
	require.NoError(t, err)
	_, err = first.stripe.PaymentIntents.Capture(partly.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(1500)})
	require.NoError(t, err)
	pendingPI, err := first.stripe.PaymentIntents.New(paymentIntent("pending", "pm_card_pendingRefund"))
	require.NoError(t, err)
	pending, err := first.stripe.Refunds.New(refundParams(pendingPI.ID, 0, "pending-refund"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusPending, pending.Status)
	_, err = first.stripe.PaymentIntents.New(paymentIntent("declined", "pm_card_chargeDeclined"))
	require.Error(t, err)
	first.sim.Advance(time.Minute) // the pending refund settles; the second keeps the clock's offset
	objectsBefore := first.objects(t, "payment_intent")

	second := openAt(t, path, clk)
	require.Equal(t, objectsBefore, second.objects(t, "payment_intent"), "every payment intent, as it was")
	require.Len(t, second.objects(t, "event"), len(first.objects(t, "event")))

	// A refund of a payment of the earlier run.
	re, err := second.stripe.Refunds.New(refundParams(paid.ID, 500, "refund-after-restart"))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, re.Status)
	// What a partial capture released is still not refundable.
	_, err = second.stripe.Refunds.New(refundParams(partly.ID, 1501, ""))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge)
	got, err := second.stripe.Refunds.Get(pending.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, got.Status)

	// Keys replay what the earlier run answered, a decline too.
	again, err := second.stripe.PaymentIntents.New(paymentIntent("paid", "pm_card_visa"))
	require.NoError(t, err)
	require.True(t, replayed(again.LastResponse))
	require.Equal(t, paid.ID, again.ID)
	_, err = second.stripe.PaymentIntents.New(paymentIntent("declined", "pm_card_chargeDeclined"))
	se := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
	require.Equal(t, "true", se.LastResponse.Header.Get("Idempotent-Replayed"))
	_, err = second.stripe.PaymentIntents.New(withKey(paymentIntent("", "pm_card_mastercard"), "paid"))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")

	// The authorisation still expires 7 days after it was made.
	second.sim.Advance(7*24*time.Hour - 2*time.Minute)
	pi, err := second.stripe.PaymentIntents.Get(authorised.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
	second.sim.Advance(2 * time.Minute)
	pi, err = second.stripe.PaymentIntents.Get(authorised.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, pi.Status)

	// And a third run sees the second's changes.
	second.sim.Close()
	third := openAt(t, path, clk)
	refunds := third.objects(t, "refund")
	require.Len(t, refunds, 2)
	require.Equal(t, re.ID, refunds[1]["id"])
}

// A pending refund whose later outcome was due while no simulator ran
// settles when the next one starts.
func TestOpen_aChangeDueWhileDownHappensAfterTheStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stripesim.json")
	clk := clocktest.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	first := openAt(t, path, clk)
	pi, err := first.stripe.PaymentIntents.New(paymentIntent("", "pm_card_refundFail"))
	require.NoError(t, err)
	re, err := first.stripe.Refunds.New(refundParams(pi.ID, 0, ""))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, re.Status, "it fails later")
	first.sim.Close()

	clk.Advance(time.Hour)
	leftover := filepath.Join(filepath.Dir(path), ".stripesim.json.123.tmp") // a write a crash cut short
	require.NoError(t, os.WriteFile(leftover, []byte(`{"vers`), 0o600))
	second := openAt(t, path, clk)
	require.NoFileExists(t, leftover)
	got, err := second.stripe.Refunds.Get(re.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusFailed, got.Status)
	require.EqualValues(t, 0, second.chargeOf(t, pi.ID)["amount_refunded"])
}

// A file that is not a state file stops the start, with what to do.
func TestOpen_refusesAFileItCannotRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stripesim.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"version": 99}`), 0o600))
	_, err := stripesim.Open(stripesim.Config{}, path)
	require.ErrorContains(t, err, "version 99")
	require.ErrorContains(t, err, "move it away")
}

// A dispute still to come when the simulator stopped opens after the next
// one starts, and a dispute opened before is kept: a restarted dev's
// pm_card_createDispute payments are disputed as Stripe's would be.
func TestOpen_keepsDisputesAndOpensThoseStillToCome(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stripesim.json")
	clk := clocktest.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	first := openAt(t, path, clk)
	early, err := first.stripe.PaymentIntents.New(paymentIntent("early", "pm_card_createDispute"))
	require.NoError(t, err)
	first.sim.Advance(time.Minute) // its dispute opens
	require.Len(t, first.objects(t, "dispute"), 1)
	late, err := first.stripe.PaymentIntents.New(paymentIntent("late", "pm_card_createDispute"))
	require.NoError(t, err)
	first.sim.Close() // before late's dispute opens

	clk.Advance(time.Hour)
	second := openAt(t, path, clk)
	second.sim.Advance(time.Second) // what fell due while it was down
	disputes := second.objects(t, "dispute")
	require.Len(t, disputes, 2, "the kept dispute and the one still to come")
	var pis []string
	for _, d := range disputes {
		pis = append(pis, d["payment_intent"].(string))
	}
	require.ElementsMatch(t, []string{early.ID, late.ID}, pis)

	// Stripe's event log lists the earlier run's events too.
	it := second.stripe.Events.List(&stripe.EventListParams{Type: stripe.String("charge.dispute.created")})
	n := 0
	for it.Next() {
		n++
	}
	require.NoError(t, it.Err())
	require.Equal(t, 2, n, "each dispute's charge.dispute.created, the one made before the restart included")
}
