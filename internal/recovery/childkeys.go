package recovery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// A spent child key.
//
// Stripe saves a request's status and body under its idempotency key once
// the endpoint's execution began, and replays them to every later request
// with the key, "including 500 errors" (Stripe's API reference,
// "Idempotent requests"). Retrying the same child key, as the engine does
// after any transient failure, would then fail for a day, and the key would
// end up needing a person. So when a call reports its child key spent
// (ChildKeySpent: a replayed 5xx), the engine:
//
//  1. records that the step's current child key is spent, and when it was
//     first found so (durably, fenced by the lock: child_key_generations);
//  2. reconciles: asks the remote side, without the key, whether the call
//     made its object after all (the 500 may have come after the work).
//     A reconcile reads what the remote side holds now (Stripe's lists and
//     objects, which show a write at once; never its search, which lags),
//     so what it finds is true when it looks. If it finds the object, that
//     is the call's result, recorded as any other;
//  3. if it finds nothing, and Config.SpentKeyGrace has passed since step
//     1, moves the step on to the next generation of its child key, in one
//     fenced statement that only one holder can win, and calls again with
//     the new key. Within the grace the attempt ends transient, with the
//     rest of the grace as its RetryAfter: the client gets 503 with a
//     Retry-After saying when the grace ends, and a retry or the completer
//     comes back then.
//
// Why a grace, when the reconcile is consistent: a stored 500 says that
// Stripe's execution of the request began and that Stripe answered 500,
// not that the execution had ended. A request answered 500 while its work
// was still under way could make its PaymentIntent after the reconcile
// looked, and the new key would then charge a second time. The grace gives
// such work time to land before "nothing" is believed. It runs from the
// first replayed 500, which comes after the spent key's only executed
// request was sent (every later request with the key is answered from
// Stripe's store and executes nothing), so the work has had at least the
// grace, and usually a retry's wait more.
//
// Every process derives the step's child key from the recorded generation
// (Key.ChildKey), so all of them use the new key from then on, and none
// ever goes back to the spent one.

// DefaultSpentKeyGrace is Config.SpentKeyGrace's default. Stripe publishes
// no bound on how long a request it already answered 500 may go on
// executing (https://docs.stripe.com/api/idempotent_requests says only that
// the result is saved once execution begins). A minute is a bet that such
// work ends within a minute of the first replay (which itself comes a
// retry's wait after the 500): stripe-go gives a call 80 s in all, "to
// coordinate with other timeouts configured in the Stripe infrastructure".
// It is also what the contract promises the client: the final answer about
// a minute after the 500 (docs/API.md section 2, idempotency rule 7). The
// simulator's late_500 fault, and TestStored500_aLate500ChargesOnce and
// TestStored500_aLate500WithoutTheGraceChargesTwice, show what it guards
// against.
const DefaultSpentKeyGrace = time.Minute

// callExternal makes the phase's call with the current generation of its
// child key and, if the remote side reports the key spent, finds out what
// the spent key did and moves on from it.
func (e *Engine) callExternal(ctx context.Context, k *Key, phase Phase) (any, error) {
	if err := e.loadChildKeyGenerations(ctx, k); err != nil {
		return nil, err
	}
	result, err := e.callWithHeartbeat(ctx, k, phase.call)
	if !errors.Is(err, ErrChildKeySpent) {
		return result, err
	}
	result, renewed, err := e.afterSpentChildKey(ctx, k, phase, err)
	if !renewed {
		return result, err
	}
	return e.callWithHeartbeat(ctx, k, phase.call) // the new key's first call
}

// loadChildKeyGenerations reads the generations of k's child keys, once per
// attempt. A key this attempt made has none but the ones it records.
func (e *Engine) loadChildKeyGenerations(ctx context.Context, k *Key) error {
	if k.generationsLoaded {
		return nil
	}
	if !k.insertedByThisClaim {
		rows, err := queries.ListChildKeyGenerations(ctx, e.cfg.Pool, k.ID)
		if err != nil {
			return err
		}
		for _, r := range rows {
			k.setGeneration(r.Step, r.Generation)
		}
	}
	k.generationsLoaded = true
	return nil
}

func (k *Key) setGeneration(step string, g int32) {
	if k.generations == nil {
		k.generations = make(map[string]int32)
	}
	k.generations[step] = g
}

// afterSpentChildKey handles a call whose child key is spent (spentErr):
// it returns the call's result if reconciling finds it, renewed when the
// step moved on to a new child key that the caller must now call with, or
// else an error: spentErr, with the grace's rest to wait, while the grace
// lasts.
func (e *Engine) afterSpentChildKey(ctx context.Context, k *Key, phase Phase, spentErr error) (result any, renewed bool, err error) {
	log := e.log.With(slog.String("idempotency_key_id", k.ID.String()), slog.String("step", phase.step),
		slog.String("child_key", k.ChildKey(phase.step)))
	generation := k.generations[phase.step]
	var graceLeft time.Duration
	err = db.WithTx(ctx, e.cfg.Pool, e.txOptions(), func(ctx context.Context, tx *db.Tx) error {
		seconds, err := queries.MarkChildKeySpent(ctx, tx, dbsqlc.MarkChildKeySpentParams{
			IdempotencyKeyID: k.ID, LockToken: k.lockToken, Step: phase.step, Generation: generation,
			Now: e.queryNow(), GraceSeconds: e.cfg.SpentKeyGrace.Seconds(),
		})
		graceLeft = time.Duration(seconds * float64(time.Second))
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, ErrLockLost // another attempt holds the key, or moved the step on
	case err != nil:
		return nil, false, err
	}
	log.WarnContext(ctx, "child key spent: the remote side replays a stored failure for it; reconciling")

	if phase.reconcile == nil {
		// Nothing can tell whether the spent key acted: only a person can.
		_, err := e.reconcile(ctx, k, phase)
		return nil, false, err
	}
	result, found, err := e.findEarlierCall(ctx, k, phase)
	switch {
	case err != nil:
		return nil, false, err
	case found:
		log.InfoContext(ctx, "child key spent, but its call had acted: recording what it made")
		return result, false, nil
	case graceLeft > 0:
		log.InfoContext(ctx, "child key spent and nothing found yet; its request may still be executing at the remote side",
			slog.Duration("grace_left", graceLeft))
		return nil, false, retryAfter(spentErr, graceLeft)
	}

	n, err := queries.RenewChildKey(ctx, e.cfg.Pool, dbsqlc.RenewChildKeyParams{
		IdempotencyKeyID: k.ID, Step: phase.step, Generation: generation, LockToken: k.lockToken,
	})
	switch {
	case err != nil:
		return nil, false, err
	case n == 0:
		return nil, false, ErrLockLost
	}
	k.setGeneration(phase.step, generation+1)
	log.WarnContext(ctx, "child key spent and its call made nothing: moving on to a new child key",
		slog.String("new_child_key", k.ChildKey(phase.step)))
	return nil, true, nil
}

// retryAfter is err, a transient failure, telling its client to wait d.
func retryAfter(err error, d time.Duration) error {
	var t *TransientError
	if !errors.As(err, &t) {
		return &TransientError{Err: err, RetryAfter: d}
	}
	waiting := *t
	waiting.RetryAfter = d
	return &waiting
}
