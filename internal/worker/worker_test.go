package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/api"
	"github.com/example/payments/internal/app"
	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/smtptest"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
	"github.com/example/payments/internal/worker"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// poolSize is the test service's pool: small, so that a handful of stuck
// receipts would take every connection.
const poolSize = 4

// testBundle is the service as `payments dev` runs it, in one process: the
// API and the background work on one pool, the simulator over HTTP, and a
// fake SMTP server for receipts.
type testBundle struct {
	app  *app.App
	api  string
	smtp *smtptest.Server
	// stopWorker ends the worker's context; workerDone then receives
	// worker.Run's error.
	stopWorker func()
	workerDone chan error
}

// setup starts the service; adjust, if given, changes the worker's
// configuration before it starts.
func setup(t *testing.T, mail smtptest.Behaviour, adjust ...func(*worker.Config)) *testBundle {
	t.Helper()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{})
	simServer := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { simServer.Close(); sim.Close() })
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_worker", APIBase: simServer.URL})
	require.NoError(t, err)

	a, err := app.New(ctx, app.Config{
		DatabaseURL: dbtest.NewURL(t), Pool: db.PoolConfig{MaxConns: poolSize}, KeyTTL: time.Hour, Stripe: stripe,
	})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	require.NoError(t, users.SeedDemoUsers(ctx, a.Pool))
	handler, err := a.APIHandler(api.RateLimit{}, 0)
	require.NoError(t, err)
	apiServer := httptest.NewServer(handler)
	t.Cleanup(apiServer.Close)

	smtp, err := smtptest.Start(smtptest.Config{Behaviour: mail})
	require.NoError(t, err)
	mailer, err := stagedjobs.NewMailer(smtp.URL(), stagedjobs.SMTPTimeouts{}, a.Log)
	require.NoError(t, err)
	cfg := worker.Config{
		Pool: a.Pool, Logger: a.Log, Engine: a.Engine, Mailer: mailer, Payments: a.Payments,
		CompleterInterval: 300 * time.Millisecond, EnqueuerPollInterval: 50 * time.Millisecond,
		RetryPolicy: quickRetries{}, ReceiptRetryDelay: func(attempt int) time.Duration { return time.Duration(attempt) * 100 * time.Millisecond },
	}
	for _, f := range adjust {
		f(&cfg)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- worker.Run(runCtx, cfg) }()
	t.Cleanup(func() {
		stop()
		select {
		case err, ok := <-done:
			if ok {
				require.NoError(t, err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	// Registered last, so it runs first: dropping the SMTP server's
	// connections ends any send still hanging, whatever the code under
	// test does with its deadlines.
	t.Cleanup(func() { _ = smtp.Close() })
	return &testBundle{app: a, api: apiServer.URL, smtp: smtp, stopWorker: stop, workerDone: done}
}

// quickRetries retries a failed job after 100 ms times its attempt: River's
// backoff, shrunk to test time.
type quickRetries struct{}

func (quickRetries) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(time.Duration(job.Attempt) * 100 * time.Millisecond)
}

// createPayment creates a payment through the API within budget, and
// returns its id.
func (b *testBundle) createPayment(t *testing.T, key string, budget time.Duration) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.api+"/v1/payments",
		strings.NewReader(`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+users.DemoUsers[0].APIKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	began := time.Now()
	resp, err := (&http.Client{Timeout: budget}).Do(req)
	require.NoError(t, err, "creating payment %s (after %s)", key, time.Since(began))
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var p struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p.ID
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.app.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// With the mail server hung, and more receipts waiting on it than the pool
// has connections, the API still answers within its budget and the rest of
// the background work (the drain, events, webhook deliveries, the
// completer) goes on. (Until make bench's scenario F showed that 4 receipt
// workers cap receipts at 40 a second, there were fewer receipt workers
// than connections; a receipt never held a connection while it sends, and
// this test now shows it.) The mailer has RFC 5321's timeouts, unscaled: a
// server hung before its greeting holds each send 5 minutes, one hung
// after the message's end 10 minutes, far longer than this test.
func TestRun_aHungMailServerStallsNothingElse(t *testing.T) {
	t.Parallel()
	for _, mode := range []smtptest.Mode{smtptest.HangOnConnect, smtptest.HangOnData} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Behaviour{Mode: mode})
			var hooks atomic.Int64
			receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hooks.Add(1)
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(receiver.Close)
			_, err := b.app.Pool.Exec(context.Background(), `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, secret)
				SELECT 'we_hung', id, $1, '{*}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' FROM users WHERE email = 'alice@example.com'`, receiver.URL)
			require.NoError(t, err)

			const payments = 3 * poolSize
			for i := range payments {
				b.createPayment(t, fmt.Sprintf("hung-%d", i), 5*time.Second)
			}
			// More receipts wait on the hung server at once than the pool has
			// connections: they hold none while they wait.
			require.Eventually(t, func() bool { return b.smtp.OpenConnections() > poolSize }, 10*time.Second, 20*time.Millisecond,
				"receipts are waiting on the hung server")
			require.Zero(t, b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'receipt_email'"),
				"receipts wait in the receipt sender's slots, not on River's workers")
			completersBefore := b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'completer' AND state = 'completed'")

			// Once receipts hang, the API still answers, reads and writes alike.
			b.createPayment(t, "after-the-hang", 5*time.Second)
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(b.api + "/readyz")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)

			// The drain empties staged_jobs, every payment gets its event and
			// its webhook delivery, and the completer keeps running.
			require.Eventually(t, func() bool {
				return b.count(t, "SELECT count(*) FROM staged_jobs") == 0 &&
					b.count(t, "SELECT count(*) FROM events WHERE type = 'payment.succeeded'") == payments+1
			}, 15*time.Second, 50*time.Millisecond, "the drain and the event jobs go on")
			require.Eventually(t, func() bool {
				return b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = 'we_hung' AND status = 'succeeded'") == payments+1
			}, 15*time.Second, 50*time.Millisecond, "the webhook deliveries go on")
			require.GreaterOrEqual(t, hooks.Load(), int64(payments+1))
			require.Eventually(t, func() bool {
				return b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'completer' AND state = 'completed'") > completersBefore
			}, 15*time.Second, 50*time.Millisecond, "the completer goes on")
			require.Empty(t, b.smtp.Accepted())
			require.Zero(t, b.count(t, "SELECT count(*) FROM receipts WHERE sent_at IS NOT NULL"))
			require.Greater(t, b.smtp.OpenConnections(), poolSize, "and the receipts still wait")
		})
	}
}

// A send waiting for the answer to the end of its DATA (RFC 5321's 10
// minutes, unscaled) does not hold the worker's shutdown past its shutdown
// timeout: it is cancelled then, and gives its receipt's reservation back,
// so that the retry need not wait for it to lapse (docs/failure-scenarios.md
// says what that costs when the server accepts the message all the same).
func TestRun_aSendWaitingForTheEndOfDataDoesNotHoldTheShutdown(t *testing.T) {
	t.Parallel()
	const shutdownTimeout = time.Second
	b := setup(t, smtptest.Behaviour{Mode: smtptest.HangOnData},
		func(cfg *worker.Config) { cfg.ShutdownTimeout = shutdownTimeout })
	paymentID := b.createPayment(t, "hung-at-shutdown", 5*time.Second)
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM receipts WHERE payment_id = $1 AND sending_until IS NOT NULL", paymentID) == 1 &&
			b.smtp.OpenConnections() == 1
	}, 10*time.Second, 20*time.Millisecond, "the receipt is being sent")

	began := time.Now()
	b.stopWorker()
	select {
	case err := <-b.workerDone:
		require.NoError(t, err)
		close(b.workerDone)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop")
	}
	took := time.Since(began)
	require.GreaterOrEqual(t, took, shutdownTimeout, "running jobs had the shutdown timeout to finish")
	require.Less(t, took, shutdownTimeout+5*time.Second, "then the send was cancelled")
	require.Zero(t, b.count(t, "SELECT count(*) FROM receipts WHERE payment_id = $1 AND (sending_until IS NOT NULL OR sent_at IS NOT NULL)", paymentID),
		"its reservation given back, nothing recorded as sent")
	require.Empty(t, b.smtp.Accepted())
}

// receiptAttempts is how many sends of a payment's receipt the receipt
// sender made.
func (b *testBundle) receiptAttempts(t *testing.T, paymentID string) int {
	t.Helper()
	return b.count(t, "SELECT coalesce(sum(attempts), 0) FROM receipts WHERE payment_id = $1", paymentID)
}

func (b *testBundle) receiptSent(t *testing.T, paymentID string) bool {
	t.Helper()
	return b.count(t, "SELECT count(*) FROM receipts WHERE payment_id = $1 AND sent_at IS NOT NULL", paymentID) == 1
}

// A mail server slower than River's job timeout, which accepts all the
// same: the receipt is recorded as sent, and never sent again (the send's
// deadline is the mailer's, RFC 5321's, whatever River's job timeout).
func TestRun_aSlowMailServerGetsEachReceiptOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Behaviour{Mode: smtptest.Accept, Delay: 2 * time.Second},
		func(cfg *worker.Config) { cfg.JobTimeout = time.Second })
	paymentID := b.createPayment(t, "slow", 5*time.Second)

	if !assert.Eventually(t, func() bool {
		return b.receiptSent(t, paymentID) && b.receiptAttempts(t, paymentID) == 1
	}, 20*time.Second, 50*time.Millisecond, "the receipt is recorded as sent, after one send") {
		t.Fatalf("copies accepted by the mail server meanwhile: %d", len(b.smtp.Accepted()))
	}
	require.Len(t, b.smtp.Accepted(), 1, "one copy accepted: the job did not run again")
	require.Equal(t, "alice@example.com", b.smtp.Accepted()[0].To[0])
}

// A mail server that refuses for a while (451): the receipt is retried
// with backoff, and sent once it accepts.
func TestRun_aFailingMailServerGetsTheReceiptOnceItAccepts(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Behaviour{Mode: smtptest.Fail, FailCode: 451, FailTimes: 2})
	paymentID := b.createPayment(t, "failing", 5*time.Second)

	require.Eventually(t, func() bool { return b.receiptSent(t, paymentID) }, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, 3, b.receiptAttempts(t, paymentID), "two refusals, then the send")
	require.Len(t, b.smtp.Accepted(), 1)
	require.Equal(t, 3, b.smtp.Connections(), "one connection per attempt")
}
