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
// Stripe stores a request's result under its idempotency key once the
// request began to execute, and a 500 too: every later request with the key
// gets that 500 again (Idempotent-Replayed: true), for as long as Stripe
// keeps the key. Retrying the same child key, as the engine does after any
// transient failure, would then fail for a day, and the key would end up
// needing a person. So when a call reports its child key spent
// (ChildKeySpent), the engine:
//
//  1. records that the step's current child key is spent, and when it was
//     first found so (durably, fenced by the lock: child_key_generations);
//  2. reconciles: asks the remote side, without the key, whether the call
//     made its object after all (the 500 may have come after the work).
//     If so, that is the call's result, recorded as any other;
//  3. if not, and the reconcile can be trusted (a search only once
//     Config.SearchLag has passed since step 1; see WithSearchReconcile),
//     moves the step on to the next generation of its child key, in one
//     fenced statement that only one holder can win, and calls again with
//     the new key. Until then the attempt ends transient: the client gets
//     503, and a retry or the completer comes back later.
//
// Every process derives the step's child key from the recorded generation
// (Key.ChildKey), so all of them use the new key from then on, and none
// ever goes back to the spent one.

// DefaultSearchLag is Config.SearchLag's default: Stripe's search shows an
// object within a minute, and up to an hour late during an outage.
const DefaultSearchLag = time.Hour

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
	if !k.made {
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
// else an error: spentErr while the reconcile cannot be trusted yet.
func (e *Engine) afterSpentChildKey(ctx context.Context, k *Key, phase Phase, spentErr error) (result any, renewed bool, err error) {
	log := e.log.With(slog.String("idempotency_key_id", k.ID.String()), slog.String("step", phase.step),
		slog.String("child_key", k.ChildKey(phase.step)))
	generation := k.generations[phase.step]
	lag := time.Duration(0)
	if phase.reconcileSearches {
		lag = e.cfg.SearchLag
	}
	var lagPassed bool
	err = db.WithTx(ctx, e.cfg.Pool, e.txOptions(), func(ctx context.Context, tx *db.Tx) error {
		var err error
		lagPassed, err = queries.MarkChildKeySpent(ctx, tx, dbsqlc.MarkChildKeySpentParams{
			IdempotencyKeyID: k.ID, LockToken: k.lockToken, Step: phase.step, Generation: generation,
			Now: e.now(), LagSeconds: lag.Seconds(),
		})
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
	result, found, err := phase.reconcile(ctx, k)
	switch {
	case err != nil:
		return nil, false, err
	case found:
		log.InfoContext(ctx, "child key spent, but its call had acted: recording what it made")
		return result, false, nil
	case !lagPassed:
		log.InfoContext(ctx, "child key spent and nothing found yet; waiting out the search lag", slog.Duration("lag", lag))
		return nil, false, spentErr
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
