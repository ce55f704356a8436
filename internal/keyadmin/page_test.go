package keyadmin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyadmin"
	"github.com/example/payments/internal/payments"
)

// The console's list: newest first, by state (finished too, or every key),
// flow and age, a page at a time; and the counts by flow and recovery point.
func TestAdmin_pageListsNewestFirstByStateFlowAndAgeAndCountsByPoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.abandon(t, "after_commit:payment_created", "stuck-1")
	admin, svc, _ := b.admin(t, "")
	for _, key := range []string{"done-1", "done-2"} {
		b.now = b.now.Add(time.Second) // the engine's clock: each key newer than the last
		_, err := svc.Create(ctx, payments.KeyedRequest{
			UserID: b.userID, Key: key, Method: "POST", Path: "/v1/payments",
			Body: []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`),
		}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
		require.NoError(t, err)
	}
	keys := func(p keyadmin.PageParams) []string {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 10
		}
		page, err := admin.Page(ctx, p)
		require.NoError(t, err)
		out := []string{}
		for _, s := range page {
			out = append(out, s.Key)
		}
		return out
	}
	require.Equal(t, []string{"done-2", "done-1", "stuck-1"}, keys(keyadmin.PageParams{}))
	require.Equal(t, []string{"done-2", "done-1"}, keys(keyadmin.PageParams{State: keyadmin.Finished}))
	require.Equal(t, []string{"stuck-1"}, keys(keyadmin.PageParams{State: keyadmin.Unfinished, UserEmail: alice}))
	require.Equal(t, []string{}, keys(keyadmin.PageParams{Flow: "redeliver_event"}))
	require.Equal(t, []string{}, keys(keyadmin.PageParams{MinAge: time.Hour}))

	first, err := admin.Page(ctx, keyadmin.PageParams{Limit: 2})
	require.NoError(t, err)
	require.Len(t, first, 2)
	last := first[1]
	require.Equal(t, []string{"stuck-1"}, keys(keyadmin.PageParams{BeforeCreated: last.Created, BeforeID: last.ID}))

	_, err = admin.Page(ctx, keyadmin.PageParams{State: "lost", Limit: 1})
	require.Error(t, err)
	_, err = admin.Page(ctx, keyadmin.PageParams{UserEmail: "nobody@example.com", Limit: 1})
	require.ErrorIs(t, err, keyadmin.ErrUnknownUser)

	counts, err := admin.Counts(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []keyadmin.Count{
		{Flow: "create_payment", RecoveryPoint: "finished", Keys: 2},
		{Flow: "create_payment", RecoveryPoint: "payment_created", Keys: 1},
	}, counts)
}

// The console's dashboard asks for its counts and its newest unfinished
// keys every two seconds while it is open, and `keys list` for unfinished
// keys: however many keys are finished, they read the unfinished ones (and
// the table's statistics), not the key table. Here 20,000 finished keys and
// one unfinished: the table's rows read, by sequential scans and by index
// fetches, are counted in the transaction the queries run in.
func TestAdmin_readsTheUnfinishedKeysNotEveryKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.abandon(t, "after_commit:payment_created", "stuck-1")
	const finished = 20_000
	_, err := b.pool.Exec(ctx, `INSERT INTO idempotency_keys (id, user_id, idempotency_key, flow, request_method,
			request_path, request_params, request_fingerprint, recovery_point, response_code, response_body, expires_at, created_at)
		SELECT gen_random_uuid(), $1, 'done-' || g, 'create_payment', 'POST', '/v1/payments', '{"amount": 1500}',
			sha256(g::text::bytea), 'finished', 201, '{}', now() + interval '1 day', now() - make_interval(secs => g)
		FROM generate_series(1, $2::int) g`, b.userID, finished)
	require.NoError(t, err)
	// Statistics, as autovacuum keeps them: on a table it has never seen
	// (the table of unfinished keys here) the planner assumes some thousand
	// rows, and for that many a scan of 20,000 keys is the cheaper plan.
	_, err = b.pool.Exec(ctx, `ANALYZE idempotency_keys, idempotency_keys_unfinished`)
	require.NoError(t, err)
	admin, _, _ := b.admin(t, "")

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	// A parallel scan's workers would count their rows in their own
	// statistics, not this transaction's.
	_, err = tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0`)
	require.NoError(t, err)
	inTx := keyadmin.New(tx, nil, nil).WithExactCountBytes(1 << 20)
	var tableBytes int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_relation_size('idempotency_keys')`).Scan(&tableBytes))
	require.Greater(t, tableBytes, int64(1<<20), "the finished keys must be estimated")

	counts, err := inTx.Counts(ctx)
	require.NoError(t, err)
	for _, state := range []keyadmin.State{keyadmin.Unfinished, keyadmin.NeedsAttention, keyadmin.Locked} {
		_, err := inTx.Page(ctx, keyadmin.PageParams{State: state, Limit: 10})
		require.NoError(t, err)
		_, err = inTx.List(ctx, keyadmin.ListParams{State: state, Limit: 10})
		require.NoError(t, err)
	}
	stuck, err := inTx.Page(ctx, keyadmin.PageParams{State: keyadmin.Unfinished, Limit: 10})
	require.NoError(t, err)
	listed, err := inTx.List(ctx, keyadmin.ListParams{State: keyadmin.Unfinished, Limit: 10})
	require.NoError(t, err)
	var seqRead, idxFetched int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0)
		FROM pg_stat_xact_user_tables WHERE relid = 'idempotency_keys'::regclass`).Scan(&seqRead, &idxFetched))
	require.LessOrEqual(t, seqRead+idxFetched, int64(50), "key rows read: %d by scans, %d through indexes", seqRead, idxFetched)

	require.Len(t, stuck, 1)
	require.Equal(t, "stuck-1", stuck[0].Key)
	require.Len(t, listed, 1)
	require.Equal(t, "stuck-1", listed[0].Key)
	require.Len(t, counts, 2)
	require.Equal(t, keyadmin.Count{Flow: "create_payment", RecoveryPoint: "payment_created", Keys: 1}, counts[1])
	require.Equal(t, "finished", counts[0].RecoveryPoint)
	require.True(t, counts[0].Estimated)
	require.InDelta(t, finished, counts[0].Keys, finished/10, "the estimate of the finished keys")

	// The same table under the default limit is small enough to count.
	counts, err = admin.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, []keyadmin.Count{
		{Flow: "create_payment", RecoveryPoint: "finished", Keys: finished},
		{Flow: "create_payment", RecoveryPoint: "payment_created", Keys: 1},
	}, counts)
}
