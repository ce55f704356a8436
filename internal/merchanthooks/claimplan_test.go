package merchanthooks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/dbtest"
)

// A backlog of deliveries waiting for their retry (an endpoint that has
// been failing for hours) costs a claim nothing: the claim reads the due
// deliveries in next_attempt_at order and stops at its scan size, whatever
// waits behind them.
func TestClaimDueDeliveries_aBacklogWaitingForItsRetryIsNotRead(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	ctx := context.Background()
	b.endpoint(t, "we_down", "http://127.0.0.1:9/")
	b.endpoint(t, "we_up", "http://127.0.0.1:9/")
	_, err := b.pool.Exec(ctx, `INSERT INTO events (id, user_id, type, data)
		SELECT 'evt_backlog_' || n, $1, 'payment.succeeded', '{"id":"pay_1"}' FROM generate_series(1, 20000) n`, b.alice)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, next_attempt_at)
		SELECT 'evt_backlog_' || n, CASE WHEN n <= 3 THEN 'we_up' ELSE 'we_down' END, $1,
		       CASE WHEN n <= 3 THEN now() - interval '1 second' ELSE now() + interval '1 hour' END
		FROM generate_series(1, 20000) n`, b.alice)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "ANALYZE webhook_deliveries")
	require.NoError(t, err)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	plan := dbtest.Explain(t, tx, func(q dbsqlc.DBTX) error {
		_, err := dbsqlc.New().ClaimDueDeliveries(ctx, q, dbsqlc.ClaimDueDeliveriesParams{
			LeaseSeconds: 30, Busy: []string{}, ScanSize: 400, InflightEndpoints: []string{}, InflightCounts: []int32{},
			PerEndpoint: 10, BatchSize: 100,
		})
		return err
	})
	t.Logf("plan: %s; %d buffers", plan, plan.Buffers)
	require.Less(t, plan.Buffers, int64(100), "the 19,997 deliveries waiting for their retry are not read")
}

// Recording a batch of attempts reads each delivery by its key, whatever
// the table holds: 20,000 deliveries made, 400 of them pending,
// spread over the table. With the condition written
// status = 'pending', the planner hashed the batch and read every pending
// delivery through a partial index (WHERE status = 'pending'), all of them
// for each batch of 25 (401 buffers here, against 75): make bench's F measured the record at 6 ms
// a call, 0.26 ms of PostgreSQL per payment, the background's costliest
// statement.
func TestRecordWebhookAttempts_readsEachDeliveryByItsKey(t *testing.T) {
	t.Parallel()
	b := newDispatchBundle(t)
	ctx := context.Background()
	b.endpoint(t, "we_1", "http://127.0.0.1:9/")
	_, err := b.pool.Exec(ctx, `INSERT INTO events (id, user_id, type, data)
		SELECT 'evt_rec_' || n, $1, 'payment.succeeded', '{"id":"pay_1"}' FROM generate_series(1, 20000) n`, b.alice)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, status, next_attempt_at)
		SELECT 'evt_rec_' || n, 'we_1', $1, CASE WHEN n % 50 = 0 THEN 'pending' ELSE 'succeeded' END,
		       CASE WHEN n % 50 = 0 THEN now() END
		FROM generate_series(1, 20000) n`, b.alice)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "ANALYZE webhook_deliveries")
	require.NoError(t, err)

	var p dbsqlc.RecordWebhookAttemptsParams
	for n := 1; n <= 25; n++ {
		p.EventIds = append(p.EventIds, fmt.Sprintf("evt_rec_%d", 50*n))
		p.EndpointIds = append(p.EndpointIds, "we_1")
		p.Cycles = append(p.Cycles, 1)
		p.Statuses = append(p.Statuses, "succeeded")
		p.AttemptTimes = append(p.AttemptTimes, time.Now())
		p.DurationMs = append(p.DurationMs, 3)
		p.StatusCodes = append(p.StatusCodes, 204)
		p.Errors = append(p.Errors, "")
		p.NextAttempts = append(p.NextAttempts, time.Now())
	}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	plan := dbtest.Explain(t, tx, func(q dbsqlc.DBTX) error {
		_, err := dbsqlc.New().RecordWebhookAttempts(ctx, q, p)
		return err
	})
	t.Logf("plan: %s; %d buffers", plan, plan.Buffers)
	require.Contains(t, plan.Nodes, "Index Scan webhook_deliveries_pkey")
	require.Less(t, plan.Buffers, int64(200), "25 deliveries, each by its key, not the 400 pending")
}
