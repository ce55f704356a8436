package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// The sentinels PostgreSQL's errors become. This file is the only place
// that reads a SQLSTATE: above db, code asks errors.Is(err, db.ErrX), and
// package api turns the sentinels of the layers above into HTTP answers.
var (
	// ErrSerialization: the transaction still failed with a serialization
	// failure (40001) or a deadlock (40P01) when its retry budget ran out.
	ErrSerialization = errors.New("transaction kept conflicting with concurrent ones")
	// ErrUniqueViolation: a write hit a unique index (23505).
	ErrUniqueViolation = errors.New("unique constraint violated")
	// ErrLockNotHeld: a fenced write matched no row and assert_lock_held
	// (migration 000008) raised PK001: the caller's lock was taken over.
	ErrLockNotHeld = errors.New("fenced write: the caller no longer holds the lock")
	// ErrUnavailable: no commit is possible now. The connection to the
	// database failed or was lost (the server, its machine or the network
	// went away; a failover is under way), the server is shutting down or
	// starting up, it is no longer the primary (a read-only transaction),
	// it has no connection left, or the transaction ran out of its deadline
	// (TxOptions.Timeout: a commit waiting for a synchronous standby that
	// is gone). Whatever the transaction did is rolled back, or, for a
	// commit whose answer was lost, committed or not: the caller must treat
	// it as unknown and retry from what is committed (IsUnavailable).
	ErrUnavailable = errors.New("database unavailable: no commit is possible now")
	// ErrTemporary: the server cut the statement short by a limit of its
	// own or ran short of a resource (IsTemporary), though it can commit:
	// nothing about the request is wrong, and the same work later may well
	// succeed.
	ErrTemporary = errors.New("database limit reached: the statement was cut short")
)

// IsTemporary tells whether err is the server's limit rather than the
// request's fault or the database's absence: 57014 query_canceled (a
// statement_timeout an operator set, in postgresql.conf or the connection
// string), 55P03 lock_not_available (a lock_timeout), and class 53,
// insufficient resources (disk full, out of memory; 53300, no connection
// left, is IsUnavailable). https://www.postgresql.org/docs/current/errcodes-appendix.html
// The engine leaves a key resumable after one (recovery's failsTheKey),
// where any other error of a phase fails the key for an operator: a slow
// moment of the database must not need one. The caller's own context
// ending is not this: pgx closes the connection then, and the context says
// why.
func IsTemporary(err error) bool {
	if errors.Is(err, ErrTemporary) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "57014" || pgErr.Code == "55P03" || (strings.HasPrefix(pgErr.Code, "53") && pgErr.Code != "53300")
}

// translate wraps a PostgreSQL error with its sentinel; the PgError stays
// in the chain, for the logs. A connection-class failure (IsUnavailable)
// becomes ErrUnavailable. Other errors are returned as they are.
func translate(err error) error {
	if err == nil || errors.Is(err, ErrSerialization) || errors.Is(err, ErrUnavailable) {
		return err
	}
	if unavailable(err) || connectionLost(err) {
		// translate sees only what a transaction's statements returned:
		// a broken connection here is the database's, whether or not the
		// driver wrapped it (pgx also returns a bare unexpected EOF, as in
		// "failed to deallocate cached statement(s): unexpected EOF",
		// which answered 500 in make chaos-ha's runs).
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if IsTemporary(err) {
		return fmt.Errorf("%w: %w", ErrTemporary, err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "23505":
		return fmt.Errorf("%w: %w", ErrUniqueViolation, err)
	case "PK001":
		return fmt.Errorf("%w: %w", ErrLockNotHeld, err)
	}
	return err
}

// IsUnavailable tells whether err means that no commit is possible now
// (ErrUnavailable): either WithTx's translated error, or the untranslated
// error of a statement run on the pool outside WithTx (a read, a
// heartbeat), which comes straight from the driver. Nothing final may be
// stored because of it, and a retry later may well succeed.
func IsUnavailable(err error) bool {
	return err != nil && (errors.Is(err, ErrUnavailable) || unavailable(err))
}

// unavailable classifies a driver's error as a connection-class failure:
//
//   - SQLSTATE class 08 (connection exception), 57P01 (admin shutdown: the
//     server is stopping, or an operator or Patroni ended the session),
//     57P02 (crash shutdown: another backend crashed and the postmaster is
//     resetting), 57P03 (cannot connect now: starting up, or a standby not
//     yet accepting connections), 25006 (read-only transaction: the node was
//     demoted, or the connection reached a standby), 53300 (too many
//     connections: a retry later can get one; the server is not at fault
//     for the request, and neither is the client);
//     https://www.postgresql.org/docs/current/errcodes-appendix.html
//   - a connection that could not be made (pgconn.ConnectError: refused,
//     dial timeout, a server that answered with one of the above while the
//     session started), or that broke while in use (unexpected EOF,
//     connection reset, broken pipe, any net.Error, as the driver reports
//     them: pgx then closes the connection), or one pgx already closed;
//   - the pool closed under the caller (the process is shutting down);
//   - a deadline that pgx reported as its own timeout, when it is the
//     transaction's deadline (WithTx marks those itself, with
//     errTxDeadline; a caller's own context ending is not unavailability).
func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03", code == "25006", code == "53300":
			return true
		}
		return false
	}
	if errors.Is(err, errTxDeadline) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller's context ended (the client went away, the process
		// is shutting down): its own answer, not the database's state.
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || errors.Is(err, puddle.ErrClosedPool) {
		return true
	}
	// A network failure counts only when the driver reports it: pgconn
	// wraps every error of its own in a type that says whether it is safe
	// to retry. Other network errors that reach the same callers (a Stripe
	// call's *url.Error, a mail server's) are not the database's.
	var driverErr interface{ SafeToRetry() bool }
	return errors.As(err, &driverErr) && connectionLost(err)
}

// connectionLost tells whether err is a connection that broke or could not
// be made, whoever reports it: unexpected EOF, connection reset or refused,
// broken pipe, any net.Error, a connection pgx closed. From a database's
// statement that is the database gone; from anything else (a Stripe call,
// a mail server) it is that remote's, so only the callers that know the
// error came from the database ask it alone (translate, and the API's last
// resort before a 500: ConnectionLost).
func connectionLost(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed)
}

// ConnectionLost is connectionLost for a caller that has ruled out every
// other remote: the API's answer to an error nothing else classified (a
// Stripe call's failure is transient by then, and answered as such), which
// would otherwise be a 500, never the answer to a connection that broke.
func ConnectionLost(err error) bool { return err != nil && connectionLost(err) }

// isSerializationFailure tells whether err means "run the transaction again".
func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
