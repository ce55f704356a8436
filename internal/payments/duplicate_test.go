package payments_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/failpoint"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/webhooks"
)

// The second PaymentIntent found by the create flow's own record: the late
// one's event was applied first, so the payment recorded it, and the
// flow's own PaymentIntent (made under the next child key, its record cut
// short by a crash) is the duplicate. Its record lists it, and the
// completer refunds it in full, once.
func TestDuplicates_theCreateFlowsOwnPaymentIntentRecordedSecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lateStripe(t) // the first attempt's PaymentIntent appears 30 s later
	engine := func(failpoints string) *payments.Service {
		fp, err := failpoint.Parse(failpoints)
		require.NoError(t, err)
		svc, _ := newService(t, recovery.Config{
			Pool: b.pool, LockTimeout: time.Minute, Now: func() time.Time { return b.now }, SpentKeyGrace: -1, Failpoints: fp,
		}, b.stripe)
		return svc
	}
	require.True(t, recovery.IsTransient(b.createVisa(t, engine(""))), "the 500")
	b.now = b.now.Add(2 * time.Second)
	require.ErrorIs(t, b.createVisa(t, engine("after_stripe:payment_intent=error")), failpoint.ErrInjected,
		"spent, nothing found, charged under the next child key, and the record cut short")

	b.sim.Advance(30 * time.Second) // Stripe executes the 500's request
	charging := chargingIntents(t, b.sim)
	require.Len(t, charging, 1)
	for _, n := range charging {
		require.Equal(t, 2, n, "the customer is charged twice")
	}
	// The late PaymentIntent's event reaches the service first: the
	// payment records it.
	var late, own string
	objects, err := b.sim.Objects("event")
	require.NoError(t, err)
	var lateEvent []byte
	for _, raw := range objects {
		var ev struct {
			Type string
			Data struct{ Object struct{ ID string } }
		}
		require.NoError(t, json.Unmarshal(raw, &ev))
		if ev.Type == "payment_intent.succeeded" {
			if own == "" {
				own = ev.Data.Object.ID // made first: the next child key's
			} else {
				late, lateEvent = ev.Data.Object.ID, raw
			}
		}
	}
	require.NotEmpty(t, late)
	const secret = "whsec_duplicate_test"
	rcv := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: secret})
	outcome, err := rcv.Receive(context.Background(), lateEvent, stripesim.Sign(lateEvent, secret, time.Now()))
	require.NoError(t, err)
	require.Equal(t, payments.EventApplied, outcome)

	b.now = b.now.Add(2 * time.Second)
	require.NoError(t, b.createVisa(t, engine("")), "the retry records its own PaymentIntent: a second one")
	var recorded string
	var raw []byte
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT stripe_payment_intent, duplicate_charges FROM payments").Scan(&recorded, &raw))
	require.Equal(t, late, recorded, "the one recorded first stays the payment's")
	var dups []payments.DuplicateCharge
	require.NoError(t, json.Unmarshal(raw, &dups))
	require.Equal(t, []payments.DuplicateCharge{{StripePaymentIntent: own, Amount: 1500, Status: payments.DuplicateRefundPending}}, dups)

	b.now = b.now.Add(time.Minute)
	run, err := b.completer(nil, b.engineFor(t)).RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, run.Finished)
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT duplicate_charges FROM payments").Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &dups))
	require.Equal(t, payments.DuplicateRefundedFully, dups[0].Status)
	refunds, err := b.sim.Objects("refund")
	require.NoError(t, err)
	require.Len(t, refunds, 1, "refunded once")
	var re struct {
		Amount        int64
		PaymentIntent string `json:"payment_intent"`
	}
	require.NoError(t, json.Unmarshal(refunds[0], &re))
	require.Equal(t, own, re.PaymentIntent)
	require.EqualValues(t, 1500, re.Amount)
}

// The refund flow's own answer is Stripe's second refund: the late one (the
// first attempt's, executed after the flow moved to its next child key)
// was reported first and recorded on our refund, and the flow's record,
// cut short by a crash and resumed by the retry, finds it there. Its answer
// becomes a refund of origin duplicate, counted in amount_refunded, and
// the client gets our refund.
func TestDuplicates_theRefundFlowsOwnRefundRecordedSecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc := func(failpoints string) *payments.Service {
		fp, err := failpoint.Parse(failpoints)
		require.NoError(t, err)
		svc, _ := newService(t, recovery.Config{
			Pool: b.pool, LockTimeout: time.Minute, Now: func() time.Time { return b.now }, SpentKeyGrace: -1, Failpoints: fp,
		}, b.stripe)
		return svc
	}
	created, err := b.create(ctx, svc(""), "pay-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.NoError(t, err)
	var pay struct{ ID string }
	require.NoError(t, json.Unmarshal(created.Body, &pay))
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/refunds", Method: "POST", Kind: stripesim.FaultLate500, DelayMS: 30_000}))

	params := payments.RefundParams{Payment: pay.ID, Amount: 500}
	_, err = b.refund(ctx, svc(""), "refund-1", params)
	require.True(t, recovery.IsTransient(err), "the 500")
	b.now = b.now.Add(2 * time.Second)
	_, err = b.refund(ctx, svc("after_stripe:refund=error"), "refund-1", params)
	require.ErrorIs(t, err, failpoint.ErrInjected, "spent, nothing found, refunded under the next child key, the record cut short")

	b.sim.Advance(30 * time.Second) // Stripe executes the 500's request too
	events, err := b.sim.Objects("event")
	require.NoError(t, err)
	var lateEvent []byte
	created2 := 0
	for _, raw := range events {
		var ev struct{ Type string }
		require.NoError(t, json.Unmarshal(raw, &ev))
		if ev.Type == "refund.created" {
			if created2++; created2 == 2 {
				lateEvent = raw // the late one's: made second
			}
		}
	}
	require.NotNil(t, lateEvent)
	const secret = "whsec_duplicate_test"
	rcv := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: secret})
	outcome, err := rcv.Receive(ctx, lateEvent, stripesim.Sign(lateEvent, secret, time.Now()))
	require.NoError(t, err)
	require.Equal(t, payments.EventApplied, outcome, "recorded on our refund, which had no Stripe refund yet")

	b.now = b.now.Add(2 * time.Second)
	answer, err := b.refund(ctx, svc(""), "refund-1", params)
	require.NoError(t, err)
	require.Equal(t, 201, answer.Status)
	var ours struct {
		ID, Origin, Status string
		StripeRefund       string `json:"stripe_refund"`
	}
	require.NoError(t, json.Unmarshal(answer.Body, &ours))
	require.Equal(t, "api", ours.Origin)

	got := b.refundRows(t)
	require.Len(t, got, 2)
	require.Equal(t, "api", got[0].origin)
	require.Equal(t, ours.StripeRefund, got[0].stripeRefund)
	require.Equal(t, "duplicate", got[1].origin)
	require.NotEqual(t, got[0].stripeRefund, got[1].stripeRefund)
	for _, r := range got {
		require.Equal(t, "succeeded", r.status)
		require.EqualValues(t, 500, r.amount)
	}
	var refunded int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT amount_refunded FROM payments WHERE id = $1", pay.ID).Scan(&refunded))
	require.EqualValues(t, 1000, refunded, "what Stripe holds: two refunds of 500")
	stripeRefunds, err := b.sim.Objects("refund")
	require.NoError(t, err)
	require.Len(t, stripeRefunds, 2)
}

// engineFor is an engine over the bundle's database and clock with the
// service's flows registered, for a completer.
func (b *testBundle) engineFor(t *testing.T) *recovery.Engine {
	t.Helper()
	_, engine := b.service(t, "")
	return engine
}

// A refund's first attempt answered 500 and Stripe executed it later, after
// the flow found nothing and moved to its next child key, but before that
// key's call: the late refund took the whole amount, so Stripe refuses the
// next one ("more than is left"). The refusal is of our own second
// attempt, not of our refund: Stripe made it, under the first child key.
// The flow records Stripe's refund and answers 201; it used to record the
// refund failed and answer 400 while Stripe had refunded the customer
// (make chaos, seed 1795861838008355371: a refund failed here, succeeded at
// Stripe, amount_refunded short by all of it).
func TestDuplicates_aRefusalOfTheNextChildKeyIsNotOurRefundsOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sim, svc := b.lateFirstAttempt(t, func(r *http.Request) bool { return r.URL.Path == "/v1/refunds" })

	created, err := b.create(ctx, svc, "pay-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.NoError(t, err)
	var pay struct{ ID string }
	require.NoError(t, json.Unmarshal(created.Body, &pay))
	require.NoError(t, sim.AddFault(stripesim.Fault{PathPrefix: "/v1/refunds", Method: "POST", Kind: stripesim.FaultLate500, DelayMS: 30_000}))

	params := payments.RefundParams{Payment: pay.ID} // all that is left
	_, err = b.refund(ctx, svc, "refund-1", params)
	require.True(t, recovery.IsTransient(err), "the 500")
	b.now = b.now.Add(2 * time.Second)
	answer, err := b.refund(ctx, svc, "refund-1", params)
	require.NoError(t, err)
	require.Equal(t, 201, answer.Status, "%s", answer.Body)

	refunds, err := sim.Objects("refund")
	require.NoError(t, err)
	require.Len(t, refunds, 1, "Stripe refunded once: the late attempt; the next was refused")
	var atStripe struct{ ID, Status string }
	require.NoError(t, json.Unmarshal(refunds[0], &atStripe))
	var ours struct {
		Status       string
		StripeRefund string `json:"stripe_refund"`
	}
	require.NoError(t, json.Unmarshal(answer.Body, &ours))
	require.Equal(t, atStripe.ID, ours.StripeRefund)
	require.Equal(t, atStripe.Status, ours.Status)
	var refunded int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT amount_refunded FROM payments WHERE id = $1", pay.ID).Scan(&refunded))
	require.EqualValues(t, 2000, refunded, "what Stripe gave back")
}

// The same race for a capture and a cancel: the first attempt answered 500
// and Stripe executed it later, after the flow found the PaymentIntent not
// moved yet and went on to its next child key, but before that key's call.
// Stripe then refuses the next call (the PaymentIntent is already captured,
// or canceled); the refusal is of our own second attempt, and the
// PaymentIntent at the status the action leads to is its outcome. The flow
// answers 200 with the payment moved; it used to answer 400 and leave the
// payment requires_capture while Stripe had captured or canceled it.
func TestDuplicates_aRefusalOfTheNextChildKeyIsNotOurCapturesOrCancelsOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		action, path, status string
		run                  func(*payments.Service) func(context.Context, payments.KeyedRequest, payments.ActionParams) (recovery.Response, error)
	}{
		{"capture", "/capture", "succeeded", func(s *payments.Service) func(context.Context, payments.KeyedRequest, payments.ActionParams) (recovery.Response, error) {
			return s.Capture
		}},
		{"cancel", "/cancel", "canceled", func(s *payments.Service) func(context.Context, payments.KeyedRequest, payments.ActionParams) (recovery.Response, error) {
			return s.Cancel
		}},
	} {
		t.Run(tc.action, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			sim, svc := b.lateFirstAttempt(t, func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, tc.path) })

			id := b.proofPayment(t, svc, false)
			require.NoError(t, sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents/", Method: "POST", Kind: stripesim.FaultLate500, DelayMS: 30_000}))
			p := payments.ActionParams{Payment: id}
			body, err := json.Marshal(p)
			require.NoError(t, err)
			req := payments.KeyedRequest{UserID: b.userID, Key: tc.action + "-1", Method: "POST", Path: "/v1/payments/" + id + tc.path, Body: body}
			_, err = tc.run(svc)(ctx, req, p)
			require.True(t, recovery.IsTransient(err), "the 500: %v", err)
			b.now = b.now.Add(2 * time.Second)
			answer, err := tc.run(svc)(ctx, req, p)
			require.NoError(t, err)
			require.Equal(t, 200, answer.Status, "%s", answer.Body)

			intents, err := sim.Objects("payment_intent")
			require.NoError(t, err)
			require.Len(t, intents, 1)
			var atStripe struct{ Status string }
			require.NoError(t, json.Unmarshal(intents[0], &atStripe))
			require.Equal(t, tc.status, atStripe.Status, "the late attempt moved it")
			var ours struct{ Status string }
			require.NoError(t, json.Unmarshal(answer.Body, &ours))
			require.Equal(t, tc.status, ours.Status, "the answer shows what Stripe did")
			var status string
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT status FROM payments WHERE id = $1", id).Scan(&status))
			require.Equal(t, tc.status, status, "the record follows Stripe")
		})
	}
}

// A refund whose next attempt Stripe refused for a reason of its own (the
// charge was disputed), recorded failed and answered 400, and whose first
// attempt, a late 500, Stripe executed afterwards (the dispute won by
// then): Stripe refunded the customer for a refund of ours that says
// failed. Its report names our refund; the money is what Stripe did, so it
// becomes a refund of origin duplicate, counted in amount_refunded, and our
// failed refund stays as answered. It used to be attached to the failed
// refund and dropped: amount_refunded 0 against Stripe's 2000.
func TestDuplicates_aRefundStripeMadeForOneWeRecordedFailedIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	svc, _ := newService(t, recovery.Config{
		Pool: b.pool, LockTimeout: time.Minute, Now: func() time.Time { return b.now }, SpentKeyGrace: -1,
	}, b.stripe)
	created, err := b.create(ctx, svc, "pay-1", `{"amount":2000,"currency":"usd","payment_method":"pm_card_createDispute"}`)
	require.NoError(t, err)
	var pay struct{ ID string }
	require.NoError(t, json.Unmarshal(created.Body, &pay))
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/refunds", Method: "POST", Kind: stripesim.FaultLate500, DelayMS: 30_000}))

	params := payments.RefundParams{Payment: pay.ID}
	_, err = b.refund(ctx, svc, "refund-1", params)
	require.True(t, recovery.IsTransient(err), "the 500")
	b.sim.Advance(3 * time.Second) // the customer's bank disputes the charge
	b.now = b.now.Add(3 * time.Second)
	answer, err := b.refund(ctx, svc, "refund-1", params)
	require.NoError(t, err)
	require.Equal(t, 400, answer.Status, "Stripe refused the next child key's refund: %s", answer.Body)

	disputes, err := b.sim.Objects("dispute")
	require.NoError(t, err)
	require.Len(t, disputes, 1)
	var dp struct{ ID string }
	require.NoError(t, json.Unmarshal(disputes[0], &dp))
	require.NoError(t, b.sim.CloseDispute(dp.ID, "won"))
	b.sim.Advance(30 * time.Second) // Stripe executes the 500's request: refunded
	stripeRefunds, err := b.sim.Objects("refund")
	require.NoError(t, err)
	require.Len(t, stripeRefunds, 1)
	var atStripe struct {
		ID, Status string
		Amount     int64
	}
	require.NoError(t, json.Unmarshal(stripeRefunds[0], &atStripe))
	require.Equal(t, "succeeded", atStripe.Status)

	const secret = "whsec_duplicate_test"
	rcv := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: secret})
	events, err := b.sim.Objects("event")
	require.NoError(t, err)
	for _, raw := range events {
		var ev struct{ Type string }
		require.NoError(t, json.Unmarshal(raw, &ev))
		if ev.Type == "refund.created" || ev.Type == "charge.refunded" {
			for range 2 { // delivered twice: one refund recorded
				_, err := rcv.Receive(ctx, raw, stripesim.Sign(raw, secret, time.Now()))
				require.NoError(t, err)
			}
		}
	}

	got := b.refundRows(t)
	require.Equal(t, []refundRow{
		{origin: "api", status: "failed", amount: 2000},
		{origin: "duplicate", status: "succeeded", amount: atStripe.Amount, stripeRefund: atStripe.ID},
	}, got)
	var refunded int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT amount_refunded FROM payments WHERE id = $1", pay.ID).Scan(&refunded))
	require.Equal(t, atStripe.Amount, refunded, "what Stripe gave back")
}

// refundRow is a refund as its row holds it.
type refundRow struct {
	origin, status string
	amount         int64
	stripeRefund   string // "" for none
}

// refundRows reads every refund, ordered by origin.
func (b *testBundle) refundRows(t *testing.T) []refundRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		"SELECT origin, status, amount, coalesce(stripe_refund, '') FROM refunds ORDER BY origin")
	require.NoError(t, err)
	var got []refundRow
	for rows.Next() {
		var r refundRow
		require.NoError(t, rows.Scan(&r.origin, &r.status, &r.amount, &r.stripeRefund))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	return got
}

// lateFirstAttempt is a service whose Stripe, the simulator behind a proxy,
// lets a late 500's request (the first attempt's) execute just before the
// call under the next child key that matches reaches it: the order in
// which Stripe refuses that call because the first attempt took effect.
func (b *testBundle) lateFirstAttempt(t *testing.T, matches func(*http.Request) bool) (*stripesim.Simulator, *payments.Service) {
	t.Helper()
	sim := stripesim.New(stripesim.Config{})
	simServer := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { simServer.Close(); sim.Close() })
	target, err := url.Parse(simServer.URL)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && matches(r) && strings.HasSuffix(r.Header.Get("Idempotency-Key"), "-g1") {
			sim.Advance(30 * time.Second) // the first attempt executes now
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_late_first_attempt", APIBase: proxy.URL})
	require.NoError(t, err)
	svc, _ := newService(t, recovery.Config{
		Pool: b.pool, LockTimeout: time.Minute, Now: func() time.Time { return b.now }, SpentKeyGrace: -1,
	}, stripe)
	return sim, svc
}
