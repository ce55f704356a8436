package recovery_test

import (
	"time"

	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

// The table of unfinished keys (migrations 000026 and 000029), through
// which the completer, the key filter's rebuild and the metrics find them,
// holds every key that is not finished, whatever statement inserts it (the
// engine's claim, or a row written by hand, an operator's or a test's: the
// insert's trigger), and the completer's run sweeps out the rows of keys
// that finished or are gone since (a finish leaves its row there).
func TestUnfinishedKeys_theTableHoldsEveryKeyNotFinishedUntilTheSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Hour})
	rowsFor := func(query string) []string {
		t.Helper()
		rows, err := b.pool.Query(ctx, query)
		require.NoError(t, err)
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return keys
	}
	// What a reader of the table finds: it joins the key, and reads its recovery point.
	unfinished := func() []string {
		t.Helper()
		return rowsFor(`SELECT k.idempotency_key FROM idempotency_keys_unfinished u JOIN idempotency_keys k ON k.id = u.id
			WHERE k.recovery_point <> 'finished' ORDER BY 1`)
	}
	// What the table holds.
	held := func() []string {
		t.Helper()
		return rowsFor(`SELECT coalesce(k.idempotency_key, '(gone)') FROM idempotency_keys_unfinished u
			LEFT JOIN idempotency_keys k ON k.id = u.id ORDER BY 1`)
	}
	sweep := func() {
		t.Helper()
		run, err := completer.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, run.Claimed, "a grace of an hour: the run only sweeps")
	}

	_, err := b.execute(t, 1, "done", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.Empty(t, unfinished(), "a finished key")
	require.Equal(t, []string{"done"}, held(), "its finish left the row")
	sweep()
	require.Empty(t, held(), "the sweep took it out")

	b.remote.fail.Store(1)
	_, err = b.execute(t, 1, "left", `{"name":"lamp"}`)
	require.True(t, recovery.IsTransient(err), "%v", err)
	require.Equal(t, []string{"left"}, unfinished(), "a key its remote call left unfinished")
	sweep()
	require.Equal(t, []string{"left"}, held(), "the sweep keeps an unfinished key")

	_, err = b.execute(t, 1, "left", `{"name":"lamp"}`) // the retry finishes it
	require.NoError(t, err)
	require.Empty(t, unfinished(), "the retry finished it")

	_, err = b.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point)
		VALUES (1, 'by-hand', 'thing', 'POST', '/v1/things', '{}', sha256('by-hand'::bytea), 'started'),
			(1, 'by-hand-deleted', 'thing', 'POST', '/v1/things', '{}', sha256('by-hand-deleted'::bytea), 'started')`)
	require.NoError(t, err)
	require.Equal(t, []string{"by-hand", "by-hand-deleted"}, unfinished(), "keys written by hand")
	_, err = b.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE idempotency_key = 'by-hand-deleted'`)
	require.NoError(t, err)
	require.Equal(t, []string{"by-hand"}, unfinished(), "a deleted key")
	sweep()
	require.Equal(t, []string{"by-hand"}, held(), "the sweep took out the finished key and the deleted one")
}

// The sweep reads the table a page of its primary key at a time, and goes
// on to the next page until one comes back short: a table bigger than a
// page (keys finished while no completer ran, say) is swept whole in one run.
func TestUnfinishedKeys_theSweepGoesThroughEveryPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	insertStartedKeys(t, b, "key-", 12001)
	_, err := b.pool.Exec(ctx, `
		UPDATE idempotency_keys SET recovery_point = 'finished', response_code = 201, response_body = '\x7b7d'::bytea,
			expires_at = now() + interval '1 day'
		WHERE idempotency_key <> 'key-7000'`)
	require.NoError(t, err)

	run, err := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Hour}).RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Claimed)
	var left []string
	rows, err := b.pool.Query(ctx, `SELECT k.idempotency_key FROM idempotency_keys_unfinished u JOIN idempotency_keys k ON k.id = u.id`)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"key-7000"}, left, "three pages of 5,000 swept, the unfinished key kept")
}

// A sweep longer than its budget (after a long outage of the worker, the
// table holds every key made since) stops after its page: the run still
// claims and finishes the key waiting for it, and the next run's sweep goes
// on from where this one stopped, until a short page ends the table and
// the sweep after it starts over.
func TestUnfinishedKeys_aSweepPastItsBudgetGoesOnInTheNextRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	insertStartedKeys(t, b, "key-", 12001)
	_, err := b.pool.Exec(ctx, `
		UPDATE idempotency_keys SET recovery_point = 'finished', response_code = 201, response_body = '\x7b7d'::bytea,
			expires_at = now() + interval '1 day'`)
	require.NoError(t, err)
	b.remote.fail.Store(1)
	_, err = b.execute(t, 1, "left", `{"name":"lamp"}`)
	require.True(t, recovery.IsTransient(err), "%v", err)
	held := func() int {
		t.Helper()
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys_unfinished`).Scan(&n))
		return n
	}
	require.Equal(t, 12002, held())

	// A run whose sweep takes its whole budget claims nothing: each claim
	// would read every row of the table.
	spent := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Nanosecond,
		RunBudget: time.Nanosecond})
	run, err := spent.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Claimed, "no time left to claim")
	// "left" stays, if it was in the page: it was unfinished then.
	require.InDelta(t, 12002-5000, held(), 1, "one page of 5,000 rows swept, then the budget was spent")

	// A sweep budget so short that every sweep stops after its first page,
	// and the run's own budget left to claim.
	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Nanosecond, SweepBudget: time.Nanosecond})
	run, err = completer.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Finished: 1}, run, "the run goes on to the key waiting for it")
	// A new completer's sweep starts at the head of the table: "left" is
	// in its page if it was in the first.
	require.InDelta(t, 12002-10000+1, held(), 1, "a second page swept")
	_, err = completer.RunOnce(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, held(), 1, "the next run went on from the last page, and its page was short: the end of the table")
	_, err = completer.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, held(), "the next started over, and took out the finished key's row")
}

// Two requests finishing their keys at once, in SERIALIZABLE transactions,
// on a database whose statistics make a scan of the small table of
// unfinished keys look cheapest, both commit: a finish does not touch that
// table (migration 000029; 000026's trigger deleted the key's row there,
// and had to be kept from scanning the table for it, or the finishes
// conflicted: 1.3 retries per request at 16 clients). Their rows stay
// until the completer's sweep.
func TestUnfinishedKeys_finishesAtOnceDoNotConflictThroughTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	insertFinishedKeys(t, b, 1000)
	insertStartedKeys(t, b, "open-", 20)
	_, err := b.pool.Exec(ctx, `ANALYZE idempotency_keys, idempotency_keys_unfinished`)
	require.NoError(t, err)

	finishTwoAtOnce := func(first, second string) error {
		t.Helper()
		var ids [2]string
		for i, key := range []string{first, second} {
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT id::text FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&ids[i]))
		}
		var txs [2]pgx.Tx
		for i := range txs {
			tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // committed below
			txs[i] = tx
		}
		for i, tx := range txs {
			_, err := tx.Exec(ctx, `
				UPDATE idempotency_keys SET recovery_point = 'finished', response_code = 201, response_body = '\x7b7d'::bytea,
					expires_at = now() + interval '1 day'
				WHERE id = $1::uuid`, ids[i])
			require.NoError(t, err)
		}
		if err := txs[0].Commit(ctx); err != nil {
			return err
		}
		return txs[1].Commit(ctx)
	}
	require.NoError(t, finishTwoAtOnce("open-1", "open-2"))
	var held int
	require.NoError(t, b.pool.QueryRow(ctx, `
		SELECT count(*) FROM idempotency_keys_unfinished u JOIN idempotency_keys k ON k.id = u.id
		WHERE k.idempotency_key IN ('open-1', 'open-2')`).Scan(&held))
	require.Equal(t, 2, held, "the finishes left their rows, for the sweep")
}

// insertStartedKeys inserts n unfinished keys of user 1, named prefix1 to
// prefixN, by hand: the insert's trigger puts them in the table of
// unfinished keys.
func insertStartedKeys(t *testing.T, b *testBundle, prefix string, n int) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point)
		SELECT 1, $1 || i, 'thing', 'POST', '/v1/things', '{}', sha256(convert_to($1 || i, 'UTF8')), 'started'
		FROM generate_series(1, $2::int) AS i`, prefix, n)
	require.NoError(t, err)
}

// insertFinishedKeys inserts n finished keys of user 1, named done-1 to
// done-N, by hand.
func insertFinishedKeys(t *testing.T, b *testBundle, n int) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point, response_code, response_body, expires_at)
		SELECT 1, 'done-' || i, 'thing', 'POST', '/v1/things', '{}', sha256(convert_to('done-' || i, 'UTF8')),
			'finished', 201, '\x7b7d'::bytea, now() + interval '1 day'
		FROM generate_series(1, $1::int) AS i`, n)
	require.NoError(t, err)
}
