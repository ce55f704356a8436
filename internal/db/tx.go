package db

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Beginner is what WithTx needs: a pool, or a connection.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

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
}

// ErrSerialization is returned when a transaction still failed with a
// serialization failure or a deadlock after every attempt.
var ErrSerialization = errors.New("transaction kept conflicting with concurrent ones")

// WithTx runs fn in a transaction at the requested isolation (SERIALIZABLE by
// default) and commits it. A serialization failure (40001) or deadlock
// (40P01), from fn or from the commit, rolls back and runs fn again after a
// jittered backoff. Any other error rolls back and is returned as it is.
//
// It hands fn a plain pgx.Tx, for code that passes the transaction to a
// library (River's InsertManyTx) or that must issue every statement on its
// own (the benchmark's baseline). The engine and the flows use
// WithPipelinedTx, the same helper with fewer round trips.
func WithTx(ctx context.Context, db Beginner, opts TxOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	opts = opts.withDefaults()
	return retrySerializable(ctx, opts, func() error {
		return runTx(ctx, db, opts.Isolation, fn)
	})
}

func (opts TxOptions) withDefaults() TxOptions {
	if opts.Isolation == "" {
		opts.Isolation = pgx.Serializable
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 5 * time.Second
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
		if !IsSerializationFailure(err) {
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

// serializationRetries counts the attempts WithTx and WithPipelinedTx ran
// again, in this process.
var serializationRetries atomic.Uint64

// SerializationRetries is how many times WithTx or WithPipelinedTx, in this
// process, has run a transaction again after a serialization failure or
// deadlock (a failure on the last attempt is returned, not retried, and is
// not counted).
func SerializationRetries() uint64 { return serializationRetries.Load() }

func runTx(ctx context.Context, db Beginner, iso pgx.TxIsoLevel, fn func(context.Context, pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer rollbackWithoutCancel(ctx, tx)
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// rollbackWithoutCancel rolls back even when ctx is already cancelled, so a
// cancelled request never leaves its transaction open on the connection.
// After a commit it is a no-op.
func rollbackWithoutCancel(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// IsSerializationFailure tells whether err means "run the transaction again".
func IsSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// IsUniqueViolation tells whether err is a unique-constraint violation (23505).
func IsUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
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
