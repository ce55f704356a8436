package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

var metricsListening = regexp.MustCompile(`"msg":"metrics listening","addr":"([^"]+)"`)

func TestWorker_finishesAPaymentWhoseClientVanished(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)

	// The service dies right after committing the payment row; the client
	// never retries.
	doomed, base := startServe(t, dbURL, simURL, "PAYMENTS_FAILPOINTS=after_commit:payment_created=crash")
	_, _, err := createPayment(t, base, "vanished")
	require.Error(t, err)
	<-doomed.exited

	worker := startProc(t, []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_LOCK_TIMEOUT=1s", "PAYMENTS_COMPLETER_INTERVAL=200ms", "PAYMENTS_COMPLETER_GRACE=100ms",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0"}, "worker")
	metricsURL := "http://" + worker.waitFor(t, &worker.stderr, metricsListening) + "/metrics"

	pool := dbtestPool(t, dbURL)
	ctx := context.Background()
	var point, paymentID string
	var code *int32
	require.Eventually(t, func() bool {
		require.NoError(t, pool.QueryRow(ctx,
			"SELECT recovery_point, response_code FROM idempotency_keys WHERE idempotency_key = 'vanished'").Scan(&point, &code))
		return point == "finished"
	}, 30*time.Second, 50*time.Millisecond, "the completer finishes the request")
	require.EqualValues(t, 201, *code)
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM payments").Scan(&paymentID))
	require.Len(t, simPaymentIntents(t, simURL, paymentID), 1, "one PaymentIntent")

	// Its staged jobs reach River and run: the merchant's event appears.
	require.Eventually(t, func() bool {
		var events int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = 'payment.succeeded'").Scan(&events))
		return events == 1
	}, 30*time.Second, 50*time.Millisecond)

	resp, err := http.Get(metricsURL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	for _, m := range []string{"payments_completer_keys_finished_total 1", "payments_staged_jobs_drained_total 2",
		"payments_staged_jobs_backlog 0", "payments_reaper_keys_deleted_total 0"} {
		require.Contains(t, string(body), m)
	}
}

// The simulator here sends no webhooks, so the charge.refund.updated that
// settles a pending refund is lost: the worker's reconciler asks Stripe
// about it once it has gone PAYMENTS_RECONCILE_AFTER without word from
// Stripe, and settles it.
func TestWorker_settlesARefundWhoseWebhookWasLost(t *testing.T) {
	t.Parallel()
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	_, base := startServe(t, dbURL, simURL)

	status, data, err := postIdempotent(t, base, "/v1/payments", "order-1",
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_pendingRefund"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	var pay struct{ ID string }
	require.NoError(t, json.Unmarshal(data, &pay))
	status, data, err = postIdempotent(t, base, "/v1/refunds", "refund-1", `{"payment":"`+pay.ID+`","amount":500}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	var re struct{ ID, Status string }
	require.NoError(t, json.Unmarshal(data, &re))
	require.Equal(t, "pending", re.Status)

	startProc(t, []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_RECONCILE_AFTER=1s", "PAYMENTS_RECONCILE_INTERVAL=200ms",
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0"}, "worker")
	pool := dbtestPool(t, dbURL)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var refundStatus string
		var refunded int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT r.status, p.amount_refunded FROM refunds r JOIN payments p ON p.id = r.payment_id
			WHERE r.id = $1`, re.ID).Scan(&refundStatus, &refunded))
		return refundStatus == "succeeded" && refunded == 500
	}, 30*time.Second, 50*time.Millisecond, "the reconciler settles the refund")
	require.Eventually(t, func() bool {
		var events int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = 'refund.succeeded'").Scan(&events))
		return events == 1
	}, 30*time.Second, 50*time.Millisecond, "refund.succeeded is announced when it settles")
}

// A refund made in Stripe's dashboard while no webhook reaches the service
// (this simulator sends none): the real worker's reconciler reads it in
// Stripe's event log, and the API shows it within two
// PAYMENTS_RECONCILE_INTERVALs (docs/API.md section 2).
func TestWorker_aDashboardRefundShowsWithinTwoIntervals(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	simURL := startSimulator(t)
	dbURL := dbtest.NewURL(t)
	seedDemoUsers(t, dbURL)
	_, base := startServe(t, dbURL, simURL)
	status, data, err := postIdempotent(t, base, "/v1/payments", "order-1",
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, string(data))
	var pay struct {
		ID                  string
		StripePaymentIntent string `json:"stripe_payment_intent"`
	}
	require.NoError(t, json.Unmarshal(data, &pay))

	startProc(t, []string{"DATABASE_URL=" + dbURL, "STRIPE_API_BASE=" + simURL, "STRIPE_SECRET_KEY=",
		"PAYMENTS_RECONCILE_INTERVAL=" + interval.String(),
		"PAYMENTS_FAILPOINTS=", "PAYMENTS_METRICS_ADDR=127.0.0.1:0"}, "worker")
	pool := dbtestPool(t, dbURL)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var read bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT read_at IS NOT NULL FROM stripe_event_cursor").Scan(&read))
		return read
	}, 30*time.Second, 20*time.Millisecond, "the worker's reconciler reads the log")

	form := url.Values{"payment_intent": {pay.StripePaymentIntent}, "amount": {"700"}}
	req, _ := http.NewRequest(http.MethodPost, simURL+"/v1/refunds", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer sk_test_dashboard")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	made := time.Now()

	require.Eventually(t, func() bool {
		var refunded int64
		require.NoError(t, pool.QueryRow(ctx, "SELECT amount_refunded FROM payments WHERE id = $1", pay.ID).Scan(&refunded))
		return refunded == 700
	}, 30*time.Second, 20*time.Millisecond, "the dashboard's refund shows")
	took := time.Since(made)
	t.Logf("a dashboard refund showed %v after it was made (interval %v)", took, interval)
	require.Less(t, took, 2*interval, "within two intervals")
}
