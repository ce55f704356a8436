package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/keyfilter"
	"github.com/example/payments/internal/pglocal"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/users"
)

// The databases of a run. A cell of A-own, B, D or E runs on a new clone
// of tmplPayments, A-naive on a new clone of tmplNaive, C on one clone
// made once and given its finished keys once.
const (
	tmplPayments = "payments_template" // migrated, the users, the preload
	tmplYoung    = "young_template"    // migrated, the users, nothing else: a first start
	tmplNaive    = "naive_template"    // the baseline's schema, the preload
	dbPayments   = "payments"          // A-own, B, D, E
	dbReplay     = "payments_replay"   // C
	dbNaive      = "naive"             // A-naive
)

// bench is one run: the cluster, the simulator, the users, the results.
type bench struct {
	o       options
	log     *slog.Logger
	dir     string
	server  *pglocal.Server
	monitor *pgx.Conn // on the postgres database: counters, CHECKPOINT, database clones
	pgss    bool      // pg_stat_statements is loaded

	sim    *stripesim.Simulator
	simSrv *http.Server
	simURL string

	users      []benchUser // the same in every clone of tmplPayments
	replayable []replayKey // C's finished keys
	prefill    prefillStats
	machine    machineInfo
	results    []*cellResult
	elapsed    time.Duration

	// The scale run (scale.go): the target of the cell running, and a key
	// filter configuration for startService in place of the default.
	scaleRun       *scaleRun
	scaleTarget    *scaleTarget
	filterOverride *keyfilter.Config
}

type benchUser struct {
	id     int64
	apiKey string
}

func newBench(ctx context.Context, o options, log *slog.Logger) (*bench, error) {
	b := &bench{o: o, log: log}
	ok := false
	defer func() {
		if !ok {
			b.close()
		}
	}()
	if err := b.startCluster(ctx); err != nil {
		return nil, err
	}
	if err := b.startSimulator(); err != nil {
		return nil, err
	}
	// Templates, migrated (and preloaded) once; each cell gets a clone.
	if err := b.makePaymentsTemplate(ctx); err != nil {
		return nil, err
	}
	// Before the preload: B-young starts from the tables as a new
	// deployment has them.
	if err := b.clone(ctx, tmplYoung, tmplPayments); err != nil {
		return nil, err
	}
	if err := b.server.CreateDatabase(ctx, tmplNaive); err != nil {
		return nil, err
	}
	if err := b.exec(ctx, tmplNaive, naiveSchema); err != nil {
		return nil, fmt.Errorf("creating the naive schema: %w", err)
	}
	if err := b.preload(ctx); err != nil {
		return nil, err
	}
	if err := b.clone(ctx, dbReplay, tmplPayments); err != nil {
		return nil, err
	}
	var err error
	if b.machine, err = b.describeMachine(ctx); err != nil {
		return nil, err
	}
	ok = true
	return b, nil
}

// startCluster starts a durable throwaway cluster: fsync, synchronous_commit
// and full_page_writes stay on (no pglocal Ephemeral), as in the baseline.
func (b *bench) startCluster(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "paymentsbench-")
	if b.o.clusterDir != "" {
		// A cluster of an earlier -keep run, with its databases.
		dir, err = b.o.clusterDir, os.MkdirAll(b.o.clusterDir, 0o755)
		b.o.keep = true
	}
	if err != nil {
		return err
	}
	b.dir = dir
	// The server may run as the postgres OS user, which must reach the cluster.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	settings := map[string]string{"max_connections": "400", "wal_compression": b.o.walCompression}
	b.pgss = pgStatStatementsAvailable()
	if b.pgss {
		settings["shared_preload_libraries"] = "pg_stat_statements"
		settings["pg_stat_statements.track_utility"] = "on"
	}
	b.log.Info("starting PostgreSQL (fsync on)", slog.String("dir", dir), slog.Bool("pg_stat_statements", b.pgss))
	start := func() error {
		b.server, err = pglocal.Start(ctx, pglocal.Config{
			DataDir: filepath.Join(dir, "data"), Settings: settings, LogFile: filepath.Join(dir, "postgres.log"),
		})
		return err
	}
	if err := start(); err != nil {
		if !b.pgss {
			return err
		}
		b.log.Warn("PostgreSQL did not start with pg_stat_statements; starting it without", slog.String("error", err.Error()))
		b.pgss = false
		delete(settings, "shared_preload_libraries")
		delete(settings, "pg_stat_statements.track_utility")
		if err := start(); err != nil {
			return err
		}
	}
	if b.monitor, err = pgx.Connect(ctx, b.server.URL("postgres")); err != nil {
		return err
	}
	if b.pgss {
		if _, err := b.monitor.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
			b.log.Warn("pg_stat_statements is not usable; counting statements on the client only", slog.String("error", err.Error()))
			b.pgss = false
		}
	}
	return nil
}

// pgStatStatementsAvailable tells whether the server's library directory
// holds pg_stat_statements (the bin directory may hold symlinks, as
// /usr/local/bin/postgres -> /usr/lib/postgresql/15/bin/postgres).
func pgStatStatementsAvailable() bool {
	bin, err := pglocal.FindBinDir()
	if err != nil {
		return false
	}
	var dirs []string
	if real, err := filepath.EvalSymlinks(filepath.Join(bin, "postgres")); err == nil {
		realBin := filepath.Dir(real)
		dirs = append(dirs, filepath.Join(realBin, "..", "lib"))
		if out, err := exec.Command(filepath.Join(realBin, "pg_config"), "--pkglibdir").Output(); err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_stat_statements.so")); err == nil {
			return true
		}
	}
	return false
}

func (b *bench) startSimulator() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b.sim = stripesim.New(stripesim.Config{})
	b.simSrv = &http.Server{Handler: labelled(partSimulator, b.sim.Handler()), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second}
	go func() { _ = b.simSrv.Serve(ln) }()
	b.simURL = "http://" + ln.Addr().String()
	return nil
}

func (b *bench) createUsers(ctx context.Context, dbname string) error {
	pool, err := db.Open(ctx, b.server.URL(dbname), db.PoolConfig{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	for i := range b.o.users {
		u, key, err := users.CreateUser(ctx, pool, fmt.Sprintf("bench%d@example.com", i))
		if err != nil {
			return fmt.Errorf("creating users in %s: %w", dbname, err)
		}
		b.users = append(b.users, benchUser{id: u.ID, apiKey: key})
	}
	return nil
}

func (b *bench) close() {
	if b.simSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = b.simSrv.Shutdown(ctx)
		cancel()
		b.sim.Close()
	}
	if b.monitor != nil {
		_ = b.monitor.Close(context.Background())
	}
	if b.server != nil {
		if err := b.server.Stop(); err != nil {
			b.log.Warn("stopping PostgreSQL", slog.String("error", err.Error()))
		}
	}
	if b.dir != "" && !b.o.keep {
		_ = os.RemoveAll(b.dir)
	} else if b.dir != "" {
		b.log.Info("kept the cluster's directory", slog.String("dir", b.dir))
	}
}

// exec runs sql on database dbname, on a connection of its own.
func (b *bench) exec(ctx context.Context, dbname, sql string) error {
	conn, err := pgx.Connect(ctx, b.server.URL(dbname))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// clone makes dbname a new copy of template (dropping the old one), and
// checkpoints, so that every cell starts alike: the same rows, the same
// statistics, nothing left to write back from the cell before.
func (b *bench) clone(ctx context.Context, dbname, template string) error {
	if _, err := b.monitor.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbname}.Sanitize()+" WITH (FORCE)"); err != nil {
		return err
	}
	_, err := b.monitor.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{dbname}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize()+
		" STRATEGY = FILE_COPY")
	if err != nil {
		return fmt.Errorf("cloning %s: %w", template, err)
	}
	b.sim.Reset()
	_, err = b.monitor.Exec(ctx, "CHECKPOINT")
	return err
}

// preload fills the payments and naive databases with finished requests,
// as a service that has run for a while has them: the b-trees then have
// many leaf pages, as in production, instead of the one or few that
// concurrent transactions share (and conflict on) in an empty table.
// The preloaded payments have no events in the simulator's log, so the
// reconciler, which reads that log, has nothing to do with them.
func (b *bench) preload(ctx context.Context) error {
	start := time.Now()
	n := b.o.preload
	if n <= 0 {
		return nil
	}
	payments := fmt.Sprintf(`
WITH u AS (SELECT array_agg(id ORDER BY id) AS ids FROM users),
k AS (
  INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
      request_fingerprint, recovery_point, lock_token, response_code, response_body, created_at, expires_at)
  SELECT u.ids[1 + i %% cardinality(u.ids)], 'preload-' || i, 'create_payment', 'POST', '/v1/payments',
      '{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture":true}',
      sha256(i::text::bytea), 'finished', 1, 201, convert_to(repeat('x', 400), 'UTF8'), now(), now() + interval '24 hours'
  FROM generate_series(1, %d) AS i, u
  RETURNING id, user_id),
p AS (
  INSERT INTO payments (id, user_id, amount, currency, status, capture, amount_captured, payment_method,
      stripe_payment_intent, metadata, idempotency_key_id)
  SELECT 'pay_' || md5(k.id::text), k.user_id, 2000, 'usd', 'succeeded', true, 2000, 'pm_card_visa',
      'pi_' || md5(k.id::text), '{}', k.id
  FROM k
  RETURNING id, user_id, idempotency_key_id)
INSERT INTO audit_records (user_id, action, resource_type, resource_id, data, idempotency_key_id)
SELECT p.user_id, a, 'payment', p.id, '{"amount":2000}', p.idempotency_key_id
FROM p, unnest(ARRAY['payment.created', 'payment.succeeded']) AS a`, n)
	if err := b.exec(ctx, tmplPayments, payments); err != nil {
		return fmt.Errorf("preloading %s: %w", tmplPayments, err)
	}
	// Each payment's PaymentIntent, found through a table of its own
	// (migration 000024), as the moves that set it leave it.
	intents := "INSERT INTO payment_intents (stripe_payment_intent, payment_id) " +
		"SELECT stripe_payment_intent, id FROM payments WHERE stripe_payment_intent IS NOT NULL"
	if err := b.exec(ctx, tmplPayments, intents); err != nil {
		return fmt.Errorf("preloading %s: %w", tmplPayments, err)
	}
	naive := fmt.Sprintf(`
WITH k AS (
  INSERT INTO idempotency_keys (key, user_id, recovery_point, locked_at, request_params, response_code, response_body)
  SELECT gen_random_uuid()::text, 1 + i %% 100000, 'finished', NULL, '{"amount_cents": 2000, "currency": "usd"}', 201,
      jsonb_build_object('id', i, 'amount_cents', 2000, 'currency', 'usd', 'status', 'succeeded')
  FROM generate_series(1, %d) AS i
  RETURNING id, user_id),
p AS (
  INSERT INTO payments (idempotency_key_id, user_id, amount_cents, currency, charge_id)
  SELECT k.id, k.user_id, 2000, 'usd', 'ch_' || md5(k.id::text) FROM k
  RETURNING id, user_id)
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
SELECT 'payment.created', '{"amount_cents": 2000}', '127.0.0.1', p.id, 'payment', p.user_id FROM p`, n)
	if err := b.exec(ctx, tmplNaive, naive); err != nil {
		return fmt.Errorf("preloading %s: %w", tmplNaive, err)
	}
	for _, dbname := range []string{tmplPayments, tmplNaive} {
		if err := b.exec(ctx, dbname, "VACUUM ANALYZE"); err != nil {
			return err
		}
	}
	b.log.Info("preloaded", slog.Int("requests", n), slog.Duration("took", time.Since(start).Round(time.Millisecond)))
	return nil
}

// serverCounters are the server's cumulative counters for one database
// (statements, transactions) and for the cluster (WAL).
type serverCounters struct {
	statements int64 // pg_stat_statements calls; -1 without it
	commits    int64
	rollbacks  int64
	walSyncs   int64
	walRecords int64
	walFPI     int64 // full-page images: the first change of a page after a checkpoint
	walBytes   float64
}

func (b *bench) serverCounters(ctx context.Context, dbname string) (serverCounters, error) {
	var c serverCounters
	err := b.monitor.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1`, dbname).
		Scan(&c.commits, &c.rollbacks)
	if err != nil {
		return c, fmt.Errorf("reading pg_stat_database: %w", err)
	}
	if err := b.monitor.QueryRow(ctx, `SELECT wal_sync, wal_records, wal_fpi, wal_bytes::float8 FROM pg_stat_wal`).
		Scan(&c.walSyncs, &c.walRecords, &c.walFPI, &c.walBytes); err != nil {
		return c, fmt.Errorf("reading pg_stat_wal: %w", err)
	}
	c.statements = -1
	if b.pgss {
		err := b.monitor.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, dbname).Scan(&c.statements)
		if err != nil {
			return c, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
	}
	return c, nil
}

// settle waits until no session is left on dbname, so that every backend
// of the cell has flushed its statistics (a backend flushes them at exit;
// while it runs, at most once a second).
func (b *bench) settle(ctx context.Context, dbname string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := b.monitor.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, dbname).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("sessions still open on " + dbname + " 10s after the pool closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Drop any statistics this session has cached, so the counters read next are fresh.
	_, err := b.monitor.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	return err
}

// logTopSQL logs the n statements of dbname that took the server the most
// execution time (parse, bind and the protocol are not in it), per request.
func (b *bench) logTopSQL(ctx context.Context, dbname string, n int, requests int) {
	rows, err := b.monitor.Query(ctx, `SELECT calls, total_exec_time, rows, wal_bytes::float8, left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
		ORDER BY total_exec_time DESC LIMIT $2`, dbname, n)
	if err != nil {
		b.log.Warn("reading pg_stat_statements", slog.String("error", err.Error()))
		return
	}
	defer rows.Close()
	per := float64(max(requests, 1))
	for rows.Next() {
		var calls, nrows int64
		var total, wal float64
		var query string
		if err := rows.Scan(&calls, &total, &nrows, &wal, &query); err != nil {
			b.log.Warn("reading pg_stat_statements", slog.String("error", err.Error()))
			return
		}
		b.log.Info("top sql", slog.String("µs/req", fmt.Sprintf("%.1f", total*1000/per)),
			slog.String("calls/req", fmt.Sprintf("%.2f", float64(calls)/per)),
			slog.String("µs/call", fmt.Sprintf("%.1f", total*1000/float64(max(calls, 1)))),
			slog.String("WAL B/req", fmt.Sprintf("%.0f", wal/per)), slog.String("query", query))
	}
}

// makePaymentsTemplate creates the service's template database: migrated,
// with the benchmark's users (every run, and the scale run, start from it).
func (b *bench) makePaymentsTemplate(ctx context.Context) error {
	if err := b.server.CreateDatabase(ctx, tmplPayments); err != nil {
		return err
	}
	if err := db.MigrateUp(ctx, b.server.URL(tmplPayments), nil); err != nil {
		return fmt.Errorf("migrating %s: %w", tmplPayments, err)
	}
	return b.createUsers(ctx, tmplPayments)
}
