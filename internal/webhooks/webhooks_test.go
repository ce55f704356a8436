package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/webhooks"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

const secret = "whsec_test_0123456789"

type testBundle struct {
	pool   *pgxpool.Pool
	server *httptest.Server
}

// setup serves the API's webhook endpoint on a fresh database holding one
// authorised payment, pay_w, whose PaymentIntent is pi_w.
func setup(t testing.TB) *testBundle { return setupWith(t, secret) }

// setupWith is setup with the STRIPE_WEBHOOK_SECRET value secrets.
func setupWith(t testing.TB, secrets string) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO payments (id, user_id, amount, currency, status, capture, payment_method, stripe_payment_intent)
		SELECT 'pay_w', id, 2000, 'usd', 'requires_capture', false, 'pm_card_visa', 'pi_w' FROM users WHERE email = 'alice@example.com';
		INSERT INTO payment_intents (stripe_payment_intent, payment_id) VALUES ('pi_w', 'pay_w')`)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	handler, err := api.NewHandler(api.Config{
		Pool: pool, Logger: slog.New(slog.DiscardHandler), Registry: reg,
		Webhooks: webhooks.NewReceiver(webhooks.Config{Pool: pool, Secret: secrets, Registry: reg}),
	})
	require.NoError(t, err)
	// /metrics is the process's metrics listener's (cmd/payments), beside
	// the API: both on one test server here.
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", handler)
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	return &testBundle{pool: pool, server: server}
}

// event is a Stripe event as Stripe sends it.
func event(id, eventType string, created int64, object map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": "2023-10-16", "created": created, "livemode": false,
		"type": eventType, "data": map[string]any{"object": object},
	})
	return b
}

func intent(id, status string, amountReceived int64) map[string]any {
	return map[string]any{"id": id, "object": "payment_intent", "status": status, "amount": 2000,
		"amount_received": amountReceived, "currency": "usd", "metadata": map[string]string{"payment": "pay_w"}}
}

// deliver posts payload signed with key at signedAt.
func (b *testBundle) deliver(t *testing.T, payload []byte, key string, signedAt time.Time) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/stripe/webhooks", bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if key != "" {
		req.Header.Set("Stripe-Signature", stripesim.Sign(payload, key, signedAt))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(body, &out), string(body))
	return resp.StatusCode, out
}

func (b *testBundle) payment(t *testing.T) (status string, captured, refunded int64) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT status, amount_captured, amount_refunded FROM payments WHERE id = 'pay_w'").Scan(&status, &captured, &refunded))
	return
}

func (b *testBundle) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), query).Scan(&n))
	return n
}

func TestWebhook_deliveredTwiceIsAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload := event("evt_1", "payment_intent.succeeded", time.Now().Unix(), intent("pi_w", "succeeded", 2000))

	status, out := b.deliver(t, payload, secret, time.Now())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "applied", out["outcome"])
	status, out = b.deliver(t, payload, secret, time.Now())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "duplicate", out["outcome"])

	st, captured, _ := b.payment(t)
	require.Equal(t, "succeeded", st)
	require.EqualValues(t, 2000, captured)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.captured'"), "one event for one change")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE kind = 'receipt_email'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM stripe_events WHERE id = 'evt_1' AND outcome = 'applied'"))
}

func TestWebhook_concurrentDuplicatesApplyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload := event("evt_race", "payment_intent.canceled", time.Now().Unix(), intent("pi_w", "canceled", 0))
	outcomes := make(chan any, 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, out := b.deliver(t, payload, secret, time.Now())
			require.Equal(t, http.StatusOK, status)
			outcomes <- out["outcome"]
		}()
	}
	wg.Wait()
	close(outcomes)
	counts := map[any]int{}
	for o := range outcomes {
		counts[o]++
	}
	require.Equal(t, map[any]int{"applied": 1, "duplicate": 9}, counts)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.canceled'"))
}

func TestWebhook_aStaleEventDoesNotOverwriteNewerState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().Unix()
	status, out := b.deliver(t, event("evt_new", "payment_intent.succeeded", now, intent("pi_w", "succeeded", 2000)), secret, time.Now())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "applied", out["outcome"])

	// Delivered later, happened earlier: an authorisation lapsing.
	older := event("evt_old", "payment_intent.payment_failed", now-60, intent("pi_w", "requires_payment_method", 0))
	status, out = b.deliver(t, older, secret, time.Now())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "stale", out["outcome"])
	st, captured, _ := b.payment(t)
	require.Equal(t, "succeeded", st)
	require.EqualValues(t, 2000, captured)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM stripe_events WHERE id = 'evt_old' AND outcome = 'stale'"))
}

// charge.refunded changes nothing: a payment's amount_refunded is the sum of
// its succeeded refunds, and the charge's amount_refunded (which counts
// pending refunds, and drops when one fails) is no measure of it.
func TestWebhook_chargeRefundedLeavesAmountRefundedToTheRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().Unix()
	b.deliver(t, event("evt_cap", "payment_intent.succeeded", now, intent("pi_w", "succeeded", 2000)), secret, time.Now())
	charge := map[string]any{"id": "ch_w", "object": "charge", "amount": 2000, "amount_captured": 2000,
		"amount_refunded": 500, "refunded": false, "payment_intent": "pi_w"}
	_, out := b.deliver(t, event("evt_r1", "charge.refunded", now+1, charge), secret, time.Now())
	require.Equal(t, "no_change", out["outcome"])
	_, _, refunded := b.payment(t)
	require.Zero(t, refunded)
}

// charge.refund.updated moves our refund, found by Stripe's id or by the
// "refund" metadata, forward only; amount_refunded follows the refunds.
func TestWebhook_chargeRefundUpdatedMovesTheRefundForwardOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `UPDATE payments SET status = 'succeeded', amount_captured = 2000, amount_refunded = 500;
		INSERT INTO refunds (id, user_id, payment_id, amount, status, stripe_refund)
		SELECT 're_000000000000000000000001', user_id, id, 500, 'succeeded', 're_s1' FROM payments;
		INSERT INTO refunds (id, user_id, payment_id, amount, status)
		SELECT 're_000000000000000000000002', user_id, id, 700, 'pending' FROM payments`)
	require.NoError(t, err)
	now := time.Now().Unix()
	refund := func(id, status, ours string) map[string]any {
		re := map[string]any{"id": id, "object": "refund", "amount": 500, "status": status, "payment_intent": "pi_w",
			"metadata": map[string]string{"refund": ours}}
		if status == "failed" {
			re["failure_reason"] = "expired_or_canceled_card"
		}
		return re
	}

	_, out := b.deliver(t, event("evt_f", "charge.refund.updated", now, refund("re_s1", "failed", "")), secret, time.Now())
	require.Equal(t, "applied", out["outcome"])
	_, out = b.deliver(t, event("evt_s", "charge.refund.updated", now+1, refund("re_s1", "succeeded", "")), secret, time.Now())
	require.Equal(t, "no_change", out["outcome"], "a failed refund stays failed")
	_, _, refunded := b.payment(t)
	require.Zero(t, refunded, "the failed refund's amount is given back")

	// Found by its metadata: the refund flow has not recorded Stripe's id yet.
	_, out = b.deliver(t, event("evt_p", "charge.refund.updated", now, refund("re_s2", "succeeded", "re_000000000000000000000002")), secret, time.Now())
	require.Equal(t, "applied", out["outcome"])
	_, _, refunded = b.payment(t)
	require.EqualValues(t, 700, refunded)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM refunds WHERE stripe_refund = 're_s2' AND status = 'succeeded'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM refunds WHERE stripe_refund = 're_s1' AND failure_reason = 'expired_or_canceled_card'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'refund.failed'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'refund.succeeded'"))

	// A refund of a PaymentIntent that is none of ours. (One of ours that
	// no refund of ours is becomes a refund of origin external: internal/api's
	// TestReconcile_aDashboardRefundLearnedByWebhook.)
	elsewhere := refund("re_elsewhere", "succeeded", "")
	elsewhere["payment_intent"] = "pi_elsewhere"
	_, out = b.deliver(t, event("evt_x", "charge.refund.updated", now, elsewhere), secret, time.Now())
	require.Equal(t, "unmatched", out["outcome"])
}

func TestWebhook_aBadOrOldSignatureIs400AndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload := event("evt_bad", "payment_intent.canceled", time.Now().Unix(), intent("pi_w", "canceled", 0))
	tampered := bytes.Replace(payload, []byte(`"canceled"`), []byte(`"succeeded"`), 1)
	for name, deliver := range map[string]func() (int, map[string]any){
		"wrong secret": func() (int, map[string]any) { return b.deliver(t, payload, "whsec_wrong", time.Now()) },
		"no signature": func() (int, map[string]any) { return b.deliver(t, payload, "", time.Now()) },
		"too old":      func() (int, map[string]any) { return b.deliver(t, payload, secret, time.Now().Add(-10*time.Minute)) },
		"tampered": func() (int, map[string]any) {
			req, _ := http.NewRequest(http.MethodPost, b.server.URL+"/v1/stripe/webhooks", bytes.NewReader(tampered))
			req.Header.Set("Stripe-Signature", stripesim.Sign(payload, secret, time.Now()))
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var out map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			return resp.StatusCode, out
		},
	} {
		status, out := deliver()
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Equal(t, "webhook_signature_invalid", out["code"], name)
	}
	st, _, _ := b.payment(t)
	require.Equal(t, "requires_capture", st)
	require.Zero(t, b.count(t, "SELECT count(*) FROM stripe_events"))
	require.Zero(t, b.count(t, "SELECT count(*) FROM staged_jobs"))
}

func TestWebhook_unknownTypesAndPaymentsAreAcknowledgedAndRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().Unix()
	status, out := b.deliver(t, event("evt_cus", "customer.created", now, map[string]any{"id": "cus_1", "object": "customer"}), secret, time.Now())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "ignored", out["outcome"])

	other := intent("pi_elsewhere", "succeeded", 100)
	other["metadata"] = map[string]string{}
	status, out = b.deliver(t, event("evt_other", "payment_intent.succeeded", now, other), secret, time.Now())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "unmatched", out["outcome"])
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM stripe_events WHERE outcome IN ('ignored', 'unmatched')"))
}

func TestWebhook_outrunsTheFlowAndFindsThePaymentByMetadata(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.pool.Exec(context.Background(), unrecordIntent)
	require.NoError(t, err)
	_, out := b.deliver(t, event("evt_fast", "payment_intent.succeeded", time.Now().Unix(), intent("pi_w", "succeeded", 2000)), secret, time.Now())
	require.Equal(t, "applied", out["outcome"])
	st, _, _ := b.payment(t)
	require.Equal(t, "succeeded", st)
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments WHERE stripe_payment_intent = 'pi_w'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.succeeded'"))
}

// unrecordIntent puts the fixture's payment back to before its flow
// recorded its PaymentIntent: processing, and found by no PaymentIntent
// (payments.stripe_payment_intent and payment_intents, migration 000024).
const unrecordIntent = "UPDATE payments SET status = 'processing', stripe_payment_intent = NULL; DELETE FROM payment_intents"
