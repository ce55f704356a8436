package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/stripesim"
)

// Issue 39 and docs/API.md section 11, on a PostgreSQL cluster of the
// test's own: while no commit is possible a request answers 503
// service_unavailable with Retry-After, never 500; nothing final is stored;
// the key is free again within 5 s of the database taking writes (not
// after its 90 s lock lifetime); a retry with the same key gets the one
// right answer, with one PaymentIntent at the simulator; /readyz is 503
// while no commit is possible, 200 once one is.

// setupOwnCluster is setup on a cluster of the test's own, with
// transactions bounded by txTimeout (PAYMENTS_DB_TX_TIMEOUT) and the
// engine's default lock lifetime (90 s).
func setupOwnCluster(t *testing.T, txTimeout time.Duration) (*testBundle, *dbtest.Cluster) {
	t.Helper()
	cluster := dbtest.NewCluster(t)
	pool, err := db.Open(context.Background(), cluster.URL(), db.PoolConfig{MaxConns: 8, TxTimeout: txTimeout})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return setup(t, setupOpts{pool: pool}), cluster
}

// requireServiceUnavailable checks a 503 service_unavailable with Retry-After.
func requireServiceUnavailable(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	requireProblem(t, resp, body, http.StatusServiceUnavailable, "service_unavailable")
	requireRetryAfter(t, resp)
}

// keyUnlocked tells whether idemKey's row is there and unlocked.
func keyUnlocked(pool *pgxpool.Pool, idemKey string) bool {
	var unlocked bool
	err := pool.QueryRow(context.Background(),
		"SELECT locked_at IS NULL FROM idempotency_keys WHERE idempotency_key = $1", idemKey).Scan(&unlocked)
	return err == nil && unlocked
}

// The database's server stops (its machine dies) while a request is inside
// Stripe: recording Stripe's answer fails, the request answers 503, the
// key is unlocked in the background as soon as the server is back, and the
// retry resumes from the recovery point (the PaymentIntent Stripe made is
// the one the payment gets).
func TestFailover_theDatabaseStopsWhileARequestIsInsideStripe(t *testing.T) {
	t.Parallel()
	b, cluster := setupOwnCluster(t, 2*time.Second)
	done := b.startSlowCreate(t, "db-dies-1", 2*time.Second)
	cluster.Stop()

	first := <-done
	require.NoError(t, first.err)
	requireServiceUnavailable(t, first.resp, first.body)
	require.Equal(t, 1, b.simIntentCreations())

	resp, body := b.post(t, aliceKey, pathPayments, "db-dies-1", visaBody)
	requireServiceUnavailable(t, resp, body) // still down: 503 again, never 500
	resp, body = b.do(t, http.MethodGet, "/readyz", "", nil, nil)
	requireServiceUnavailable(t, resp, body)

	cluster.Start()
	writable := time.Now()
	for !keyUnlocked(b.pool, "db-dies-1") {
		require.Less(t, time.Since(writable), 5*time.Second, "the key is unlocked within 5 s of the database taking writes")
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("key unlocked %v after the database was back", time.Since(writable).Round(time.Millisecond))
	resp, body = b.do(t, http.MethodGet, "/readyz", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	p := b.createPayment(t, aliceKey, "db-dies-1", visaBody)
	require.Equal(t, "succeeded", p.Status)
	require.Equal(t, 1, b.simIntentCreations(), "the retry replayed Stripe's answer: one PaymentIntent")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments"))
}

// The primary loses its synchronous standby (as an old primary cut off by
// a failover): every commit waits for it forever. A request whose record
// of Stripe's answer is waiting, and one whose claim is waiting, each
// answer 503 at the transaction's deadline (PAYMENTS_DB_TX_TIMEOUT, 1 s
// here), and so does the retry of a key Stripe had failed (its claim of an
// existing key waits); /readyz says 503 within 5 s. Once the standby is no
// longer required the waiting commits land, the keys are unlocked within
// 5 s, and each retry gets its one right answer: one PaymentIntent per key.
func TestFailover_commitsThatWaitForALostStandby(t *testing.T) {
	t.Parallel()
	b, cluster := setupOwnCluster(t, time.Second)
	// A key that exists, unfinished and unlocked: Stripe failed its first
	// attempt. Its retry's claim (of an existing key) will wait too.
	b.addFault(t, stripesim.FaultError500, 0)
	resp, body := b.post(t, aliceKey, pathPayments, "standby-lost-3", visaBody)
	requireProblem(t, resp, body, http.StatusServiceUnavailable, "payment_processor_unavailable")
	require.True(t, keyUnlocked(b.pool, "standby-lost-3"))

	done := b.startSlowCreate(t, "standby-lost-1", 2*time.Second)
	cluster.SetSynchronousStandbys("phantom")
	lost := time.Now()

	for {
		resp, body := b.do(t, http.MethodGet, "/readyz", "", nil, nil)
		if resp.StatusCode == http.StatusServiceUnavailable {
			requireServiceUnavailable(t, resp, body)
			break
		}
		require.Less(t, time.Since(lost), 5*time.Second, "/readyz says 503 within 5 s of commits becoming impossible")
	}

	first := <-done
	require.NoError(t, first.err)
	requireServiceUnavailable(t, first.resp, first.body)

	calls := len(b.simRequests(http.MethodPost, "/v1/payment_intents"))
	for _, key := range []string{"standby-lost-2", "standby-lost-3"} {
		began := time.Now()
		resp, body = b.post(t, aliceKey, pathPayments, key, visaBody)
		requireServiceUnavailable(t, resp, body)
		require.Less(t, time.Since(began), 3*time.Second, "%s: the claim's commit ended at the 1 s deadline", key)
	}
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), calls, "the claims never committed: Stripe was not called for them")

	cluster.SetSynchronousStandbys("")
	writable := time.Now()
	for !keyUnlocked(b.pool, "standby-lost-1") || !keyUnlocked(b.pool, "standby-lost-2") || !keyUnlocked(b.pool, "standby-lost-3") {
		require.Less(t, time.Since(writable), 5*time.Second, "every key is unlocked within 5 s of the database taking writes")
		time.Sleep(20 * time.Millisecond)
	}
	var token int64
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT lock_token FROM idempotency_keys WHERE idempotency_key = 'standby-lost-3'").Scan(&token))
	require.EqualValues(t, 2, token, "the retry's claim landed once the standby was no longer required, and was unlocked")
	t.Logf("keys unlocked %v after the standby was no longer required", time.Since(writable).Round(time.Millisecond))
	resp, body = b.do(t, http.MethodGet, "/readyz", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	p1 := b.createPayment(t, aliceKey, "standby-lost-1", visaBody)
	p2 := b.createPayment(t, aliceKey, "standby-lost-2", visaBody)
	p3 := b.createPayment(t, aliceKey, "standby-lost-3", visaBody)
	for _, p := range []paymentJSON{p1, p2, p3} {
		require.Equal(t, "succeeded", p.Status)
	}
	require.NotEqual(t, p1.ID, p2.ID)
	require.NotEqual(t, p2.ID, p3.ID)
	require.Len(t, b.simIntents(t), 3, "one PaymentIntent per key")
	for _, p := range []paymentJSON{p1, p2, p3} {
		require.Len(t, b.simIntentsFor(t, p.ID), 1, p.ID)
	}
	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM payments"))

	resp, body = b.do(t, http.MethodGet, "/metrics", "", nil, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, `payments_http_unavailable_total\{code="service_unavailable"\} [2-9]`, string(body))
}
