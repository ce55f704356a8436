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
	// Attempts is how many times a serialization failure or deadlock is tried
	// in all (default 5). The callback must be safe to run again.
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
	return retrySerializable(ctx, opts.Attempts, func() error {
		return runTx(ctx, db, opts.Isolation, fn)
	})
}

func (opts TxOptions) withDefaults() TxOptions {
	if opts.Isolation == "" {
		opts.Isolation = pgx.Serializable
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 5
	}
	return opts
}

// retrySerializable runs attempt until it does not fail with a
// serialization failure or deadlock, at most attempts times, with a
// jittered backoff between tries.
func retrySerializable(ctx context.Context, attempts int, attempt func() error) error {
	var err error
	for n := 1; n <= attempts; n++ {
		err = attempt()
		if !IsSerializationFailure(err) {
			return err
		}
		if n < attempts {
			serializationRetries.Add(1)
			if werr := sleepCtx(ctx, retryBackoff(n)); werr != nil {
				return werr
			}
		}
	}
	return fmt.Errorf("%w (%d attempts): %w", ErrSerialization, attempts, err)
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
