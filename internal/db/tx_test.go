package db_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

// readWriter is what the increments below need of a transaction.
type readWriter interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// The one transaction helper, handing the callback its writes sent at once,
// or queued (then the conflict surfaces at COMMIT's round trip).
var txHelpers = map[string]func(ctx context.Context, pool *pgxpool.Pool, fn func(context.Context, readWriter) error) error{
	"sent": func(ctx context.Context, pool *pgxpool.Pool, fn func(context.Context, readWriter) error) error {
		return db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error { return fn(ctx, tx) })
	},
	"queued": func(ctx context.Context, pool *pgxpool.Pool, fn func(context.Context, readWriter) error) error {
		return db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error { return fn(ctx, tx.Queued()) })
	},
}

func TestTxHelpers_retryARealSerializationFailure(t *testing.T) {
	t.Parallel()
	for name, withTx := range txHelpers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := dbtest.NewPool(t)
			_, err := pool.Exec(ctx, "CREATE TABLE counter (n int); INSERT INTO counter VALUES (0)")
			require.NoError(t, err)

			// Two increments read the counter at the same time, then both
			// write: one must fail to serialize, and its retry must see the
			// other's write.
			var attempts atomic.Int32
			var bothRead sync.WaitGroup
			bothRead.Add(2)
			increment := func() error {
				return withTx(ctx, pool, func(ctx context.Context, tx readWriter) error {
					attempt := attempts.Add(1)
					var n int
					if err := tx.QueryRow(ctx, "SELECT n FROM counter").Scan(&n); err != nil {
						return err
					}
					if attempt <= 2 {
						bothRead.Done()
						bothRead.Wait()
					}
					_, err := tx.Exec(ctx, "UPDATE counter SET n = $1", n+1)
					return err
				})
			}
			errs := make(chan error, 2)
			go func() { errs <- increment() }()
			go func() { errs <- increment() }()
			require.NoError(t, <-errs)
			require.NoError(t, <-errs)

			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT n FROM counter").Scan(&n))
			require.Equal(t, 2, n, "no increment lost")
			require.EqualValues(t, 3, attempts.Load(), "exactly one retry")
		})
	}
}

func TestWithTx_rollsBackAndReturnsOtherErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	boom := errors.New("boom")
	calls := 0
	err := db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		calls++
		if _, err := tx.Exec(ctx, "INSERT INTO users (email) VALUES ('rolled@back.example')"); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, calls, "not retried")
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM users").Scan(&n))
	require.Zero(t, n, "rolled back")
}

func TestWithTx_givesUpAfterItsAttempts(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	calls := 0
	err := db.WithTx(context.Background(), pool, db.TxOptions{Attempts: 3}, func(context.Context, *db.Tx) error {
		calls++
		return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	})
	require.ErrorIs(t, err, db.ErrSerialization)
	require.Equal(t, 3, calls)
}

// Unset, Attempts does not cap the retries: a transaction that keeps
// conflicting is run again until its time budget, RetryFor, is spent.
func TestWithTx_retriesForItsTimeBudget(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	calls := 0
	start := time.Now()
	err := db.WithTx(context.Background(), pool, db.TxOptions{RetryFor: 1500 * time.Millisecond}, func(context.Context, *db.Tx) error {
		calls++
		return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	})
	require.ErrorIs(t, err, db.ErrSerialization)
	require.Greater(t, calls, 5, "more than the five attempts of old")
	require.Less(t, time.Since(start), 1500*time.Millisecond+time.Second, "and no longer than the budget")
}

// PostgreSQL's errors leave db as its sentinels, whatever the statement
// that raised them: the callers never read a SQLSTATE.
func TestWithTx_translatesPostgreSQLErrorsIntoSentinels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	insertTwice := func(ctx context.Context, tx *db.Tx) error {
		for range 2 {
			if _, err := tx.Exec(ctx, "INSERT INTO users (email) VALUES ('same@example.com')"); err != nil {
				return err
			}
		}
		return nil
	}
	err := db.WithTx(ctx, pool, db.TxOptions{}, insertTwice)
	require.ErrorIs(t, err, db.ErrUniqueViolation)

	// assert_lock_held (migration 000008) raises when a fenced write moved no row.
	err = db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		_, err := tx.Queued().Exec(ctx, "SELECT assert_lock_held(0)")
		return err
	})
	require.ErrorIs(t, err, db.ErrLockNotHeld)
	require.NotErrorIs(t, err, db.ErrUniqueViolation)
}
