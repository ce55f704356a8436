package recovery_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
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

// Only the two statements that let go of a deleted key's references delete
// keys: any other would leave references to keys that are gone.
func TestOnlyTheStatementsThatClearReferencesDeleteKeys(t *testing.T) {
	t.Parallel()
	deleter := regexp.MustCompile(`(?is)DELETE\s+FROM\s+idempotency_keys\b`)
	name := regexp.MustCompile(`(?m)^-- name: (\w+)`)
	var found []string
	for _, dir := range []string{"../db/queries", "../../migrations"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, loc := range deleter.FindAllIndex(src, -1) {
				names := name.FindAllSubmatch(src[:loc[0]], -1)
				query := filepath.Base(f)
				if len(names) > 0 {
					query += ":" + string(names[len(names)-1][1])
				}
				found = append(found, query)
			}
		}
	}
	require.ElementsMatch(t, []string{
		"idempotency_keys.sql:DeleteExpiredIdempotencyKey",
		"idempotency_keys.sql:ReapExpiredKeys",
	}, found)
}
