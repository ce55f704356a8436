package recovery_test

import (
	"context"
	"testing"

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
