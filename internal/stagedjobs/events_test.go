package stagedjobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/stagedjobs"
)

// addEndpoint registers an endpoint of userID's that subscribes to
// enabledEvents, created at created.
func (b *testBundle) addEndpoint(t *testing.T, id string, userID int64, created time.Time, enabledEvents ...string) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, secret, created_at)
		VALUES ($1, $2, 'https://example.com/hooks', $3, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', $4)`, id, userID, enabledEvents, created)
	require.NoError(t, err)
}

// stageTx stages jobs the way a flow does: in a transaction of its own.
func (b *testBundle) stageTx(t *testing.T, jobs ...stagedjobs.Job) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, stagedjobs.StageUnkeyedTx(ctx, tx, jobs...))
	require.NoError(t, tx.Commit(ctx))
}

// riverJobs lists River's jobs as "kind args", in insertion order.
func (b *testBundle) riverJobs(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT kind || ' ' || args::text FROM river_job ORDER BY id")
	require.NoError(t, err)
	var jobs []string
	for rows.Next() {
		var j string
		require.NoError(t, rows.Scan(&j))
		jobs = append(jobs, j)
	}
	require.NoError(t, rows.Err())
	return jobs
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// The drain writes an event itself, with one delivery per endpoint that
// subscribed when the event was created, each due at once for the webhook
// dispatcher: no River job for the event nor for its deliveries, no second
// trip through staged_jobs. A crash before its commit writes nothing; the
// next drain writes it once.
func TestEnqueuer_writesEventsAndTheirDeliveriesDueAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	alice := b.seedPayment(t, "pay_events")
	var bob int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT id FROM users WHERE email = 'bob@example.com'").Scan(&bob))

	event := stagedjobs.NewEventArgs(alice, "payment.succeeded", json.RawMessage(`{"id":"pay_events","amount":2000}`))
	now := time.Now() // the event's created is the staging's, a moment later
	before := now.Add(-time.Minute)
	b.addEndpoint(t, "we_all", alice, before, "*")
	b.addEndpoint(t, "we_prefix", alice, before, "payment.*")
	b.addEndpoint(t, "we_refunds", alice, before, "refund.*")      // not subscribed
	b.addEndpoint(t, "we_newer", alice, now.Add(time.Minute), "*") // younger than the event
	b.addEndpoint(t, "we_bobs", bob, before, "*")                  // another user's
	b.stageTx(t,
		stagedjobs.Job{Kind: stagedjobs.MerchantEvent, Args: event},
		stagedjobs.Job{Kind: stagedjobs.ReceiptEmail, Args: stagedjobs.ReceiptArgs{UserID: alice, Payment: "pay_events", Amount: 2000, Currency: "usd", Reason: "payment"}},
	)

	var stagedAt time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT created_at FROM staged_jobs WHERE kind = 'merchant_event'").Scan(&stagedAt))

	crashing := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river, BeforeCommit: crashOnce()})
	_, err := crashing.DrainOnce(ctx)
	require.Error(t, err, "the drain died before its commit")
	require.Zero(t, b.count(t, "SELECT count(*) FROM events"), "the event died with it")
	require.Zero(t, b.count(t, "SELECT count(*) FROM webhook_deliveries"))
	require.Empty(t, b.riverJobs(t))

	b.drainUntilEmpty(t, crashing)
	require.NoError(t, crashing.DrainAll(ctx)) // and once more: nothing is left to do twice

	var typ, data string
	var created time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT type, data::text, created_at FROM events WHERE id = $1 AND user_id = $2",
		event.EventID, alice).Scan(&typ, &data, &created))
	require.Equal(t, "payment.succeeded", typ)
	require.JSONEq(t, `{"id":"pay_events","amount":2000}`, data)
	require.Equal(t, stagedAt, created, "the event's created is its staging's, on the database's clock")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM events"))

	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM webhook_deliveries"))
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE event_id = $1 AND endpoint_id IN ('we_all', 'we_prefix') AND status = 'pending'", event.EventID))

	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1
		AND cycle = 0 AND cycle_attempts = 0 AND next_attempt_at <= now()`, event.EventID), "both due at once, in their first cycle")

	require.Empty(t, b.riverJobs(t), "the receipt is written by the drain too")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM receipts WHERE payment_id = 'pay_events' AND next_attempt_at <= now() AND sent_at IS NULL"),
		"due at once for the receipt sender")
}

// A staged event the drain cannot write (here one whose arguments are not an
// event at all) must not stop the drain: the batch's events go to River as
// jobs of their own, where EventWorker writes the good ones and River's
// retries hold the bad one alone; the rest of the batch moves as usual.
func TestEnqueuer_anEventItCannotWriteBlocksNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	alice := b.seedPayment(t, "pay_poison")
	good := stagedjobs.NewEventArgs(alice, "payment.succeeded", json.RawMessage(`{"id":"pay_poison"}`))
	b.stageTx(t,
		stagedjobs.Job{Kind: stagedjobs.MerchantEvent, Args: map[string]int{"n": 1}},
		stagedjobs.Job{Kind: stagedjobs.MerchantEvent, Args: good},
		stagedjobs.Job{Kind: stagedjobs.ReceiptEmail, Args: map[string]int{"n": 2}},
	)

	var stagedAt time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT created_at FROM staged_jobs WHERE args->>'event_id' = $1", good.EventID).Scan(&stagedAt))

	e := stagedjobs.NewEnqueuer(stagedjobs.EnqueuerConfig{Pool: b.pool, River: b.river})
	moved, err := e.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, moved)
	var created time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT (args->>'created')::timestamptz FROM river_job WHERE args->>'event_id' = $1", good.EventID).Scan(&created))
	require.True(t, stagedAt.Equal(created), "the job carries the event's created, its staging's: %s, not %s", created, stagedAt)
	require.Zero(t, b.staged(t))
	require.Zero(t, b.count(t, "SELECT count(*) FROM events"), "the batch's events were not written here")
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'merchant_event'"), "but handed to River")
	require.Equal(t, 1, b.riverCounts(t)[2], "and the receipt moved as usual")
}
