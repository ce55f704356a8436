package db

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TxOptions says how WithTx runs its callback.
type TxOptions struct {
	Isolation pgx.TxIsoLevel // default serializable
	// RetryFor is how long, from the first attempt, a transaction that
	// failed with a serialization failure or deadlock is run again (default
	// 5s, and never past ctx's end). The callback must be safe to run again.
	//
	// Why a time and not a count: SERIALIZABLE's predicate locks are taken on
	// whole index pages, and on a young database an index is a page or two,
	// so concurrent requests with different keys conflict far more often
	// than on one that has run for a while (1.4 retries per request at 32
	// clients on an empty database, against under 0.01 with 100,000 keys).
	// Those conflicts are the service's to resolve, not the client's
	// (API.md rule 5): a budget in time lets them run again as often as the
	// request can afford, where five attempts ran out.
	RetryFor time.Duration
	// Attempts, when set, caps how many times the transaction runs in all.
	Attempts int
	// Timeout is each run's deadline, from acquiring its connection to its
	// COMMIT's answer. Default: the pool's (PoolConfig.TxTimeout), else
	// DefaultTxTimeout. A run that reaches it fails with ErrUnavailable.
	Timeout time.Duration
}

// DefaultTxTimeout is a transaction's deadline when neither TxOptions nor
// the pool's PoolConfig gives one.
const DefaultTxTimeout = 10 * time.Second

// errTxDeadline is the cause of a transaction's context ending at its
// deadline (TxOptions.Timeout); it marks the error as ErrUnavailable.
var errTxDeadline = errors.New("the transaction ran out of its deadline")

// WithTx is the one way this service runs a transaction. It runs fn in a
// transaction at the requested isolation (SERIALIZABLE by default), on one
// connection of pool, and commits it. A serialization failure (40001) or
// deadlock (40P01), from fn or from the commit, rolls back and runs fn
// again after a jittered backoff, until opts.RetryFor is spent: then the
// error is ErrSerialization. Any other error rolls back and is returned,
// PostgreSQL's translated into this package's sentinels (errors.go).
//
// fn gets a Tx, which spends as few round trips as it can (see Tx: BEGIN
// goes with the first statement, and writes nobody reads can be queued).
//
// Every run has a deadline (TxOptions.Timeout): a connection that cannot
// be had, a statement that waits on a lock, and above all a COMMIT that
// waits for a synchronous standby that is gone (PostgreSQL waits for it
// forever: synchronous_standby_names, "Synchronous Replication" in its
// documentation) end there, as ErrUnavailable, and the caller retries like
// any transient failure. At the deadline pgx closes the connection's socket
// (its default ctxwatch handler, pgconn.DeadlineContextWatcherHandler),
// and that must stay so: do NOT install pgconn.CancelRequestContextWatcherHandler.
// A cancel request that reaches a backend waiting for synchronous
// replication ends the wait with a WARNING ("canceling wait for synchronous
// replication ... The transaction has already committed locally, but might
// not have been replicated to the standby") and the COMMIT reports success:
// the caller would take for durable a commit that only the old primary
// holds, which a failover then loses. A closed socket gives no answer, so
// the outcome is unknown, as it truly is, and the caller resumes from what
// a later transaction reads.
func WithTx(ctx context.Context, pool *pgxpool.Pool, opts TxOptions, fn func(ctx context.Context, tx *Tx) error) error {
	opts = opts.withDefaults(pool)
	err := retrySerializable(ctx, opts, func() error {
		return runTx(ctx, pool, opts, fn)
	})
	return translate(err)
}

func (opts TxOptions) withDefaults(pool *pgxpool.Pool) TxOptions {
	if opts.Isolation == "" {
		opts.Isolation = pgx.Serializable
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = TxTimeout(pool)
	}
	return opts
}

// retrySerializable runs attempt until it does not fail with a
// serialization failure or deadlock, with a jittered backoff between tries,
// for as long as opts allow.
func retrySerializable(ctx context.Context, opts TxOptions, attempt func() error) error {
	giveUp := time.Now().Add(opts.RetryFor)
	for n := 1; ; n++ {
		err := attempt()
		if !isSerializationFailure(err) {
			return err
		}
		wait := retryBackoff(n)
		if (opts.Attempts > 0 && n >= opts.Attempts) || time.Now().Add(wait).After(giveUp) {
			return fmt.Errorf("%w (%d attempts): %w", ErrSerialization, n, err)
		}
		serializationRetries.Add(1)
		if werr := sleepCtx(ctx, wait); werr != nil {
			return werr
		}
	}
}

// serializationRetries counts the attempts WithTx ran again, in this process.
var serializationRetries atomic.Uint64

// SerializationRetries is how many times WithTx, in this process, has run a
// transaction again after a serialization failure or deadlock (a failure
// on the last attempt is returned, not retried, and is not counted).
func SerializationRetries() uint64 { return serializationRetries.Load() }

// runTx runs one transaction within opts.Timeout. An error that comes
// from reaching that deadline (and not from ctx's own end) is marked
// errTxDeadline, which translate makes ErrUnavailable.
func runTx(ctx context.Context, pool *pgxpool.Pool, opts TxOptions, fn func(context.Context, *Tx) error) error {
	txCtx, cancel := context.WithTimeoutCause(ctx, opts.Timeout, errTxDeadline)
	defer cancel()
	err := runTxOnce(txCtx, pool, opts.Isolation, fn)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(txCtx), errTxDeadline) {
		return fmt.Errorf("%w (%v): %w", errTxDeadline, opts.Timeout, err)
	}
	return err
}

func runTxOnce(ctx context.Context, pool *pgxpool.Pool, iso pgx.TxIsoLevel, fn func(context.Context, *Tx) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring a connection: %w", err)
	}
	defer conn.Release()
	tx := &Tx{conn: conn.Conn(), begin: "BEGIN ISOLATION LEVEL " + string(iso)}
	defer tx.rollbackWithoutCancel(ctx)
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.commit(ctx)
}

// retryBackoff is 10 ms, 20 ms, 40 ms... (capped at 320 ms), each with full jitter.
func retryBackoff(attempt int) time.Duration {
	base := 10 * time.Millisecond << min(attempt-1, 5)
	return time.Duration(rand.Int64N(int64(base))) + time.Millisecond
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
