package recovery_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
)

// keyReferences makes, in every table whose rows carry the key that
// produced them (a column idempotency_key_id), one row referencing id, and
// returns each table's SQL to count the rows that still reference id.
// Nothing holds those columns to idempotency_keys by a foreign key (see
// migration 000023): the statements that delete keys let go of them.
func keyReferences(t *testing.T, b *testBundle, id uuid.UUID, suffix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	inserts := map[string]string{
		"payments": `INSERT INTO payments (id, user_id, amount, currency, status, payment_method, idempotency_key_id)
			VALUES ('pay_refs_' || $2, 1, 100, 'usd', 'succeeded', 'pm_card_visa', $1)`,
		"audit_records": `INSERT INTO audit_records (user_id, action, resource_type, resource_id, idempotency_key_id)
			VALUES (1, 'payment.created', 'payment', 'pay_refs_' || $2, $1)`,
		"staged_jobs": `INSERT INTO staged_jobs (kind, args, idempotency_key_id) VALUES ('refs_' || $2, '{}', $1)`,
		"refunds": `INSERT INTO refunds (id, user_id, payment_id, amount, status, idempotency_key_id)
			VALUES ('re_' || substr(md5($2), 1, 24), 1, 'pay_refs_' || $2, 50, 'pending', $1)`,
		"child_key_generations": `INSERT INTO child_key_generations (idempotency_key_id, step, generation) VALUES ($1, 'refs_' || $2, 0)`,
		"webhook_endpoints": `INSERT INTO webhook_endpoints (id, user_id, url, enabled_events, secret, idempotency_key_id)
			VALUES ('we_refs_' || $2, 1, 'https://example.com/hook', '{*}', 'whsec_x', $1)`,
		"webhook_deliveries": `WITH e AS (INSERT INTO events (id, user_id, type, data) VALUES ('evt_refs_' || $2, 1, 'payment.succeeded', '{}') RETURNING id)
			INSERT INTO webhook_deliveries (event_id, endpoint_id, user_id, idempotency_key_id)
			SELECT e.id, 'we_refs_' || $2, 1, $1 FROM e`,
	}
	// In this order: refunds and deliveries need the payment and the endpoint.
	order := []string{"payments", "audit_records", "staged_jobs", "refunds", "child_key_generations", "webhook_endpoints", "webhook_deliveries"}
	for _, table := range order {
		_, err := b.pool.Exec(ctx, inserts[table], id, suffix)
		require.NoError(t, err, table)
	}

	// Every table with such a column has a row here: a new one fails this
	// test until it has one too, and the deleting statements clear it.
	rows, err := b.pool.Query(ctx, `
		SELECT table_name FROM information_schema.columns
		WHERE table_schema = 'public' AND column_name = 'idempotency_key_id' ORDER BY 1`)
	require.NoError(t, err)
	var referencing []string
	for rows.Next() {
		var table string
		require.NoError(t, rows.Scan(&table))
		referencing = append(referencing, table)
	}
	require.NoError(t, rows.Err())
	want := append([]string(nil), order...)
	sort.Strings(want)
	require.Equal(t, want, referencing, "the tables whose rows carry a key's id")

	counts := map[string]string{}
	for _, table := range order {
		counts[table] = "SELECT count(*) FROM " + table + " WHERE idempotency_key_id = $1"
		require.Equal(t, 1, b.count(t, counts[table], id), table)
	}
	return counts
}

// requireNoReferences fails if any row still references id, and checks that
// the work stays: every row but the child key generation (which belongs to
// the key alone) is kept, its reference cleared.
func requireNoReferences(t *testing.T, b *testBundle, counts map[string]string, id uuid.UUID, suffix string) {
	t.Helper()
	for table, query := range counts {
		require.Zero(t, b.count(t, query, id), "%s still references the deleted key", table)
	}
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM payments WHERE id = 'pay_refs_' || $1 AND idempotency_key_id IS NULL", suffix),
		"the payment stays, let go of its key")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM webhook_deliveries WHERE event_id = 'evt_refs_' || $1", suffix),
		"the delivery stays")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM audit_records WHERE resource_id = 'pay_refs_' || $1", suffix),
		"the audit record stays")
}

func (b *testBundle) keyID(t *testing.T, userID int64, key string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT id FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2", userID, key).Scan(&id))
	return id
}

func TestReaper_aReapedKeyLeavesNoReferenceToIt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	b := setup(t, recovery.Config{KeyTTL: time.Hour, Now: func() time.Time { return now }})
	_, err := b.execute(t, 1, "reaped", `{"name":"a"}`)
	require.NoError(t, err)
	id := b.keyID(t, 1, "reaped")
	counts := keyReferences(t, b, id, "reaped")

	now = now.Add(2 * time.Hour)
	n, err := recovery.NewReaper(b.engine, 10, nil).RunOnce(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Zero(t, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE id = $1", id))
	requireNoReferences(t, b, counts, id, "reaped")
}

func TestExecute_anExpiredKeyMadeNewAgainLeavesNoReferenceToItsOldRow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	b := setup(t, recovery.Config{KeyTTL: time.Hour, Now: func() time.Time { return now }})
	_, err := b.execute(t, 1, "again", `{"name":"a"}`)
	require.NoError(t, err)
	old := b.keyID(t, 1, "again")
	counts := keyReferences(t, b, old, "again")

	now = now.Add(2 * time.Hour) // past its TTL: the key is new again
	_, err = b.execute(t, 1, "again", `{"name":"b"}`)
	require.NoError(t, err)
	require.NotEqual(t, old, b.keyID(t, 1, "again"), "a new row for the key")
	requireNoReferences(t, b, counts, old, "again")
}

// Every table with a column idempotency_key_id is declared in
// key_references (migration 000045), and every declaration names a table
// and column that exist: the trigger that lets go of deleted keys follows
// the declarations, so an undeclared table would keep references to keys
// that are gone.
func TestKeyReferences_everyTableWithTheColumnIsDeclared(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	rows, err := b.pool.Query(ctx, `
		SELECT c.table_name, r.table_name IS NOT NULL
		FROM information_schema.columns c
		LEFT JOIN key_references r ON r.table_name = c.table_name AND r.column_name = c.column_name
		WHERE c.table_schema = 'public' AND c.column_name = 'idempotency_key_id' ORDER BY 1`)
	require.NoError(t, err)
	var undeclared []string
	n := 0
	for rows.Next() {
		var table string
		var declared bool
		require.NoError(t, rows.Scan(&table, &declared))
		n++
		if !declared {
			undeclared = append(undeclared, table)
		}
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, n)
	require.Empty(t, undeclared, "tables whose rows carry a key's id with no row in key_references: declare each in the migration that makes it")
	require.Zero(t, b.count(t, `SELECT count(*) FROM key_references r WHERE NOT EXISTS (
		SELECT 1 FROM information_schema.columns c WHERE c.table_schema = 'public' AND c.table_name = r.table_name AND c.column_name = r.column_name)`),
		"a declaration names a table or column that does not exist")
}

// Any statement that deletes keys lets go of their references, not only
// the reaper's and the claim's: an operator's DELETE by hand too.
func TestKeyReferences_anyStatementThatDeletesKeysLetsGo(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	_, err := b.execute(t, 1, "by-hand", `{"name":"a"}`)
	require.NoError(t, err)
	id := b.keyID(t, 1, "by-hand")
	counts := keyReferences(t, b, id, "by-hand")
	_, err = b.pool.Exec(context.Background(), "DELETE FROM idempotency_keys WHERE id = $1", id)
	require.NoError(t, err)
	requireNoReferences(t, b, counts, id, "by-hand")
}

// A table a team adds is followed once declared, with one row: its rows
// let go of a deleted key (or go with it, declared 'delete').
func TestKeyReferences_aTableATeamDeclaresIsFollowed(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE TABLE payouts (id bigserial PRIMARY KEY, idempotency_key_id uuid UNIQUE);
		CREATE TABLE payout_scratch (idempotency_key_id uuid NOT NULL);
		CREATE INDEX ON payout_scratch (idempotency_key_id);
		INSERT INTO key_references (table_name, on_key_deleted) VALUES ('payouts', 'let_go'), ('payout_scratch', 'delete');`)
	require.NoError(t, err)
	for _, key := range []string{"payout-1", "payout-2"} {
		_, err := b.execute(t, 1, key, `{"name":"a"}`)
		require.NoError(t, err)
		id := b.keyID(t, 1, key)
		_, err = b.pool.Exec(ctx, `INSERT INTO payouts (idempotency_key_id) VALUES ($1)`, id)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `INSERT INTO payout_scratch VALUES ($1)`, id)
		require.NoError(t, err)
	}
	_, err = b.pool.Exec(ctx, "DELETE FROM idempotency_keys WHERE idempotency_key IN ('payout-1', 'payout-2')")
	require.NoError(t, err)
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM payouts WHERE idempotency_key_id IS NULL"), "the payouts stay, let go of their keys")
	require.Zero(t, b.count(t, "SELECT count(*) FROM payout_scratch"), "the rows declared the key's alone go with it")
}
