package db_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
)

// sends counts what a pool sends to the server: each query or batch is one
// round trip (pgx adds one more the first time it prepares a statement).
type sends struct{ n atomic.Int64 }

func (s *sends) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *sends) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *sends) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *sends) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *sends) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// tracedPool is a pool on a fresh test database whose sends are counted.
func tracedPool(t *testing.T) (*pgxpool.Pool, *sends) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	require.NoError(t, err)
	s := &sends{}
	cfg.ConnConfig.Tracer = s
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(context.Background(), "CREATE TABLE notes (id int PRIMARY KEY, body text NOT NULL)")
	require.NoError(t, err)
	return pool, s
}

func countNotes(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM notes").Scan(&n))
	return n
}

func TestPipelinedTx_sendsBeginWithTheFirstStatementAndQueuedWritesWithCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, s := tracedPool(t)
	write := func(ctx context.Context, tx *db.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM notes").Scan(&n); err != nil {
			return err
		}
		for i := range 3 {
			if _, err := tx.Queued().Exec(ctx, "INSERT INTO notes VALUES ($1, 'queued')", n+i); err != nil {
				return err
			}
		}
		return nil
	}
	require.NoError(t, db.WithTx(ctx, pool, db.TxOptions{}, write)) // prepares the statements
	before := s.n.Load()
	require.NoError(t, db.WithTx(ctx, pool, db.TxOptions{}, write))
	require.EqualValues(t, 2, s.n.Load()-before, "BEGIN+SELECT, then 3 INSERTs+COMMIT")
	require.Equal(t, 6, countNotes(t, pool))
}

func TestPipelinedTx_aQueuedWritesErrorSurfacesAtTheNextStatementAndRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := tracedPool(t)
	_, err := pool.Exec(ctx, "INSERT INTO notes VALUES (1, 'taken')")
	require.NoError(t, err)

	err = db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO notes VALUES (2, 'first')"); err != nil {
			return err
		}
		_, err := tx.Queued().Exec(ctx, "INSERT INTO notes VALUES (1, 'duplicate')")
		require.NoError(t, err, "queued: nothing sent yet")
		var n int
		return tx.QueryRow(ctx, "SELECT count(*) FROM notes").Scan(&n)
	})
	require.True(t, errors.Is(err, db.ErrUniqueViolation), "the queued insert's error, at the next statement: %v", err)
	require.Equal(t, 1, countNotes(t, pool), "the whole transaction rolled back")
}

func TestPipelinedTx_aQueuedWritesErrorAtCommitFailsTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := tracedPool(t)
	_, err := pool.Exec(ctx, "INSERT INTO notes VALUES (1, 'taken')")
	require.NoError(t, err)

	err = db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		if _, err := tx.Queued().Exec(ctx, "INSERT INTO notes VALUES (2, 'fine')"); err != nil {
			return err
		}
		_, err := tx.Queued().Exec(ctx, "INSERT INTO notes VALUES (1, 'duplicate')")
		return err
	})
	require.True(t, errors.Is(err, db.ErrUniqueViolation), "%v", err)
	require.Equal(t, 1, countNotes(t, pool), "nothing committed")

	// Every connection went back to the pool idle, outside any transaction.
	for range 4 {
		require.NoError(t, db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO notes VALUES ((SELECT max(id) + 1 FROM notes), 'after')")
			return err
		}))
	}
	require.Equal(t, 5, countNotes(t, pool))
}

func TestPipelinedTx_anErrorOfTheCallbackRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := tracedPool(t)
	boom := errors.New("boom")
	err := db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO notes VALUES (1, 'sent')"); err != nil {
			return err
		}
		if _, err := tx.Queued().Exec(ctx, "INSERT INTO notes VALUES (2, 'queued')"); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Zero(t, countNotes(t, pool))
}

func TestPipelinedTx_sendsNothingWhenTheCallbackDoesNothing(t *testing.T) {
	t.Parallel()
	pool, s := tracedPool(t)
	before := s.n.Load()
	require.NoError(t, db.WithTx(context.Background(), pool, db.TxOptions{}, func(context.Context, *db.Tx) error { return nil }))
	require.Zero(t, s.n.Load()-before)
}

func TestPipelinedTx_readsRowsAfterQueuedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := tracedPool(t)
	var bodies []string
	err := db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		bodies = nil
		for i, b := range []string{"a", "b"} {
			if _, err := tx.Queued().Exec(ctx, "INSERT INTO notes VALUES ($1, $2)", i, b); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, "SELECT body FROM notes ORDER BY id")
		if err != nil {
			return err
		}
		bodies, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, bodies, "the queued writes ran first, in order")
	require.Equal(t, 2, countNotes(t, pool))
}

func TestPipelinedTx_aCancelledRequestLeavesNoTransactionOpen(t *testing.T) {
	t.Parallel()
	pool, _ := tracedPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		if _, err := tx.Queued().Exec(ctx, "INSERT INTO notes VALUES (1, 'never committed')"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(10)") // cancelled while it runs
		return err
	})
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Nothing committed, and every connection the pool hands out works,
	// outside any transaction.
	bg := context.Background()
	require.Zero(t, countNotes(t, pool))
	for range 4 {
		require.NoError(t, db.WithTx(bg, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
			var one int
			return tx.QueryRow(ctx, "SELECT 1").Scan(&one)
		}))
	}
	// The cancelled connection was closed; its server process ends once it
	// reads the close, which may take it a moment on a busy machine.
	require.Eventually(t, func() bool {
		var idleInTx int
		require.NoError(t, pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&idleInTx))
		return idleInTx == 0
	}, 10*time.Second, 20*time.Millisecond, "a transaction stayed open")
}

// Flush sends what waits (BEGIN, queued writes) at once: a transaction
// that must send BEGIN alone, as pgbench and the benchmark's naive baseline
// do, flushes first.
func TestPipelinedTx_flushSendsBeginAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, s := tracedPool(t)
	write := func(ctx context.Context, tx *db.Tx) error {
		if err := tx.Flush(ctx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO notes VALUES (1, 'alone')")
		return err
	}
	require.NoError(t, db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error { return tx.Flush(ctx) }))
	before := s.n.Load()
	require.NoError(t, db.WithTx(ctx, pool, db.TxOptions{}, write))
	require.EqualValues(t, 3, s.n.Load()-before, "BEGIN, then INSERT, then COMMIT")
	require.Equal(t, 1, countNotes(t, pool))
}

// A statement queued with QueueLater is made when the queue is sent, in
// its place in the queue: what its maker says then, not when it was queued.
func TestPipelinedTx_aStatementQueuedLaterIsMadeWhenSentInItsPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := tracedPool(t)
	var made int
	require.NoError(t, db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		body := "as queued"
		tx.QueueLater(func(q db.QueuedTx) error {
			made++
			_, err := q.Exec(ctx, "INSERT INTO notes VALUES (1, $1)", body)
			return err
		})
		// After it in the queue, and it must already be there: the later
		// statement keeps its place ahead of this one.
		if _, err := tx.Queued().Exec(ctx, "UPDATE notes SET body = body || ', then updated' WHERE id = 1"); err != nil {
			return err
		}
		body = "as sent"
		return nil
	}))
	require.Equal(t, 1, made, "made once, when the COMMIT sent the queue")
	var body string
	require.NoError(t, pool.QueryRow(ctx, "SELECT body FROM notes WHERE id = 1").Scan(&body))
	require.Equal(t, "as sent, then updated", body)

	// Sent by a statement whose result is read: made then, once.
	made = 0
	require.NoError(t, db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		tx.QueueLater(func(q db.QueuedTx) error {
			made++
			_, err := q.Exec(ctx, "INSERT INTO notes VALUES (2, 'read back')")
			return err
		})
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM notes").Scan(&n); err != nil {
			return err
		}
		require.Equal(t, 2, n)
		require.Equal(t, 1, made)
		return nil
	}))
	require.Equal(t, 1, made)

	// A maker's error fails the statement that would have sent it.
	boom := errors.New("boom")
	err := db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		tx.QueueLater(func(db.QueuedTx) error { return boom })
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 2, countNotes(t, pool))
}
