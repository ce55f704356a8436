package main

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/recovery"
)

// The scale databases (make bench-scale). Each size is built once, by
// buildScaleDB, into a database of its own that the cells of that size
// reuse: a clone of a 10-million-key database costs as much as writing it
// again (the copy is the whole 15 GB), so it is not made per cell; the
// cells' new keys (a few thousand per cell) are a small fraction of it and
// are counted in the table ("live keys" is read before each cell).

// scaleWindow is how the preloaded keys' finish times are spread: evenly
// over the TTL that ends now, minus the hour at its old end, so that no
// preloaded key expires while the run lasts (a replay of an expired key
// would run it again instead of replaying it).
const (
	scaleTTL    = 24 * time.Hour
	scaleMargin = time.Hour
)

// scaleKey is the client's idempotency key of preloaded request i: a UUID,
// as clients send them, derived from i so that C can replay any of them.
func scaleKey(i int) string {
	sum := md5.Sum([]byte(fmt.Sprint(i)))
	h := hex.EncodeToString(sum[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// buildStep is one timed step of a build, for the report.
type buildStep struct {
	name string
	took time.Duration
}

// scaleDB is a database holding size finished requests.
type scaleDB struct {
	size   int
	name   string
	method string // -scale-load: copy or insert
	steps  []buildStep
	took   time.Duration
}

// loadedTables are the tables the preload fills. Their indexes and
// constraints are dropped while the rows go in and built again after, and
// the foreign keys that touch them with them: building a b-tree from sorted
// rows is several times faster than inserting ten million random UUIDs into
// one, and no row is checked against a foreign key one at a time.
var loadedTables = []string{"idempotency_keys", "payments", "audit_records", "payment_intents"}

// buildScaleDB creates database name from the migrated template (with the
// users) and fills it with size finished create-payment requests: a key
// row with its stored 201 (a Payment of the size the service stores), the
// payment, and its two audit records, spread over the users and over the
// last TTL as a service that has run for a day has them.
func (b *bench) buildScaleDB(ctx context.Context, size int) (*scaleDB, error) {
	d := &scaleDB{size: size, name: fmt.Sprintf("scale_%d", size), method: b.o.scaleLoad}
	start := time.Now()
	step := func(name string, fn func() error) error {
		t := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("building %s: %s: %w", d.name, name, err)
		}
		d.steps = append(d.steps, buildStep{name, time.Since(t)})
		b.log.Info("scale build", slog.String("db", d.name), slog.String("step", name), slog.Duration("took", time.Since(t).Round(time.Millisecond)))
		return nil
	}
	if b.o.clusterDir != "" {
		var exists bool
		if err := b.monitor.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", d.name).Scan(&exists); err != nil {
			return nil, err
		}
		if exists {
			// The users are the same (ids 1 to -users, in order); their API
			// keys are this run's.
			d.method = "reused (-cluster-dir)"
			conn, err := pgx.Connect(ctx, b.server.URL(d.name))
			if err != nil {
				return nil, err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			if _, err := conn.Exec(ctx, "DELETE FROM api_keys"); err != nil {
				return nil, err
			}
			for _, u := range b.users {
				hash := sha256.Sum256([]byte(u.apiKey))
				if _, err := conn.Exec(ctx, "INSERT INTO api_keys (user_id, key_hash, key_prefix) VALUES ($1, $2, $3)",
					u.id, hash[:], u.apiKey[:10]); err != nil {
					return nil, err
				}
			}
			return d, nil
		}
	}
	if _, err := b.monitor.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if err := step("clone the migrated template", func() error {
		_, err := b.monitor.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{d.name}.Sanitize()+" TEMPLATE "+tmplPayments+" STRATEGY = FILE_COPY")
		return err
	}); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, b.server.URL(d.name))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '1GB'; SET max_parallel_maintenance_workers = 2"); err != nil {
		return nil, err
	}
	var schema schemaDDL
	if err := step("drop indexes and constraints", func() error {
		var err error
		schema, err = dropIndexes(ctx, conn)
		return err
	}); err != nil {
		return nil, err
	}
	fingerprint, err := recovery.Fingerprint("POST", "/v1/payments", []byte(createBody))
	if err != nil {
		return nil, err
	}
	// Request i finished at t0 + i*spacing: the heap holds the keys in the
	// order they finished, as inserts leave them.
	now := time.Now()
	t0 := now.Add(-scaleTTL + scaleMargin)
	spacingUs := float64((scaleTTL - scaleMargin).Microseconds()) / float64(size)
	const keyID = `md5('k' || i)::uuid`
	const paymentID = `'pay_' || left(md5('p' || i), 24)`
	const intentID = `'pi_' || left(md5('i' || i), 24)`
	// The statements' constants, written into them (none comes from outside).
	finishedAt := fmt.Sprintf(`('%s'::timestamptz + make_interval(secs => i::float8 * %g / 1e6))`, t0.UTC().Format(time.RFC3339Nano), spacingUs)
	series := fmt.Sprintf(`generate_series(1, %d) AS i`, size)
	const users = `(SELECT array_agg(id ORDER BY id) AS ids FROM users)`
	keys := `
INSERT INTO idempotency_keys (id, user_id, idempotency_key, flow, request_method, request_path, request_params,
    request_fingerprint, recovery_point, lock_token, last_run_at, response_code, response_body, created_at, expires_at)
SELECT ` + keyID + `, u.ids[1 + i % cardinality(u.ids)], md5(i::text)::uuid::text, 'create_payment', 'POST', '/v1/payments',
    '` + createBody + `'::jsonb, '\x` + hex.EncodeToString(fingerprint) + `'::bytea, 'finished', 1, ` + finishedAt + `, 201,
    convert_to(format('{"id":"%s","object":"payment","amount":2000,"currency":"usd","status":"succeeded","captured":true,' ||
        '"amount_captured":2000,"amount_refunded":0,"payment_method":"pm_card_visa","stripe_payment_intent":"%s",' ||
        '"failure_code":null,"failure_message":null,"description":null,"metadata":{},"created":%s}',
        ` + paymentID + `, ` + intentID + `, extract(epoch FROM ` + finishedAt + `)::bigint), 'UTF8'),
    ` + finishedAt + ` - interval '200 milliseconds', ` + finishedAt + ` + interval '` + fmt.Sprint(int(scaleTTL.Seconds())) + ` seconds'
FROM ` + series + `, ` + users + ` AS u`
	payments := `
INSERT INTO payments (id, user_id, amount, currency, status, capture, amount_captured, payment_method,
    stripe_payment_intent, metadata, idempotency_key_id, created_at, updated_at)
SELECT ` + paymentID + `, u.ids[1 + i % cardinality(u.ids)], 2000, 'usd', 'succeeded', true, 2000, 'pm_card_visa',
    ` + intentID + `, '{}', ` + keyID + `, ` + finishedAt + ` - interval '150 milliseconds', ` + finishedAt + `
FROM ` + series + `, ` + users + ` AS u`
	audit := `
INSERT INTO audit_records (user_id, action, resource_type, resource_id, data, idempotency_key_id, created_at)
SELECT u.ids[1 + i % cardinality(u.ids)], a.action, 'payment', ` + paymentID + `, '{"amount":2000}', ` + keyID + `,
    ` + finishedAt + ` - a.before
FROM ` + series + `, ` + users + ` AS u,
    (VALUES ('payment.created', interval '150 milliseconds'), ('payment.succeeded', interval '0')) AS a(action, before)
ORDER BY i`
	if b.o.scaleLoad == "insert" {
		for _, q := range []struct{ name, sql string }{{"insert keys", keys}, {"insert payments", payments}, {"insert audit records", audit}} {
			if err := step(q.name, func() error {
				_, err := conn.Exec(ctx, q.sql)
				return err
			}); err != nil {
				return nil, err
			}
		}
	} else {
		rows := scaleRows{size: size, t0: t0, spacing: time.Duration(spacingUs * float64(time.Microsecond)), fingerprint: fingerprint, users: b.users}
		if err := step("copy freeze (3 tables at once)", func() error { return b.copyScaleRows(ctx, d.name, rows) }); err != nil {
			return nil, err
		}
	}
	// Each payment's PaymentIntent, found through a table of its own
	// (migration 000024), as the moves that set it leave it.
	if err := step("insert payment intents", func() error {
		_, err := conn.Exec(ctx, "INSERT INTO payment_intents (stripe_payment_intent, payment_id) "+
			"SELECT stripe_payment_intent, id FROM payments WHERE stripe_payment_intent IS NOT NULL")
		return err
	}); err != nil {
		return nil, err
	}
	if err := step("build indexes and constraints", func() error { return schema.restore(ctx, conn) }); err != nil {
		return nil, err
	}
	// Rows copied with FREEZE are frozen and their pages all-visible
	// already; inserted ones are frozen here, so that no cell pays for
	// setting hint bits or freezing.
	vacuum := "VACUUM (ANALYZE) idempotency_keys, payments, audit_records, payment_intents, users"
	if b.o.scaleLoad == "insert" {
		vacuum = "VACUUM (FREEZE, ANALYZE) idempotency_keys, payments, audit_records, payment_intents, users"
	}
	if err := step(strings.ToLower(strings.Fields(vacuum)[0]+" "+strings.Fields(vacuum)[1]), func() error {
		_, err := conn.Exec(ctx, vacuum)
		return err
	}); err != nil {
		return nil, err
	}
	if err := step("checkpoint", func() error { _, err := b.monitor.Exec(ctx, "CHECKPOINT"); return err }); err != nil {
		return nil, err
	}
	d.took = time.Since(start)
	return d, nil
}

// schemaDDL is what dropIndexes dropped, to build again.
type schemaDDL struct {
	foreignKeys []tableDDL // dropped first, added last
	constraints []tableDDL // primary keys and unique constraints
	indexes     []string   // CREATE INDEX statements
}

type tableDDL struct{ table, name, def string }

// dropIndexes drops the indexes and constraints of loadedTables and the
// foreign keys that refer to them or from them, and returns how to build
// them again.
func dropIndexes(ctx context.Context, conn *pgx.Conn) (schemaDDL, error) {
	var s schemaDDL
	tables := "'{" + strings.Join(loadedTables, ",") + "}'::regclass[]"
	read := func(sql string, each func(table, name, def string)) error {
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t, n, d string
			if err := rows.Scan(&t, &n, &d); err != nil {
				return err
			}
			each(t, n, d)
		}
		return rows.Err()
	}
	err := read(`SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE contype = 'f' AND (conrelid = ANY(`+tables+`) OR confrelid = ANY(`+tables+`)) ORDER BY oid`,
		func(t, n, d string) { s.foreignKeys = append(s.foreignKeys, tableDDL{t, n, d}) })
	if err != nil {
		return s, err
	}
	err = read(`SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE contype IN ('p', 'u') AND conrelid = ANY(`+tables+`) ORDER BY contype, oid`,
		func(t, n, d string) { s.constraints = append(s.constraints, tableDDL{t, n, d}) })
	if err != nil {
		return s, err
	}
	err = read(`SELECT indrelid::regclass::text, indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index
		WHERE indrelid = ANY(`+tables+`) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = indexrelid)`,
		func(_, _, d string) { s.indexes = append(s.indexes, d) })
	if err != nil {
		return s, err
	}
	var ddl []string
	for _, fk := range s.foreignKeys {
		ddl = append(ddl, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", fk.table, pgx.Identifier{fk.name}.Sanitize()))
	}
	for _, c := range s.constraints {
		ddl = append(ddl, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", c.table, pgx.Identifier{c.name}.Sanitize()))
	}
	rows, err := conn.Query(ctx, `SELECT indexrelid::regclass::text FROM pg_index
		WHERE indrelid = ANY(`+tables+`) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = indexrelid)`)
	if err != nil {
		return s, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return s, err
	}
	for _, n := range names {
		ddl = append(ddl, "DROP INDEX "+n)
	}
	_, err = conn.Exec(ctx, strings.Join(ddl, ";\n"))
	return s, err
}

// restore builds what dropIndexes dropped: the unique constraints and
// indexes from the rows in place, then the foreign keys, added NOT VALID
// (no check row by row) and validated in one pass each.
func (s schemaDDL) restore(ctx context.Context, conn *pgx.Conn) error {
	for _, c := range s.constraints {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s", c.table, pgx.Identifier{c.name}.Sanitize(), c.def)); err != nil {
			return err
		}
	}
	for _, ix := range s.indexes {
		if _, err := conn.Exec(ctx, ix); err != nil {
			return err
		}
	}
	for _, fk := range s.foreignKeys {
		name := pgx.Identifier{fk.name}.Sanitize()
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s NOT VALID", fk.table, name, fk.def)); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s", fk.table, name)); err != nil {
			return err
		}
	}
	return nil
}
