package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/webhooks"
)

// Tests of "Stripe's evidence is never dropped" (docs/API.md section 2):
// Stripe executes a request of ours late, after the service answered under
// a new child key, and then holds two objects for one request. The
// simulator's late_500 fault is that Stripe, reached through stripe-go.
// docs/failure-scenarios.md, "Stripe did it twice", names these tests.

// lateStripeAt arms a late 500 on the next POST whose path starts with
// prefix: Stripe answers 500 and stores it, and executes the request 100
// seconds later on the simulator's clock.
func (b *testBundle) lateStripeAt(t *testing.T, prefix string) {
	t.Helper()
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: prefix, Method: http.MethodPost,
		Kind: stripesim.FaultLate500, DelayMS: 100_000}))
}

// setupLate is setup with webhooks and a clock the test moves.
func setupLate(t *testing.T) (*testBundle, *clocktest.Clock) {
	t.Helper()
	clock := clocktest.New(time.Now().Truncate(time.Second))
	return setup(t, setupOpts{webhooks: true, engine: recovery.Config{Now: clock.Now}}), clock
}

// simEvent is one of the simulator's events, as Stripe sent it.
func (b *testBundle) simEvent(t *testing.T, typ, objectID string) map[string]any {
	t.Helper()
	events, err := b.sim.Objects("event")
	require.NoError(t, err)
	for _, raw := range events {
		var ev map[string]any
		require.NoError(t, json.Unmarshal(raw, &ev))
		obj := ev["data"].(map[string]any)["object"].(map[string]any)
		if ev["type"] == typ && obj["id"] == objectID {
			return ev
		}
	}
	require.FailNow(t, "no event "+typ+" about "+objectID)
	return nil
}

// deliverAs sends ev to rcv under the event id id, signed: the same
// report of Stripe's reaching the service another way (the event log, a
// second instance) is applied through the same code.
func deliverAs(t *testing.T, rcv *webhooks.Receiver, ev map[string]any, id string) payments.EventOutcome {
	t.Helper()
	ev["id"] = id
	payload, err := json.Marshal(ev)
	require.NoError(t, err)
	outcome, err := rcv.Receive(context.Background(), payload, stripesim.Sign(payload, webhookSecret, time.Now()))
	require.NoError(t, err)
	return outcome
}

// stagedEvents lists the merchant events staged about an object, oldest first.
func (b *testBundle) stagedEvents(t *testing.T, objectID string) []string {
	t.Helper()
	return b.refundEvents(t, objectID) // any object: the query reads args.object.id
}

// duplicatesMetric reads payments_stripe_duplicates_total{object}.
func (b *testBundle) duplicatesMetric(t *testing.T, object string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	payments.RegisterMetrics(reg, b.pool)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == "payments_stripe_duplicates_total" && m.GetLabel()[0].GetValue() == object {
				return m.GetCounter().GetValue()
			}
		}
	}
	require.FailNow(t, "no payments_stripe_duplicates_total{object="+object+"}")
	return 0
}

// A refund's late 500: the service answers 201 under the next child key,
// then Stripe executes the first attempt too. Stripe holds two refunds
// whose metadata names ours; the second becomes a refund of origin
// duplicate, counted in amount_refunded (which then equals Stripe's),
// with its refund.succeeded, once, however often and however it is
// reported.
func TestDuplicates_aRefundStripeExecutedLateIsRecorded(t *testing.T) {
	t.Parallel()
	b, clock := setupLate(t)
	pay := b.captured(t, aliceKey, "order-1", 2000)
	b.lateStripeAt(t, "/v1/refunds")

	b.spentThenGrace(t, clock, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	clock.Advance(recovery.DefaultSpentKeyGrace)
	resp, data := b.post(t, aliceKey, pathRefunds, "refund-1", refundBody(pay.ID, 500))
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(data))
	ours := decodeRefund(t, data)
	require.Len(t, b.simRefundsFor(t, *pay.StripePaymentIntent), 1, "one refund at Stripe so far")

	b.sim.Advance(100 * time.Second) // Stripe executes the 500's request
	stripeRefunds := b.simRefundsFor(t, *pay.StripePaymentIntent)
	require.Len(t, stripeRefunds, 2, "Stripe refunded twice")
	var late string
	for _, sr := range stripeRefunds {
		if sr.ID != *ours.StripeRefund {
			late = sr.ID
		}
	}
	requireEventually(t, "the late refund is recorded", func() bool {
		return b.getPayment(t, aliceKey, pay.ID).AmountRefunded == 1000
	})
	b.webhooksReceived(t)

	requireDuplicateRefund := func() {
		t.Helper()
		refunds := b.refundsOf(t, pay.ID)
		require.Len(t, refunds, 2)
		var dup refundJSON
		for _, re := range refunds {
			require.Equal(t, "succeeded", re.Status)
			require.EqualValues(t, 500, re.Amount)
			if re.Origin == "duplicate" {
				dup = re
			}
		}
		require.Equal(t, late, *dup.StripeRefund, "the late one is the duplicate")
		require.Equal(t, "duplicate", *dup.Reason)
		require.Equal(t, []string{"refund.succeeded"}, b.stagedEvents(t, dup.ID), "announced once")
		require.Equal(t, []string{"refund.succeeded"}, b.stagedEvents(t, ours.ID))
		require.EqualValues(t, 1000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded, "what Stripe holds")
		require.EqualValues(t, 1, b.duplicatesMetric(t, "refund"))
	}
	requireDuplicateRefund()

	// The same refund reported again, under other event ids (the event
	// log, a second instance), at once through two receivers: nothing new.
	ev := b.simEvent(t, "refund.created", late)
	other := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: webhookSecret})
	mine := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: webhookSecret})
	var wg sync.WaitGroup
	for i, rcv := range []*webhooks.Receiver{mine, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			copied := map[string]any{}
			for k, v := range ev {
				copied[k] = v
			}
			require.Equal(t, payments.EventNoChange, deliverAs(t, rcv, copied, fmt.Sprintf("evt_again_%d", i)))
		}()
	}
	wg.Wait()
	requireDuplicateRefund()

	// What is left to refund counts it: 1000 more, no more.
	resp, data = b.post(t, aliceKey, pathRefunds, "refund-2", refundBody(pay.ID, 1001))
	requireProblem(t, resp, data, http.StatusBadRequest, "refund_not_allowed")
	require.Equal(t, "succeeded", b.refund(t, aliceKey, "refund-3", refundBody(pay.ID, 0)).Status)
	require.EqualValues(t, 2000, b.getPayment(t, aliceKey, pay.ID).AmountRefunded)
}

// A PaymentIntent's late 500: the service charges under the next child
// key, then Stripe executes the first attempt too, and the customer is
// charged twice. The second PaymentIntent is listed in the payment's
// duplicate_charges and refunded in full by the service, once, even when
// its event arrives twice, through two instances, and two completers drive
// the refund at once; payment.duplicate_refunded announces it.
func TestDuplicates_aSecondPaymentIntentIsRefundedOnce(t *testing.T) {
	t.Parallel()
	b, clock := setupLate(t)
	b.lateStripeAt(t, "/v1/payment_intents")

	b.spentThenGrace(t, clock, pathPayments, "order-1", visaBody)
	clock.Advance(recovery.DefaultSpentKeyGrace)
	pay := b.createPayment(t, aliceKey, "order-1", visaBody)
	require.Equal(t, "succeeded", pay.Status)
	require.Nil(t, pay.DuplicateCharges)

	b.sim.Advance(100 * time.Second) // Stripe executes the 500's request: a second charge
	intents := b.simIntentsFor(t, pay.ID)
	require.Len(t, intents, 2)
	var second string
	for _, pi := range intents {
		require.Equal(t, "succeeded", pi.Status, "the customer was charged twice")
		if pi.ID != *pay.StripePaymentIntent {
			second = pi.ID
		}
	}
	requireEventually(t, "the second charge is listed", func() bool {
		return len(b.getPayment(t, aliceKey, pay.ID).DuplicateCharges) == 1
	})
	b.webhooksReceived(t)
	got := b.getPayment(t, aliceKey, pay.ID)
	require.Equal(t, []duplicateJSON{{StripePaymentIntent: second, Amount: 2000, Status: "refund_pending"}}, got.DuplicateCharges)
	require.Equal(t, *pay.StripePaymentIntent, *got.StripePaymentIntent, "the recorded PaymentIntent stays the payment's")
	require.Equal(t, "succeeded", got.Status)

	// Its event again, under other ids, through two receivers at once.
	ev := b.simEvent(t, "payment_intent.succeeded", second)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rcv := webhooks.NewReceiver(webhooks.Config{Pool: b.pool, Secret: webhookSecret})
			copied := map[string]any{}
			for k, v := range ev {
				copied[k] = v
			}
			require.Equal(t, payments.EventNoChange, deliverAs(t, rcv, copied, fmt.Sprintf("evt_again_%d", i)))
		}()
	}
	wg.Wait()
	require.Len(t, b.getPayment(t, aliceKey, pay.ID).DuplicateCharges, 1)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1", payments.DuplicateChargeKey(second)))

	// Two completers (two instances) drive the refund at once.
	var runs sync.WaitGroup
	for range 2 {
		runs.Add(1)
		go func() {
			defer runs.Done()
			_, err := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Second}).RunOnce(context.Background())
			require.NoError(t, err)
		}()
	}
	runs.Wait()

	got = b.getPayment(t, aliceKey, pay.ID)
	require.Equal(t, []duplicateJSON{{StripePaymentIntent: second, Amount: 2000, Status: "refunded"}}, got.DuplicateCharges)
	require.EqualValues(t, 0, got.AmountRefunded, "the merchant's payment itself is not refunded")
	secondRefunds := b.simRefundsFor(t, second)
	require.Len(t, secondRefunds, 1, "refunded once")
	require.EqualValues(t, 2000, secondRefunds[0].Amount, "in full")
	require.Empty(t, b.simRefundsFor(t, *pay.StripePaymentIntent), "the recorded charge is left alone")
	require.Equal(t, []string{"payment.succeeded", "payment.duplicate_refunded"}, b.stagedEvents(t, pay.ID))
	require.EqualValues(t, 1, b.duplicatesMetric(t, "payment_intent"))

	// The refund's own events (refund.created, charge.refunded) change
	// nothing more, and a later completer run finds nothing to do.
	requireEventually(t, "every webhook is received", func() bool {
		events, err := b.sim.Objects("event")
		require.NoError(t, err)
		return b.count(t, "SELECT count(*) FROM stripe_events WHERE id NOT LIKE 'evt_again_%'") == len(events)
	})
	run, err := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Second}).RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, run.Claimed)
	require.Len(t, b.simRefundsFor(t, second), 1)
	require.Equal(t, []string{"payment.succeeded", "payment.duplicate_refunded"}, b.stagedEvents(t, pay.ID))
	require.Zero(t, b.count(t, "SELECT count(*) FROM refunds"), "no refund of the merchant's is made up")
	require.True(t, strings.HasPrefix(payments.DuplicateChargeKey(second), "payments duplicate_charge pi_"))
	// No client can name a key so: a merchant's key of that name would
	// take the refund's place.
	for _, header := range []string{payments.DuplicateChargeKey(second), `"` + payments.DuplicateChargeKey(second) + `"`} {
		_, ok := api.ParseIdempotencyKey(header)
		require.False(t, ok, "a client may send %s, the key the service names a duplicate charge's refund", header)
	}
}

// The refund of a duplicate charge that Stripe answers pending (a card
// whose refunds settle later) leaves it refund_pending; Stripe's later
// charge.refund.updated settles it, through the webhook's code, and only
// then is payment.duplicate_refunded announced.
func TestDuplicates_aSecondChargesPendingRefundSettlesByWebhook(t *testing.T) {
	t.Parallel()
	b, clock := setupLate(t)
	b.lateStripeAt(t, "/v1/payment_intents")
	body := `{"amount":2000,"currency":"usd","payment_method":"pm_card_pendingRefund"}`

	b.spentThenGrace(t, clock, pathPayments, "order-1", body)
	clock.Advance(recovery.DefaultSpentKeyGrace)
	pay := b.createPayment(t, aliceKey, "order-1", body)
	b.sim.Advance(100 * time.Second) // the second charge
	requireEventually(t, "the second charge is listed", func() bool {
		return len(b.getPayment(t, aliceKey, pay.ID).DuplicateCharges) == 1
	})
	_, err := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Second}).RunOnce(context.Background())
	require.NoError(t, err)
	got := b.getPayment(t, aliceKey, pay.ID).DuplicateCharges
	require.Len(t, got, 1)
	require.Equal(t, "refund_pending", got[0].Status, "Stripe answered the refund pending")
	require.Equal(t, []string{"payment.succeeded"}, b.stagedEvents(t, pay.ID))

	b.sim.Advance(2 * time.Second) // Stripe settles the refund: charge.refund.updated
	requireEventually(t, "the refund settles", func() bool {
		return b.getPayment(t, aliceKey, pay.ID).DuplicateCharges[0].Status == "refunded"
	})
	b.webhooksReceived(t)
	require.Equal(t, []string{"payment.succeeded", "payment.duplicate_refunded"}, b.stagedEvents(t, pay.ID))
	require.Zero(t, b.count(t, "SELECT count(*) FROM refunds"), "the refund of a duplicate charge is no refund of the merchant's")
}
