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
	"github.com/example/payments/internal/webhooks"
)

// Tests of the reconciler and of refunds made outside the service (docs/API.md
// section 2: "The service's records converge to Stripe's without any
// webhook", and refunds of origin external). docs/failure-scenarios.md
// names them.

// testReconciler is a reconciler over the bundle's service, applying the
// events it reads through a webhook receiver of its own (as the worker's
// does), whose clock is an hour ahead; each round moves the clock a day
// on, so that every payment the service is unsure of is due its check.
type testReconciler struct {
	*payments.Reconciler
	mu  sync.Mutex
	now time.Time
}

func (b *testBundle) reconciler(cfg ...payments.ReconcilerConfig) *testReconciler {
	r := &testReconciler{now: time.Now().Add(time.Hour)}
	var c payments.ReconcilerConfig
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.Apply = webhooks.NewReceiver(webhooks.Config{Pool: b.pool}).Apply
	c.After, c.Rate = time.Minute, 1000
	c.Now = func() time.Time {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.now
	}
	r.Reconciler = b.payments.NewReconciler(c)
	return r
}

// round moves the reconciler's clock a day on and makes one pass.
func (r *testReconciler) round(t *testing.T) payments.ReconcileRun {
	t.Helper()
	r.mu.Lock()
	r.now = r.now.Add(24 * time.Hour)
	r.mu.Unlock()
	run, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	return run
}

// eventReads is how many times the simulator was asked for its event log.
func (b *testBundle) eventReads() int { return len(b.simRequests(http.MethodGet, "/v1/events")) }

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
// pass after it finds every event of the log in the inbox, and applies
// none again.
func TestReconcile_aDashboardRefundLearnedByWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	sr := b.dashboardRefund(t, *pay.StripePaymentIntent, 700)

	requireEventually(t, "the webhook shows the refund", func() bool { return b.getPayment(t, aliceKey, pay.ID).AmountRefunded == 700 })
	b.requireOneExternalRefund(t, pay.ID, sr, 700)
	b.webhooksReceived(t)

	run := b.reconciler().round(t)
	require.Equal(t, 1, run.Pages)
	require.Positive(t, run.Listed)
	require.Zero(t, run.Applied, "every event came by webhook")
	b.requireOneExternalRefund(t, pay.ID, sr, 700)

	// What is left to refund counts it: 1300, not 2000.
	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 1301))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
	require.Equal(t, "api", b.refund(t, aliceKey, "refund-2", refundBody(pay.ID, 1300)).Origin)
	require.EqualValues(t, 2000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}

// The same refund with every webhook lost: the reconciler reads it in
// Stripe's event log and applies it as the webhook would have; the next
// pass reads the margin again and applies nothing twice.
func TestReconcile_aDashboardRefundLearnedByTheReconciler(t *testing.T) {
	t.Parallel()
	b := setup(t) // no webhooks at all
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	mine := b.refund(t, aliceKey, "refund-1", refundBody(pay.ID, 300))
	sr := b.dashboardRefund(t, *pay.StripePaymentIntent, 700)
	require.EqualValues(t, 300, b.getPayment(t, aliceKey, pay.ID).AmountRefunded, "nobody told us yet")

	r := b.reconciler()
	run := r.round(t)
	require.Equal(t, 1, run.Pages)
	require.Equal(t, run.Listed, run.Applied, "no webhook came: every event is new")
	require.Positive(t, run.Moved)
	refunds := b.refundsOf(t, pay.ID)
	require.Len(t, refunds, 2, "ours and the dashboard's")
	require.Equal(t, mine.ID, refunds[0].ID)
	require.Equal(t, "api", refunds[0].Origin, "a refund our flow made is never taken for an external one")
	require.Equal(t, "external", refunds[1].Origin)
	require.Equal(t, sr, *refunds[1].StripeRefund)
	require.EqualValues(t, 1000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, refunds[1].ID))

	run = r.round(t)
	require.Equal(t, 1, run.Pages)
	require.Positive(t, run.Listed, "the margin before the cursor is read again")
	require.Zero(t, run.Applied, "nothing new")
	require.Len(t, b.refundsOf(t, pay.ID), 2)
	require.EqualValues(t, 1000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
	require.Equal(t, []string{"refund.succeeded"}, b.refundEvents(t, refunds[1].ID))
}

// Both learn of it: the reconciler first (the webhook is held back), then
// the webhook, which finds the event's id in the inbox. One refund, one
// event, counted once.
func TestReconcile_aDashboardRefundLearnedByBoth(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.NoError(t, b.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookReorder, Type: "refund.created"}))
	sr := b.dashboardRefund(t, *pay.StripePaymentIntent, 700)
	requireEventually(t, "charge.refunded is received", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'charge.refunded'") == 1
	})

	require.Equal(t, 1, b.reconciler().round(t).Moved)
	b.requireOneExternalRefund(t, pay.ID, sr, 700)

	b.sim.ClearWebhookFaults() // sends the held refund.created
	b.webhooksReceived(t)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'refund.created' AND outcome = 'applied'"))
	b.requireOneExternalRefund(t, pay.ID, sr, 700)
}

// Stripe cancels an authorisation nobody captured within 7 days, and its
// payment_intent.canceled is lost: the reconciler reads it in the log, and
// the payment is canceled, with its one payment.canceled event. The next
// pass asks Stripe for its log once, and about no payment.
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
	run := r.round(t)
	require.Equal(t, 1, run.Moved, "%+v", run)
	require.Equal(t, "canceled", b.getPayment(t, aliceKey, auth.ID).Status)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))

	reads := b.eventReads()
	run = r.round(t)
	require.Equal(t, payments.ReconcileRun{Pages: 1, Listed: 1}, run, "the cancel, read again in the margin; nothing else")
	require.Equal(t, reads+1, b.eventReads())
	require.Empty(t, b.simRequests(http.MethodGet, "/v1/payment_intents/"+*auth.StripePaymentIntent), "no payment is asked about")
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
	require.Equal(t, 1, run.Moved)
	failed := b.getRefund(t, aliceKey, re.ID)
	require.Equal(t, "failed", failed.Status)
	require.Equal(t, "expired_or_canceled_card", *failed.FailureReason)
	require.Zero(t, b.getPayment(t, aliceKey, pay.ID).AmountRefunded, "the amount is given back")
	require.Equal(t, []string{"refund.succeeded", "refund.failed"}, b.refundEvents(t, re.ID))
}

// Stripe's list trails its webhooks (events_lag): an event the list does
// not show yet is not skipped; the pass that finds it listed applies it.
func TestReconcile_anEventListedLateIsAppliedOnceListed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	r := b.reconciler()
	require.Positive(t, r.round(t).Listed)

	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/events", Method: http.MethodGet,
		Kind: stripesim.FaultEventsLag, DelayMS: 60_000, Count: 1000}))
	b.sim.Advance(time.Minute)
	sr := b.dashboardRefund(t, *first.StripePaymentIntent, 500)
	b.sim.Advance(30 * time.Second)
	run := r.round(t)
	require.Zero(t, run.Applied, "not listed yet: %+v", run)
	require.Empty(t, b.refundsOf(t, first.ID))

	b.sim.Advance(time.Minute)
	run = r.round(t)
	require.Positive(t, run.Moved, "%+v", run)
	b.requireOneExternalRefund(t, first.ID, sr, 500)
}

// Each pass reads again the margin before its cursor: an event that was
// listed after the pass that read past it (as Stripe's list, which may
// trail, can list an older event after a newer one) is applied by the
// next pass; an event older than the margin is not read again.
func TestReconcile_eachPassReadsTheMarginBeforeTheCursorAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := b.createPayment(t, aliceKey, "order-0", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	b.dashboardRefund(t, *old.StripePaymentIntent, 100)
	b.sim.Advance(10 * time.Minute)
	first := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	sr := b.dashboardRefund(t, *first.StripePaymentIntent, 500)
	at := b.sim.Advance(time.Minute)
	// A pass read up to an event a minute after the refund (the margin is
	// 2 minutes), and the refund was not listed then.
	_, err := b.pool.Exec(ctx, "UPDATE stripe_event_cursor SET created = $1, event_id = 'evt_read_before'", at)
	require.NoError(t, err)

	run := b.reconciler().round(t)
	require.Positive(t, run.Moved, "%+v", run)
	b.requireOneExternalRefund(t, first.ID, sr, 500)
	require.Empty(t, b.refundsOf(t, old.ID), "10 minutes before the cursor: past the margin, not read")
}

// Two reconcilers running at once (two worker processes): one reads the
// log, the other finds its cursor taken and skips the pass; each event is
// applied once.
func TestReconcile_oneReaderAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 3 {
		b.createPayment(t, aliceKey, "auth-"+strconv.Itoa(i), authoriseBody)
	}
	b.sim.Advance(7*24*time.Hour + time.Minute) // three lapse
	// The first list call is held, so that the two passes overlap.
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/events", Method: http.MethodGet,
		Kind: stripesim.FaultDelay, DelayMS: 500}))
	first, second := b.reconciler(), b.reconciler()

	var wg sync.WaitGroup
	runs := make([]payments.ReconcileRun, 2)
	for i, r := range []*testReconciler{first, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				time.Sleep(100 * time.Millisecond) // the first takes the cursor: an order, not a wait for a result
			}
			runs[i] = r.round(t)
		}()
	}
	wg.Wait()
	require.False(t, runs[0].Busy, "%+v", runs)
	require.True(t, runs[1].Busy, "%+v", runs)
	require.Zero(t, runs[1].Pages)
	require.Equal(t, 3, runs[0].Moved)
	require.Equal(t, 1, b.eventReads())
	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))
}

// Stripe answers 429: the pass stops at once, without an error, and the
// reconciler leaves Stripe alone until its pause is over; the cursor has
// not moved, so nothing is missed.
func TestReconcile_aRateLimitStopsThePass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/events", Method: http.MethodGet,
		Kind: stripesim.FaultRateLimit, Count: 100}))

	r := b.reconciler()
	run := r.round(t)
	require.True(t, run.Paused)
	require.Zero(t, run.Pages)
	require.Equal(t, 1, b.eventReads(), "one 429 ends the pass")

	run = r.round(t)
	require.Equal(t, payments.ReconcileRun{Paused: true}, run, "paused: Stripe is not asked")
	require.Equal(t, 1, b.eventReads())
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM stripe_event_cursor WHERE created IS NOT NULL"), "the cursor did not move")
}

// processingOnce makes the simulator's first answer to a PaymentIntent's
// creation say "processing", as Stripe's may: the PaymentIntent itself
// (and its events) go on as the simulator made it, succeeded.
func processingOnce(next http.Handler) http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hit := false
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			once.Do(func() { hit = true })
		}
		if !hit {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := strings.Replace(rec.Body.String(), `"status":"succeeded"`, `"status":"processing"`, 1)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write([]byte(body))
	})
}

// Stripe answers "processing": the payment keeps its PaymentIntent at
// once, and follows Stripe to succeeded by the event log, with no webhook;
// the reconciler's later check of it then asks Stripe nothing.
func TestReconcile_aProcessingPaymentFollowsTheLog(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{simWrap: processingOnce}) // no webhooks
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, "processing", pay.Status)
	require.NotNil(t, pay.StripePaymentIntent, "the PaymentIntent is recorded at once")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments_awaiting_stripe WHERE payment_id = $1", pay.ID))

	run := b.reconciler().round(t)
	require.Positive(t, run.Moved)
	got := b.getPayment(t, aliceKey, pay.ID)
	require.Equal(t, "succeeded", got.Status)
	require.EqualValues(t, 2000, got.AmountCaptured)
	require.Equal(t, 1, run.Unsure)
	require.Zero(t, run.Retrieve, "the log told: no retrieve")
	require.Empty(t, b.simRequests(http.MethodGet, "/v1/payment_intents/"+*pay.StripePaymentIntent))
	require.Zero(t, b.count(t, "SELECT count(*) FROM payments_awaiting_stripe"))
}

// The same, with Stripe's list trailing far behind: past its bound, the
// payment Stripe answered "processing" is retrieved, and follows Stripe to
// succeeded; only it is asked about.
func TestReconcile_aProcessingPaymentIsRetrievedPastItsBound(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{simWrap: processingOnce})
	pay := b.createPayment(t, aliceKey, "order-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	b.createPayment(t, aliceKey, "order-2", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, "processing", pay.Status)
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/events", Method: http.MethodGet,
		Kind: stripesim.FaultEventsLag, DelayMS: 3_600_000, Count: 1000}))

	run := b.reconciler().round(t)
	require.Zero(t, run.Listed)
	require.Equal(t, 1, run.Retrieve)
	require.Equal(t, "succeeded", b.getPayment(t, aliceKey, pay.ID).Status)
	require.Len(t, b.simRequests(http.MethodGet, "/v1/payment_intents/"+*pay.StripePaymentIntent), 1)
	require.Zero(t, b.count(t, "SELECT count(*) FROM payments_awaiting_stripe"))
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.succeeded'"),
		"one each: the flow's for order-2, the reconciler's for order-1")
}

// A window of more pages than a pass reads (the first pass over 30 days of
// events, or the pass after an outage) is swept over several passes, from
// the newest event down, each going on after the oldest event the last one
// read; the cursor moves once the sweep is through, and nothing is missed.
func TestReconcile_aLongWindowIsSweptOverPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 4
	var auths []string
	for i := range n {
		auths = append(auths, b.createPayment(t, aliceKey, "auth-"+strconv.Itoa(i), authoriseBody).ID)
	}
	b.sim.Advance(7*24*time.Hour + time.Minute) // each lapses: 2 events each of the types read
	r := b.reconciler(payments.ReconcilerConfig{PageSize: 2, MaxPages: 1})

	var runs []payments.ReconcileRun
	for {
		run := r.round(t)
		runs = append(runs, run)
		if !run.Partial {
			break
		}
		require.Less(t, len(runs), 10, "%+v", runs)
		require.Equal(t, 0, b.count(t, "SELECT count(*) FROM stripe_event_cursor WHERE created IS NOT NULL"),
			"the cursor waits for the sweep")
	}
	require.Len(t, runs, n, "2n events, 2 a pass: %+v", runs)
	for _, id := range auths {
		require.Equal(t, "canceled", b.getPayment(t, aliceKey, id).Status)
	}
	require.Equal(t, n, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM stripe_event_cursor WHERE created IS NOT NULL"))
}

// A refund's event that comes before the payment shows its capture (the
// capture was made in the dashboard, and its webhook lost): it is kept as
// deferred, and the reconciler applies it after the capture, which the log
// lists before it. One external refund, counted once.
func TestReconcile_aRefundEventBeforeItsCaptureIsDeferred(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{webhooks: true})
	auth := b.createPayment(t, aliceKey, "auth-1", authoriseBody)
	b.webhooksReceived(t)
	require.NoError(t, b.sim.AddWebhookFault(stripesim.WebhookFault{Kind: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	req := httptest.NewRequest(http.MethodPost, "/v1/payment_intents/"+*auth.StripePaymentIntent+"/capture", nil)
	req.Header.Set("Authorization", "Bearer sk_test_dashboard")
	rec := httptest.NewRecorder()
	b.sim.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	sr := b.dashboardRefund(t, *auth.StripePaymentIntent, 300)
	requireEventually(t, "refund.created is received, and deferred", func() bool {
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE type = 'refund.created' AND outcome = 'deferred'") == 1
	})
	require.Equal(t, "requires_capture", b.getPayment(t, aliceKey, auth.ID).Status)
	require.Empty(t, b.refundsOf(t, auth.ID))

	run := b.reconciler().round(t)
	require.Equal(t, 2, run.Moved, "the capture, then the refund: %+v", run)
	require.Equal(t, "succeeded", b.getPayment(t, aliceKey, auth.ID).Status)
	b.requireOneExternalRefund(t, auth.ID, sr, 300)
	require.Zero(t, b.count(t, "SELECT count(*) FROM stripe_events WHERE outcome = 'deferred'"))
}
