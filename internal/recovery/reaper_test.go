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
