package console_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/users"
)

// A payment's page and the list of receipts read their own rows, however
// many events and receipts the database holds (migration 000031): here one
// user's 20,000 payments, each with an event and a sent receipt, and one
// payment with three events (its own, and two of a refund's) and a receipt
// not sent. The rows each query reads, by sequential scans and through
// indexes, are counted in the transaction it runs in.
func TestConsole_aPaymentsEventsAndTheReceiptsAreReadThroughIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	u, err := users.Authenticate(ctx, pool, users.DemoUsers[0].APIKey)
	require.NoError(t, err)
	const many = 20_000
	const target = "pay_00020001" // the newest payment
	for _, stmt := range []string{`
		INSERT INTO payments (id, user_id, amount, currency, status, payment_method, created_at)
		SELECT 'pay_' || lpad(g::text, 8, '0'), $1::bigint, 1500, 'usd', 'succeeded', 'pm_card_visa', now() - make_interval(secs => $2 - g)
		FROM generate_series(1, $2::int + 1) g`, `
		INSERT INTO events (id, user_id, type, data, created_at)
		SELECT 'evt_' || lpad(g::text, 8, '0'), $1::bigint, 'payment.succeeded', jsonb_build_object('id', 'pay_' || lpad(g::text, 8, '0')),
			now() - make_interval(secs => $2 - g)
		FROM generate_series(1, $2::int) g`, `
		INSERT INTO receipts (payment_id, kind, recipient, sent_at, created_at)
		SELECT 'pay_' || lpad(g::text, 8, '0'), 'payment', 'buyer@example.com', now(), now() - make_interval(secs => $2 - g)
		FROM generate_series(1, $2::int) g WHERE $1::bigint IS NOT NULL`,
	} {
		_, err = pool.Exec(ctx, stmt, u.ID, many)
		require.NoError(t, err)
	}
	for _, stmt := range []string{`
		INSERT INTO events (id, user_id, type, data) VALUES
			('evt_t1', $1, 'payment.succeeded', jsonb_build_object('id', $2::text)),
			('evt_t2', $1, 'refund.succeeded', jsonb_build_object('id', 're_t', 'payment', $2::text)),
			('evt_t3', $1, 'refund.failed', jsonb_build_object('id', 're_t', 'payment', $2::text))`, `
		INSERT INTO receipts (payment_id, kind, recipient, created_at)
		SELECT $2::text, 'payment', 'buyer@example.com', now() - interval '1 hour' WHERE $1::bigint IS NOT NULL`,
	} {
		_, err = pool.Exec(ctx, stmt, u.ID, target)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `ANALYZE payments, events, receipts`)
	require.NoError(t, err)

	// rowsRead runs query in a transaction of its own and says how many
	// rows of table it read.
	rowsRead := func(table string, query func(tx pgx.Tx)) int64 {
		t.Helper()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // read-only
		// A parallel scan's workers would count their rows in their own
		// statistics, not this transaction's.
		_, err = tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0`)
		require.NoError(t, err)
		query(tx)
		var seqRead, idxFetched int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0)
			FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`, table).Scan(&seqRead, &idxFetched))
		return seqRead + idxFetched
	}
	queries := dbsqlc.New()

	read := rowsRead("events", func(tx pgx.Tx) {
		events, err := queries.ConsoleListEventsOfPayment(ctx, tx, dbsqlc.ConsoleListEventsOfPaymentParams{UserID: u.ID, PaymentID: target})
		require.NoError(t, err)
		ids := []string{}
		for _, e := range events {
			ids = append(ids, e.ID)
		}
		require.ElementsMatch(t, []string{"evt_t1", "evt_t2", "evt_t3"}, ids)
	})
	require.LessOrEqual(t, read, int64(10), "events read for one payment's page")

	read = rowsRead("receipts", func(tx pgx.Tx) {
		receipts, err := queries.ConsoleListReceipts(ctx, tx, 50)
		require.NoError(t, err)
		require.Len(t, receipts, 50)
		require.Equal(t, target, receipts[0].PaymentID, "the receipt not sent comes first, however old")
		require.False(t, receipts[0].SentAt.Valid)
		require.Equal(t, "pay_00020000", receipts[1].PaymentID, "then the newest sent")
		require.Equal(t, "pay_00019952", receipts[49].PaymentID)
	})
	require.LessOrEqual(t, read, int64(2*50+10), "receipts read for a page of 50")
}
