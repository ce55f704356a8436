// Package dbtest gives each test its own real, migrated PostgreSQL database.
//
// The first test that asks starts one throwaway cluster for the whole test
// binary (package pglocal, from the system's server binaries), or uses the
// server named by TEST_DATABASE_URL when it is set. A template database is
// migrated once; each test then gets a fresh database cloned from it with
// CREATE DATABASE ... TEMPLATE, which takes a few tens of milliseconds, and
// dropped when the test ends.
//
// Call Main from the package's TestMain so the cluster is stopped and removed
// when the tests are done.
package dbtest

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/pglocal"
)

// Main runs the tests and then tears down the cluster, if one was started.
// Use it as: func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	shared.teardown()
	return code
}

// NewURL returns the URL of a fresh migrated database for t, dropped when t ends.
func NewURL(t testing.TB) string {
	t.Helper()
	if os.Getenv("RECOVERYTEST_CRASH") != "" {
		// A process recoverytest.Prove runs to kill: a database made here
		// would be one the test never sees, and a cluster started here
		// would outlive the kill.
		t.Fatalf("dbtest: in a process recoverytest kills, the test's database comes from recoverytest.Database (or Shared)")
	}
	env, err := shared.get()
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("%s_%d", env.template, env.seq.Add(1))
	if _, err := env.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+env.template+env.createSuffix); err != nil {
		t.Fatalf("dbtest: creating database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := env.admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: dropping database %s: %v", name, err)
		}
	})
	return env.urlFor(name)
}

// NewPool returns a small pool on a fresh migrated database, closed and
// dropped when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := db.Open(context.Background(), NewURL(t), db.PoolConfig{MaxConns: 8})
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the drop registered by NewURL
	return pool
}

// environment is the server and template shared by every test of the binary.
type environment struct {
	admin        *pgxpool.Pool // on the maintenance database, for CREATE/DROP DATABASE
	urlFor       func(dbname string) string
	template     string
	createSuffix string // STRATEGY = FILE_COPY where the server has it
	seq          atomic.Int64
	server       *pglocal.Server // nil with TEST_DATABASE_URL
	tempDir      string
}

type lazyEnvironment struct {
	once sync.Once
	env  *environment
	err  error
}

var shared lazyEnvironment

func (l *lazyEnvironment) get() (*environment, error) {
	l.once.Do(func() { l.env, l.err = setup(context.Background()) })
	return l.env, l.err
}

func (l *lazyEnvironment) teardown() {
	if l.env == nil {
		return
	}
	ctx := context.Background()
	if l.env.server == nil {
		// A shared server: leave it as we found it.
		_, _ = l.env.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+l.env.template+" WITH (FORCE)")
	}
	l.env.admin.Close()
	if l.env.server != nil {
		if err := l.env.server.Stop(); err != nil {
			log.Printf("dbtest: stopping postgres: %v", err)
		}
		_ = os.RemoveAll(l.env.tempDir)
	}
}

func setup(ctx context.Context) (*environment, error) {
	env := &environment{template: fmt.Sprintf("payments_test_%d", os.Getpid())}
	adminURL := os.Getenv("TEST_DATABASE_URL")
	if adminURL == "" {
		if err := env.startServer(ctx); err != nil {
			return nil, err
		}
		adminURL = env.server.URL("postgres")
	}
	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return nil, fmt.Errorf("parsing TEST_DATABASE_URL: %w", err)
	}
	env.urlFor = func(dbname string) string { return replaceDatabase(adminURL, cfg.Database, dbname) }
	if env.admin, err = db.Open(ctx, adminURL, db.PoolConfig{MaxConns: 4}); err != nil {
		return nil, err
	}
	if err := env.createTemplate(ctx); err != nil {
		env.admin.Close()
		return nil, err
	}
	return env, nil
}

func (env *environment) startServer(ctx context.Context) error {
	// Short and world-traversable, unlike t.TempDir(): the server may run as
	// the postgres user, and the socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	env.tempDir = dir
	env.server, err = pglocal.Start(ctx, pglocal.Config{
		DataDir:   filepath.Join(dir, "data"),
		Ephemeral: true,
		Settings:  map[string]string{"max_connections": "300"},
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("starting a test cluster (set TEST_DATABASE_URL to use a running server instead): %w", err)
	}
	return nil
}

func (env *environment) createTemplate(ctx context.Context) error {
	var version int
	if err := env.admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return err
	}
	if version >= 150000 {
		// FILE_COPY copies the template's few files instead of WAL-logging every
		// block, which is several times faster for a small database.
		env.createSuffix = " STRATEGY = FILE_COPY"
	}
	if _, err := env.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+env.template+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := env.admin.Exec(ctx, "CREATE DATABASE "+env.template); err != nil {
		return fmt.Errorf("creating template database: %w", err)
	}
	if err := db.MigrateUp(ctx, env.urlFor(env.template), nil); err != nil {
		return fmt.Errorf("migrating template database: %w", err)
	}
	return nil
}

// NewExamplePool is NewPool for an Example function, which has no
// testing.T: it returns a pool on a fresh migrated database and a function
// that closes the pool and drops the database. It panics when PostgreSQL
// cannot be had, as an example has no other way to fail.
func NewExamplePool() (*pgxpool.Pool, func()) {
	t := &exampleTB{}
	pool := NewPool(t)
	return pool, t.cleanup
}

// exampleTB is the part of testing.TB that NewPool uses, for an example.
type exampleTB struct {
	testing.TB // nil: any other method panics
	cleanups   []func()
}

func (t *exampleTB) Helper()                        {}
func (t *exampleTB) Cleanup(f func())               { t.cleanups = append(t.cleanups, f) }
func (t *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleTB) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

func (t *exampleTB) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// UpdatesInTx says how many rows of table the transaction tx has updated so
// far, and how many of those updates were HOT (pg_stat_xact_user_tables):
// the tests that a claim or a move writes no index entry use it.
func UpdatesInTx(t testing.TB, tx pgx.Tx, table string) (updates, hot int64) {
	t.Helper()
	err := tx.QueryRow(context.Background(), `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
		WHERE relid = $1::regclass`, table).Scan(&updates, &hot)
	if err != nil {
		t.Fatalf("reading the transaction's updates of %s: %v", table, err)
	}
	return updates, hot
}
