package payments_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/users"
)

// capturing is a DBTX that records the statement a query would run, and
// runs nothing.
type capturing struct {
	sql  string
	args []any
}

var errCaptured = errors.New("captured")

func (c *capturing) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, errCaptured
}

func (c *capturing) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errCaptured
}

func (c *capturing) QueryRow(context.Context, string, ...any) pgx.Row { panic("not used") }

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType        string     `json:"Node Type"`
	IndexName       string     `json:"Index Name"`
	ActualRows      float64    `json:"Actual Rows"`
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	RemovedByJoin   float64    `json:"Rows Removed by Join Filter"`
	Plans           []planNode `json:"Plans"`
}

// rowsRead sums, over the plan, the rows the scans of index read (those
// returned and those a filter removed) and the rows join filters removed.
func (n planNode) rowsRead(index string) float64 {
	var read float64
	if n.IndexName == index {
		read += n.ActualRows + n.RemovedByFilter
	}
	read += n.RemovedByJoin
	for _, c := range n.Plans {
		read += c.rowsRead(index)
	}
	return read
}

// The reconciler's claim reads the index of next_check_at up to now and no
// further: the payments it is done with, retired to the year 9999
// (RetireUnwatchedPayments), are most of the table on a service that ran
// a while, and a claim that walked them all (the clock CTE, materialized,
// kept the bound out of the index scan: a join filter instead) cost 0.4 s
// per pass at 100,000 payments, each pass, every ReconcileInterval, and in
// make bench's scenario G a third of the drain's database time.
func TestClaimPaymentsToReconcile_readsNoPaymentItIsDoneWith(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO payments (id, user_id, amount, currency, status, capture, amount_captured, payment_method,
			stripe_payment_intent, next_check_at)
		SELECT 'pay_retired_' || g, (SELECT min(id) FROM users), 2000, 'usd', 'succeeded', true, 2000, 'pm_card_visa',
			'pi_retired_' || g, '9999-12-31 00:00:00+00'
		FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO payments (id, user_id, amount, currency, status, capture, amount_captured, payment_method,
			stripe_payment_intent)
		SELECT 'pay_new_' || g, (SELECT min(id) FROM users), 2000, 'usd', 'succeeded', true, 2000, 'pm_card_visa', 'pi_new_' || g
		FROM generate_series(1, 50) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE payments")
	require.NoError(t, err)

	c := &capturing{}
	_, err = dbsqlc.New().ClaimPaymentsToReconcile(ctx, c, dbsqlc.ClaimPaymentsToReconcileParams{
		AfterSeconds: 300, WatchSeconds: 90 * 86400, AuthorisationSeconds: 7 * 86400, BackoffCapSeconds: 6 * 3600, RowLimit: 100,
	})
	require.ErrorIs(t, err, errCaptured)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // EXPLAIN ANALYZE runs the claim: leave nothing claimed
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+c.sql, c.args...).Scan(&out))
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal(out, &plans))
	require.Len(t, plans, 1)
	require.LessOrEqual(t, plans[0].Plan.rowsRead("payments_next_check_idx"), float64(50),
		"the claim read the 50 new payments (none due yet) and none of the 20,000 retired: %s", out)
}
