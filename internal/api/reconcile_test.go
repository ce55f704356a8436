package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/stripesim"
)

// Tests of the reconciler and of refunds made outside the service (docs/API.md
// section 2: "The service's records converge to Stripe's without any
// webhook", and refunds of origin external). docs/failure-scenarios.md
// names them.

// reconciler is a reconciler over the bundle's service whose clock is an
// hour ahead, so that everything Stripe could still change is due; each
// round moves the clock a day on, past every back-off.
type testReconciler struct {
	*payments.Reconciler
	mu  sync.Mutex
	now time.Time
}

func (b *testBundle) reconciler() *testReconciler {
	r := &testReconciler{now: time.Now().Add(time.Hour)}
	r.Reconciler = b.payments.NewReconciler(payments.ReconcilerConfig{After: time.Minute, Rate: 1000, Now: func() time.Time {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.now
	}})
	return r
}

// round moves the reconciler's clock past every back-off and makes one pass.
func (r *testReconciler) round(t *testing.T) payments.ReconcileRun {
	t.Helper()
	r.mu.Lock()
	r.now = r.now.Add(24 * time.Hour)
	r.mu.Unlock()
	run, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	return run
}

// dashboardRefund refunds amount of the PaymentIntent at Stripe directly,
// as Stripe's dashboard would: no metadata of ours. It returns Stripe's id.
func (b *testBundle) dashboardRefund(t *testing.T, intent string, amount int64) string {
	t.Helper()
	form := url.Values{"payment_intent": {intent}, "amount": {strconv.FormatInt(amount, 10)}}
	req := httptest.NewRequest(http.MethodPost, "/v1/refunds", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer sk_test_dashboard")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	b.sim.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var re struct{ ID string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &re))
	return re.ID
}

// refundsOf lists a payment's refunds as the API shows them, oldest first.
func (b *testBundle) refundsOf(t *testing.T, paymentID string) []refundJSON {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT id FROM refunds WHERE payment_id = $1 ORDER BY created_at, id", paymentID)
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	out := make([]refundJSON, 0, len(ids))
	for _, id := range ids {
		out = append(out, b.getRefund(t, aliceKey, id))
	}
	return out
}

// dropWebhooks waits until every event the simulator made so far was
// received (a webhook in flight holds its payment's row lock, and the
// reconciler skips locked payments), then makes the simulator send no
// webhook from now on.
func (b *testBundle) dropWebhooks(t *testing.T) {
	t.Helper()
	b.webhooksReceived(t)
	require.NoError(t, b.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookDrop}))
}

// webhooksReceived waits until every event the simulator made so far was
// received.
func (b *testBundle) webhooksReceived(t *testing.T) {
	t.Helper()
	requireEventually(t, "every webhook is received", func() bool {
		events, err := b.sim.Objects("event")
		require.NoError(t, err)
		return b.count(t, "SELECT count(*) FROM stripe_events") == len(events)
	})
}

// requireOneExternalRefund checks that the payment shows the dashboard's
// refund once: one refund of origin external, succeeded, counted once in
// amount_refunded, announced once.
func (b *testBundle) requireOneExternalRefund(t *testing.T, paymentID, stripeRefund string, amount int64) {
	t.Helper()
	refunds := b.refundsOf(t, paymentID)
	require.Len(t, refunds, 1)
	re := refunds[0]
	require.Equal(t, "external", re.Origin)
	require.Equal(t, "succeeded", re.Status)
	require.Equal(t, amount, re.Amount)
	require.Equal(t, stripeRefund, *re.StripeRefund)
	require.Equal(t, amount, b.getPayment(t, aliceKey, paymentID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, re.ID))
}

// A refund made in Stripe's dashboard: its refund.created webhook makes it
// a refund of origin external, counted in amount_refunded; a reconciler
// pass after it finds nothing more to do.
func TestReconcile_aDashboardRefundLearnedByWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	sr := b.dashboardRefund(t, *pay.StripePaymentIntent, 700)

	requireEventually(t, "the webhook shows the refund", func() bool { return b.getPayment(t, aliceKey, pay.ID).AmountRefunded == 700 })
	b.requireOneExternalRefund(t, pay.ID, sr, 700)
	b.webhooksReceived(t)

	run := b.reconciler().round(t)
	require.Equal(t, 1, run.Checked)
	require.Zero(t, run.Corrected)
	b.requireOneExternalRefund(t, pay.ID, sr, 700)

	// What is left to refund counts it: 1300, not 2000.
	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 1301))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
	require.Equal(t, "api", b.refund(t, aliceKey, "refund-2", refundBody(pay.ID, 1300)).Origin)
	require.EqualValues(t, 2000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}

// The same refund with every webhook lost: the reconciler's list of the
// PaymentIntent's refunds shows it.
func TestReconcile_aDashboardRefundLearnedByTheReconciler(t *testing.T) {
	t.Parallel()
	b := setup(t) // no webhooks at all
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	mine := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 300))
	sr := b.dashboardRefund(t, *pay.StripePaymentIntent, 700)
	require.EqualValues(t, 300, b.getPayment(t, aliceKey, pay.ID).AmountRefunded, "nobody told us yet")

	r := b.reconciler()
	run := r.round(t)
	require.Equal(t, payments.ReconcileRun{Claimed: 1, Checked: 1, Corrected: 1}, run)
	refunds := b.refundsOf(t, pay.ID)
	require.Len(t, refunds, 2, "ours and the dashboard's")
	require.Equal(t, mine.ID, refunds[0].ID)
	require.Equal(t, "api", refunds[0].Origin, "a refund our flow made is never taken for an external one")
	require.Equal(t, "external", refunds[1].Origin)
	require.Equal(t, sr, *refunds[1].StripeRefund)
	require.EqualValues(t, 1000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, refunds[1].ID))

	run = r.round(t)
	require.Zero(t, run.Corrected, "nothing new")
	require.Len(t, b.refundsOf(t, pay.ID), 2)
	require.EqualValues(t, 1000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}

// Both learn of it: the reconciler first (the webhook is held back), then
// the webhook, which finds the reconciler's refund. One refund, one event,
// counted once.
func TestReconcile_aDashboardRefundLearnedByBoth(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.NoError(t, b.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookReorder, Type: "refund.created"}))
	sr := b.dashboardRefund(t, *pay.StripePaymentIntent, 700)
	requireEventually(t, "charge.refunded is received", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'charge.refunded'") == 1
	})

	require.Equal(t, 1, b.reconciler().round(t).Corrected)
	b.requireOneExternalRefund(t, pay.ID, sr, 700)

	b.sim.ClearWebhookFaults() // sends the held refund.created
	requireEventually(t, "the webhook arrives", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'refund.created'") == 1
	})
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'refund.created' AND outcome = 'no_change'"))
	b.requireOneExternalRefund(t, pay.ID, sr, 700)
}

// Stripe cancels an authorisation nobody captured within 7 days, and its
// payment_intent.canceled is lost: the reconciler reads the PaymentIntent,
// and the payment is canceled, with its one payment.canceled event.
func TestReconcile_aLapsedAuthorisationWhoseWebhookWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	require.Equal(t, "requires_capture", auth.Status)
	b.dropWebhooks(t)

	b.sim.Advance(7*24*time.Hour + time.Minute)
	require.Equal(t, "canceled", b.simIntentsFor(t, auth.ID)[0].Status)
	require.Equal(t, "requires_capture", b.getPayment(t, aliceKey, auth.ID).Status, "nobody told us")

	r := b.reconciler()
	require.Equal(t, payments.ReconcileRun{Claimed: 1, Checked: 1, Corrected: 1}, r.round(t))
	require.Equal(t, "canceled", b.getPayment(t, aliceKey, auth.ID).Status)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))
	require.Zero(t, r.round(t).Claimed, "a canceled payment is not asked about again")
}

// A refund Stripe answered succeeded fails later, and its
// charge.refund.updated is lost: the reconciler gives the amount back.
func TestReconcile_aRefundThatFailedLaterWhoseWebhookWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_refundFail"}`)
	re := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 1500))
	require.Equal(t, "succeeded", re.Status)
	b.dropWebhooks(t)

	b.sim.Advance(2 * time.Second) // Stripe fails it; nobody hears
	require.Equal(t, "succeeded", b.getRefund(t, aliceKey, re.ID).Status)

	run := b.reconciler().round(t)
	require.Equal(t, 1, run.Corrected)
	failed := b.getRefund(t, aliceKey, re.ID)
	require.Equal(t, "failed", failed.Status)
	require.Equal(t, "expired_or_canceled_card", *failed.FailureReason)
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded, "the amount is given back")
	require.Equal(t, []string{"refund.succeeded", "refund.failed"}, b.refundEvents(t, re.ID))
}

// Two reconcilers running at once (two worker processes) share the due
// payments: each PaymentIntent is read once in the round.
func TestReconcile_twoReconcilersReadEachPaymentOnceARound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 12
	intents := make([]string, n)
	for i := range n {
		intents[i] = *b.createPayment(t, aliceKey, "auth-"+strconv.Itoa(i), authoriseBody).StripePaymentIntent
	}
	first, second := b.reconciler(), b.reconciler()
	second.now = first.now

	var wg sync.WaitGroup
	runs := make([]payments.ReconcileRun, 2)
	for i, r := range []*testReconciler{first, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = r.round(t)
		}()
	}
	wg.Wait()
	require.Equal(t, n, runs[0].Claimed+runs[1].Claimed, "%+v", runs)
	require.Equal(t, n, runs[0].Checked+runs[1].Checked)
	for _, pi := range intents {
		require.Len(t, b.simRequests(http.MethodGet, "/v1/payment_intents/"+pi), 1, "read once: %s", pi)
	}
}

// Stripe answers 429: the pass stops at once, without an error, and the
// reconciler leaves Stripe alone until its pause is over; the payments it
// did not get to are due again after it.
func TestReconcile_aRateLimitStopsThePass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 5 {
		b.createPayment(t, aliceKey, "auth-"+strconv.Itoa(i), authoriseBody)
	}
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents/", Method: http.MethodGet,
		Kind: stripesim.FaultRateLimit, Count: 100}))
	reads := func() int {
		n := 0
		for _, r := range b.sim.Requests() {
			if r.Method == http.MethodGet && strings.HasPrefix(r.Path, "/v1/payment_intents/") {
				n++
			}
		}
		return n
	}

	r := b.reconciler()
	run := r.round(t)
	require.True(t, run.Paused)
	require.Equal(t, 5, run.Claimed)
	require.Zero(t, run.Checked)
	require.Equal(t, 1, reads(), "one 429 ends the pass")

	run = r.round(t)
	require.Equal(t, payments.ReconcileRun{Paused: true}, run, "paused: Stripe is not asked")
	require.Equal(t, 1, reads())
	require.Equal(t, 5, b.count(t, "SELECT count(*) FROM payments WHERE reconcile_checks = 0 AND next_check_at > now()"),
		"every claim is given back")
}

// A payment whose PaymentIntent Stripe will not show (a 404) is counted as
// refused and does not hold up the others; its back-off retries it.
func TestReconcile_aPaymentStripeWillNotShowDoesNotHoldUpTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	lost := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	good := b.createPayment(t, aliceKey, "auth-2", authoriseBody)
	_, err := b.pool.Exec(context.Background(), "UPDATE payments SET stripe_payment_intent = 'pi_unknown_to_stripe' WHERE id = $1", lost.ID)
	require.NoError(t, err)
	b.dropWebhooks(t)
	b.sim.Advance(7*24*time.Hour + time.Minute)

	run := b.reconciler().round(t)
	require.Equal(t, payments.ReconcileRun{Claimed: 2, Checked: 2, Corrected: 1, Refused: 1}, run)
	require.Equal(t, "canceled", b.getPayment(t, aliceKey, good.ID).Status)
	require.Equal(t, "requires_capture", b.getPayment(t, aliceKey, lost.ID).Status)
}
