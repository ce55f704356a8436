package recovery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

func TestReaper_deletesOnlyFinishedExpiredKeys(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	b := setup(t, recovery.Config{KeyTTL: time.Hour, Now: func() time.Time { return now }})
	ctx := context.Background()

	_, err := b.execute(t, 1, "old-finished", `{"name":"a"}`)
	require.NoError(t, err)
	b.remote.fail.Store(1)
	_, err = b.execute(t, 1, "old-unfinished", `{"name":"b"}`) // stops before the remote call
	require.True(t, recovery.IsTransient(err))
	now = now.Add(2 * time.Hour)
	_, err = b.execute(t, 1, "young-finished", `{"name":"c"}`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	reaper := recovery.NewReaper(b.engine, 1, reg) // batches of one: the loop must go on
	n, err := reaper.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP payments_reaper_keys_deleted_total Finished idempotency keys deleted after their TTL.
# TYPE payments_reaper_keys_deleted_total counter
payments_reaper_keys_deleted_total 1
`), "payments_reaper_keys_deleted_total"))

	var keys []string
	rows, err := b.pool.Query(ctx, "SELECT idempotency_key FROM idempotency_keys ORDER BY idempotency_key")
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.Equal(t, []string{"old-unfinished", "young-finished"}, keys, "an unfinished key is never reaped")
	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM things"), "the work of a reaped key stays")
}

// Deleting a key sets the references to it to NULL (or deletes them) in
// every table that has one (ReapExpiredKeys): one lookup per referencing
// table for each batch of keys. Without an index led by the referencing
// column that lookup reads the whole table, so the reaper's cost per key
// would grow with, say, every webhook delivery ever made, and it would fall
// behind the insert rate. The references are the columns named
// idempotency_key_id (no foreign key marks them: migration 000023).
func TestReaper_everyReferenceToAKeyIsFoundThroughAnIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	var references int
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM information_schema.columns
		WHERE table_schema = 'public' AND column_name = 'idempotency_key_id'`).Scan(&references))
	require.GreaterOrEqual(t, references, 7, "payments, audit records, staged jobs, refunds, generations, endpoints, deliveries")
	rows, err := b.pool.Query(context.Background(), `
		SELECT a.attrelid::regclass::text || '.' || a.attname
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r'
		JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		WHERE a.attname = 'idempotency_key_id' AND NOT a.attisdropped
		  AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indkey[0] = a.attnum)
		ORDER BY 1`)
	require.NoError(t, err)
	var unindexed []string
	for rows.Next() {
		var col string
		require.NoError(t, rows.Scan(&col))
		unindexed = append(unindexed, col)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, unindexed, "references to idempotency_keys that a key's deletion must find by scanning the table")
}
