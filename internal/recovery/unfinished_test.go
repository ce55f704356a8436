package recovery_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

// The table of unfinished keys (migration 000026), through which the
// completer, the key filter's rebuild and the metrics find them, holds
// exactly the keys that are not finished, whatever statement writes them:
// the engine's claim and finish, and a row written by hand (an operator's,
// a test's), kept by the database's triggers.
func TestUnfinishedKeys_theTableHoldsExactlyTheKeysNotFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	unfinished := func() []string {
		t.Helper()
		rows, err := b.pool.Query(ctx, `
			SELECT k.idempotency_key FROM idempotency_keys_unfinished u JOIN idempotency_keys k ON k.id = u.id
			ORDER BY 1`)
		require.NoError(t, err)
		var keys []string
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			keys = append(keys, k)
		}
		require.NoError(t, rows.Err())
		var orphans int
		require.NoError(t, b.pool.QueryRow(ctx, `
			SELECT count(*) FROM idempotency_keys_unfinished u
			WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.id = u.id AND k.recovery_point <> 'finished')`).Scan(&orphans))
		require.Zero(t, orphans, "a row for a key that is finished or gone")
		return keys
	}

	_, err := b.execute(t, 1, "done", `{"name":"lamp"}`)
	require.NoError(t, err)
	require.Empty(t, unfinished(), "a finished key")

	b.remote.fail.Store(1)
	_, err = b.execute(t, 1, "left", `{"name":"lamp"}`)
	require.True(t, recovery.IsTransient(err), "%v", err)
	require.Equal(t, []string{"left"}, unfinished(), "a key its remote call left unfinished")

	_, err = b.execute(t, 1, "left", `{"name":"lamp"}`) // the retry finishes it
	require.NoError(t, err)
	require.Empty(t, unfinished(), "the retry finished it")

	_, err = b.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point)
		VALUES (1, 'by-hand', 'thing', 'POST', '/v1/things', '{}', sha256('by-hand'::bytea), 'started')`)
	require.NoError(t, err)
	require.Equal(t, []string{"by-hand"}, unfinished(), "a key written by hand")
	_, err = b.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE idempotency_key = 'by-hand'`)
	require.NoError(t, err)
	require.Empty(t, unfinished(), "a deleted key")
}

// Two requests finishing their keys at once, in SERIALIZABLE transactions,
// on a database whose statistics make a scan of the small table of
// unfinished keys look cheapest, both commit: the trigger that takes a
// finished key out of the table finds its row through the primary key
// (its function's enable_seqscan = off), so it locks one page of that index
// and not the whole table, which the other finish writes into. Without the
// setting they fail to serialize, as the second half shows (migration
// 000026; B on 100,000 preloaded keys made 1.3 retries per request at 16
// clients that way).
func TestUnfinishedKeys_finishesAtOnceDoNotConflictThroughTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, recovery.Config{})
	_, err := b.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point, response_code, response_body, expires_at)
		SELECT 1, 'done-' || i, 'thing', 'POST', '/v1/things', '{}', sha256(convert_to('done-' || i, 'UTF8')),
			'finished', 201, '\x7b7d'::bytea, now() + interval '1 day'
		FROM generate_series(1, 1000) AS i`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
			request_fingerprint, recovery_point)
		SELECT 1, 'open-' || i, 'thing', 'POST', '/v1/things', '{}', sha256(convert_to('open-' || i, 'UTF8')), 'started'
		FROM generate_series(1, 20) AS i`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE idempotency_keys, idempotency_keys_unfinished`)
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
	require.NoError(t, finishTwoAtOnce("open-1", "open-2"), "finishes with the trigger's function as migrated")

	_, err = b.pool.Exec(ctx, `ALTER FUNCTION idempotency_keys_track_unfinished() RESET ALL`)
	require.NoError(t, err)
	err = finishTwoAtOnce("open-3", "open-4")
	require.ErrorContains(t, err, "could not serialize access",
		"without enable_seqscan = off the trigger scans the table, and the two finishes conflict")
}
