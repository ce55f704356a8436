package recovery_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/recovery"
)

// The completer's claim reads the unfinished keys, each by its id, however
// many finished keys the table keeps: 30,000 finished here, 20 started.
// Written as a join, with statistics saying that almost every key is
// finished (as they do in production), the planner read the whole key
// table for each claim (EXPLAIN ANALYZE on make bench's F database:
// 13,270 pages, 38 ms, against 3.8 ms and none of the table's pages for
// this statement; -top-sql: 103 to 165 ms a claim), a cost growing with
// every key kept. This table's statistics do not lead the planner there
// (the join plans a lookup per unfinished key here too): the test holds
// the claim to the plan it is written for, which the LATERAL ... OFFSET 0
// leaves the planner no other way to make.
func TestClaimAbandonedKeys_readsOnlyTheUnfinishedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	insertFinishedKeys(t, b, 30000)
	_, err := b.pool.Exec(ctx, `ANALYZE idempotency_keys, idempotency_keys_unfinished`)
	require.NoError(t, err)
	insertStartedKeys(t, b, "open-", 20) // after the statistics, as new requests come

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	plan := dbtest.Explain(t, tx, func(q dbsqlc.DBTX) error {
		_, err := dbsqlc.New().ClaimAbandonedKeys(ctx, q, dbsqlc.ClaimAbandonedKeysParams{
			LockLifetimeSeconds: 60, CallWindowTailSeconds: 10, GraceSeconds: 0, MaxBackoffSeconds: 3600,
			BatchSize: 1, ExternalWindowSeconds: 3600,
		})
		return err
	})
	t.Logf("plan: %s; %d buffers", plan, plan.Buffers)
	require.NotContains(t, plan.Nodes, "Seq Scan idempotency_keys", "no scan of the key table")
	require.Less(t, plan.Buffers, int64(300), "20 unfinished keys looked up, one claimed; not the 30,000 finished ones")
}
