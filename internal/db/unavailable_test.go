package db_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
)

// Issue 39: every connection-class failure is db.ErrUnavailable (503
// service_unavailable above), never a fault of ours (500); a caller's own
// context ending, and the errors a request can cause, are not.
func TestIsUnavailable_classifiesConnectionClassFailures(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code} }
	for _, err := range []error{
		pg("08006"), pg("08001"), pg("08P01"), pg("57P01"), pg("57P02"), pg("57P03"), pg("25006"), pg("53300"),
		driverErr{io.ErrUnexpectedEOF},
		driverErr{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}},
		driverErr{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
		driverErr{fmt.Errorf("write: %w", syscall.EPIPE)},
		fmt.Errorf("acquiring a connection: %w", puddle.ErrClosedPool),
		driverErr{pgconn.ErrConnClosed},
		fmt.Errorf("%w: the server is a standby", db.ErrUnavailable),
	} {
		require.True(t, db.IsUnavailable(err), "%v", err)
	}
	for _, err := range []error{
		nil, pg("23505"), pg("40001"), pg("22P02"), pg("57014"), pgx.ErrNoRows,
		context.Canceled, fmt.Errorf("query: %w", context.DeadlineExceeded), errors.New("something else"),
		driverErr{context.Canceled}, // the caller's context ended mid-statement
		// The same network failures from anything but the driver: a
		// Stripe call, a mail server.
		&url.Error{Op: "Post", URL: "https://api.stripe.com/v1/payment_intents", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
		&url.Error{Op: "Post", URL: "https://api.stripe.com/v1/payment_intents", Err: errors.New("the process is shutting down")},
		fmt.Errorf("smtp: %w", io.ErrUnexpectedEOF),
	} {
		require.False(t, db.IsUnavailable(err), "%v", err)
	}
}

// A limit the server set on a statement, or a resource it ran short of, is
// temporary (the engine leaves the key resumable); other errors are not,
// and none of these is unavailability.
func TestIsTemporary_classifiesTheServersLimits(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code} }
	for _, err := range []error{pg("57014"), pg("55P03"), pg("53100"), pg("53200"), fmt.Errorf("%w: x", db.ErrTemporary)} {
		require.True(t, db.IsTemporary(err), "%v", err)
		require.False(t, db.IsUnavailable(err), "%v", err)
	}
	for _, err := range []error{nil, pg("53300"), pg("23505"), pg("23514"), pg("40001"), context.Canceled, errors.New("x")} {
		require.False(t, db.IsTemporary(err), "%v", err)
	}
}

// driverErr is an error as pgconn reports a failure of its own (its
// pgconnError, unexported): it says whether it is safe to retry.
type driverErr struct{ err error }

func (e driverErr) Error() string     { return "failed to receive message: " + e.err.Error() }
func (e driverErr) Unwrap() error     { return e.err }
func (e driverErr) SafeToRetry() bool { return false }

// What a transaction's statements return is the database's: a broken
// connection is ErrUnavailable however pgx reports it, a bare unexpected
// EOF included ("failed to deallocate cached statement(s): unexpected
// EOF", which make chaos-ha's runs answered 500 while IsUnavailable asked
// for the driver's own wrapping).
func TestWithTx_aBareBrokenConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	for _, broken := range []error{
		fmt.Errorf("failed to deallocate cached statement(s): %w", io.ErrUnexpectedEOF),
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
	} {
		err := db.WithTx(context.Background(), pool, db.TxOptions{}, func(context.Context, *db.Tx) error { return broken })
		require.ErrorIs(t, err, db.ErrUnavailable, "%v", broken)
	}
	require.True(t, db.ConnectionLost(fmt.Errorf("x: %w", io.ErrUnexpectedEOF)))
	require.False(t, db.ConnectionLost(context.Canceled))
	require.False(t, db.ConnectionLost(errors.New("something else")))
}

// A server that stopped listening (its machine died, a failover moved the
// primary away): the transaction fails at once as ErrUnavailable.
func TestWithTx_aServerThatDoesNotListenIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@"+addr+"/none?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	defer pool.Close()
	err = db.WithTx(context.Background(), pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	require.ErrorIs(t, err, db.ErrUnavailable)

	pool.Close()
	err = db.WithTx(context.Background(), pool, db.TxOptions{}, func(context.Context, *db.Tx) error { return nil })
	require.ErrorIs(t, err, db.ErrUnavailable, "a closed pool (the process stopping)")
}

// An operator, Patroni or a shutdown ending the session in the middle of a
// transaction (pg_terminate_backend: 57P01, then a closed socket).
func TestWithTx_aTerminatedSessionIsUnavailable(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	err := db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		var pid int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT 1")
		return err
	})
	require.ErrorIs(t, err, db.ErrUnavailable)
}

// The pool's transaction deadline (PoolConfig.TxTimeout, set from
// PAYMENTS_DB_TX_TIMEOUT) is every WithTx's on it.
func TestOpen_givesThePoolItsTransactionDeadline(t *testing.T) {
	t.Parallel()
	pool, err := db.Open(context.Background(), dbtest.NewURL(t), db.PoolConfig{MaxConns: 2, TxTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	defer pool.Close()
	require.Equal(t, 300*time.Millisecond, db.TxTimeout(pool))
	require.Equal(t, db.DefaultTxTimeout, db.TxTimeout(dbtest.NewPool(t)), "PoolConfig without one: the default")

	began := time.Now()
	err = db.WithTx(context.Background(), pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		_, err := tx.Exec(ctx, "SELECT pg_sleep(5)")
		return err
	})
	require.ErrorIs(t, err, db.ErrUnavailable)
	require.Less(t, time.Since(began), 2*time.Second, "ended at the pool's deadline, not the statement's end")
}

// Issue 39, items 3 and 4, on a cluster of the test's own whose synchronous
// standby is named but absent (as a primary cut off from its standby): a
// commit waits for it forever, so WithTx's deadline ends it as
// ErrUnavailable and ProbeCommit (/readyz) says no commit is possible;
// once the standby is no longer required, both succeed again. A server
// that refuses writes (default_transaction_read_only: 25006, as a demoted
// primary) fails the probe too.
func TestProbeCommitAndTxDeadline_onAPrimaryThatCannotCommit(t *testing.T) {
	t.Parallel()
	cluster := dbtest.NewCluster(t)
	ctx := context.Background()
	pool, err := db.Open(ctx, cluster.URL(), db.PoolConfig{MaxConns: 8, TxTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	defer pool.Close()
	write := func() error {
		return db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO commit_probe (id, probed_at) VALUES (true, now()) ON CONFLICT (id) DO UPDATE SET probed_at = now()")
			return err
		})
	}
	require.NoError(t, db.ProbeCommit(ctx, pool, 0))
	require.NoError(t, write())

	cluster.SetSynchronousStandbys("phantom")
	require.Eventually(t, func() bool { return db.ProbeCommit(ctx, pool, time.Second) != nil }, 10*time.Second, 50*time.Millisecond)
	began := time.Now()
	err = db.ProbeCommit(ctx, pool, time.Second)
	require.ErrorIs(t, err, db.ErrUnavailable)
	require.Less(t, time.Since(began), 2*time.Second, "the probe answers within its deadline")
	began = time.Now()
	err = write()
	require.ErrorIs(t, err, db.ErrUnavailable, "a commit past the transaction's deadline")
	require.Less(t, time.Since(began), 2*time.Second, "at the deadline (500 ms), not when the standby comes")

	cluster.SetSynchronousStandbys("")
	require.Eventually(t, func() bool { return db.ProbeCommit(ctx, pool, time.Second) == nil }, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, write())

	cluster.Exec("ALTER DATABASE " + dbtest.DBName + " SET default_transaction_read_only = on")
	pool.Reset() // new sessions take the database's setting
	err = db.ProbeCommit(ctx, pool, 0)
	require.ErrorIs(t, err, db.ErrUnavailable, "a server that refuses writes")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code)
}
