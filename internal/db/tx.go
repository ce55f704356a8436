package db

import (
	"context"
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
}

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
func WithTx(ctx context.Context, pool *pgxpool.Pool, opts TxOptions, fn func(ctx context.Context, tx *Tx) error) error {
	opts = opts.withDefaults()
	err := retrySerializable(ctx, opts, func() error {
		return runTx(ctx, pool, opts.Isolation, fn)
	})
	return translate(err)
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

func runTx(ctx context.Context, pool *pgxpool.Pool, iso pgx.TxIsoLevel, fn func(context.Context, *Tx) error) error {
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
