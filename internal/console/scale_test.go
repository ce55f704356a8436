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

// A payment's page, the list of receipts and an endpoint's pages read
// their own rows, however many events, receipts and deliveries the
// database holds (migrations 000031 and 000032): here one user's 20,000
// payments, each with an event, a sent receipt and a delivery that
// succeeded to the user's endpoint; one payment with three events (its
// own, and two of a refund's) and a receipt not sent; and a second
// endpoint with one delivery pending and one failed. The rows each query reads, by sequential scans and through
// indexes, are counted in the transaction it runs in.
func TestConsole_pagesReadTheirRowsThroughIndexes(t *testing.T) {
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
	_, err = pool.Exec(ctx, `
		INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, secret, created_at) VALUES
			('we_busy', $1, 'https://example.com/busy', '{*}', 'whsec_busy', now() - interval '2 days'),
			('we_new', $1, 'https://example.com/new', '{*}', 'whsec_new', now() - interval '1 day')`, u.ID)
	require.NoError(t, err)
	for _, stmt := range []string{`
		INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, status, created_at)
		SELECT 'evt_' || lpad(g::text, 8, '0'), 'we_busy', $1, 'succeeded', now() - make_interval(secs => $2 - g)
		FROM generate_series(1, $2::int) g`, `
		INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, status)
		SELECT 'evt_t' || g, 'we_new', $1, CASE g WHEN 1 THEN 'pending' ELSE 'failed' END
		FROM generate_series(1, 2) g WHERE $2::int IS NOT NULL`,
	} {
		_, err = pool.Exec(ctx, stmt, u.ID, many)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `ANALYZE payments, events, receipts, webhook_endpoints, webhook_deliveries`)
	require.NoError(t, err)

	// rowsRead runs query in a transaction of its own and says how many
	// rows of table it read.
	//
	// On a connection of its own: pg_stat_xact_user_tables also shows what
	// earlier transactions of the same backend counted and have not flushed
	// yet (PostgreSQL 15 flushes a backend's statistics at most once a
	// second), and the pool's connection had just made the deliveries,
	// whose foreign key checks read 20,000 events: on a quick machine the
	// test counted them as the page's.
	rowsRead := func(table string, query func(tx pgx.Tx)) int64 {
		t.Helper()
		conn, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
		require.NoError(t, err)
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
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

	read = rowsRead("webhook_deliveries", func(tx pgx.Tx) {
		endpoints, err := queries.ConsoleListEndpoints(ctx, tx, dbsqlc.ConsoleListEndpointsParams{RowLimit: 50})
		require.NoError(t, err)
		require.Len(t, endpoints, 2)
		require.Equal(t, "we_new", endpoints[0].ID)
		require.Equal(t, [2]int64{1, 1}, [2]int64{endpoints[0].Pending, endpoints[0].Failed})
		require.Equal(t, [2]int64{0, 0}, [2]int64{endpoints[1].Pending, endpoints[1].Failed}, "we_busy: every delivery succeeded")
	})
	require.LessOrEqual(t, read, int64(10), "deliveries read to count the endpoints' pending and failed ones")

	read = rowsRead("webhook_deliveries", func(tx pgx.Tx) {
		deliveries, err := queries.ConsoleListDeliveriesOfEndpoint(ctx, tx, dbsqlc.ConsoleListDeliveriesOfEndpointParams{EndpointID: "we_busy", RowLimit: 50})
		require.NoError(t, err)
		require.Len(t, deliveries, 50)
		require.Equal(t, "evt_00020000", deliveries[0].EventID, "the newest first")
	})
	require.LessOrEqual(t, read, int64(50+10), "deliveries read for a page of 50 of one endpoint's")
}
