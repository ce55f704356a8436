package recovery

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// The commits of an attempt.
//
// Every transaction of an attempt does the same four things, in order:
//
//  1. its first step: the claim (claim.go), or the phase that records an
//     external call's result (runPhase);
//  2. the local phases that follow, up to the next external call or the
//     answer (shared commit, below);
//  3. the key's fenced move to the recovery point they reached, or its
//     finish with the response (queueKeyMove);
//  4. COMMIT; then the attempt takes in what the transaction did
//     (applyCommit).
//
// Shared commit, the one optimisation in the engine's shape: recovery
// points with no external call between them share a commit. Each keeps its
// meaning (it still names what is committed, and its before_commit and
// after_commit failpoints still fire at that commit), but a request needs
// as many transactions as it has external calls, plus one: the claim's,
// and one after each call. Why: a create-payment request is two
// transactions instead of four (claim + insert payment; record Stripe's
// answer + store the answer), and with db.Tx's pipelining each is one
// round trip: 2 round trips and 11 statements per new payment, where one
// transaction per phase would be 4 round trips and 17 statements
// (internal/payments/roundtrips_test.go counts them; docs/architecture.md
// has the benchmark's figures).

// commit runs one transaction of the attempt: first, then the local phases
// after it, then the key's move; and applies it to the attempt once it
// has committed.
func (e *Engine) commit(ctx context.Context, a *attempt, first func(ctx context.Context, tx *db.Tx) (Outcome, error)) error {
	var c committed
	try := 0
	err := db.WithTx(ctx, e.cfg.Pool, e.txOptions(), func(ctx context.Context, tx *db.Tx) error {
		try++
		a.key.startTx(try)
		out, err := first(ctx, tx)
		if err != nil {
			return err
		}
		c, err = e.runLocalPhases(ctx, tx, a, committed{points: []RecoveryPoint{out.next}, out: out})
		return err
	})
	if err != nil {
		return e.explainCommitError(ctx, a.key, err)
	}
	return e.applyCommit(a, c)
}

// committed is what one transaction did: the recovery points it moves the
// key through, in order, and the outcome of its last phase (none when it
// only claimed the key).
type committed struct {
	points []RecoveryPoint
	out    Outcome
}

// runLocalPhases runs in tx every local phase that follows c (the shared
// commit), queues the key's move to where they got, and fires
// before_commit for every recovery point reached.
func (e *Engine) runLocalPhases(ctx context.Context, tx *db.Tx, a *attempt, c committed) (committed, error) {
	for c.out.response == nil {
		at := c.out.next
		if at == "" {
			at = a.key.RecoveryPoint // nothing ran yet: the claim left the key here
		}
		step, ok := a.flow.step(at)
		if !ok || step.Phase.call != nil {
			break
		}
		phaseCtx, endSpan := a.tracePhase(ctx, at, step.Phase) // trace.go
		out, err := step.Phase.work(phaseCtx, tx, a.key, nil)
		if err == nil {
			err = checkMove(a.flow, step, out)
		}
		endSpan(err)
		if err != nil {
			return c, err
		}
		c.out = out
		c.points = append(c.points, out.next)
	}
	if c.out.next != "" {
		if err := e.queueKeyMove(ctx, tx, a.key, c.out); err != nil {
			return c, err
		}
	}
	for _, p := range c.points {
		if err := e.cfg.Failpoints.Fire(FailpointBeforeCommit + string(p)); err != nil {
			return c, err
		}
	}
	return c, nil
}

// queueKeyMove writes the outcome on the key row, fenced by the lock
// token: if another attempt has taken the key over, the update matches no
// row and the database raises (assert_lock_held: db.ErrLockNotHeld),
// failing the transaction, which commit reports as ErrLockLost. So the
// move needs no answer and is queued with the COMMIT.
func (e *Engine) queueKeyMove(ctx context.Context, tx *db.Tx, k *Key, out Outcome) error {
	if out.response == nil && (out.next == "" || out.next == Started) {
		return bug("phase at %s returned no next recovery point", k.RecoveryPoint)
	}
	if out.response == nil && k.unsent != nil {
		// The key's row is this transaction's insert, not sent yet: it is
		// inserted at out.next instead (insertKey), already fenced (nobody
		// else can see the row before this transaction commits).
		k.unsent.at = out.next
		return nil
	}
	if out.response != nil {
		return queries.FinishIdempotencyKey(ctx, tx.Queued(), dbsqlc.FinishIdempotencyKeyParams{
			ID: k.ID, LockToken: k.lockToken, ResponseCode: pgtype.Int4{Int32: int32(out.response.Status), Valid: true}, ResponseBody: out.response.Body,
			Now: e.queryNow(), TtlSeconds: e.cfg.KeyTTL.Seconds(),
		})
	}
	return queries.SetRecoveryPoint(ctx, tx.Queued(), dbsqlc.SetRecoveryPointParams{
		ID: k.ID, LockToken: k.lockToken, RecoveryPoint: string(out.next), Now: e.queryNow(), LockLifetimeSeconds: e.lockLifetime(),
	})
}

// applyCommit updates the attempt's key after the commit c, and fires
// after_commit for every recovery point it reached.
func (e *Engine) applyCommit(a *attempt, c committed) error {
	k := a.key
	k.commitHandoffs()
	if c.out.next != "" {
		k.RecoveryPoint = c.out.next
	}
	if r := c.out.response; r != nil {
		k.ResponseCode, k.responseBody, k.Locked = r.Status, r.Body, false
		if !k.insertedByThisClaim {
			// Resumed, maybe long after its claim put it in the filter's
			// slice of that time: it lives a TTL from now, so it goes in
			// the current slice too. (A miss would only cost a false "new"
			// that the unique index catches.)
			e.cfg.KeyFilter.Add(k.UserID, k.Key)
		}
	}
	for _, p := range c.points {
		if err := e.cfg.Failpoints.Fire(FailpointAfterCommit + string(p)); err != nil {
			return err
		}
	}
	return nil
}

// explainCommitError turns the fence's error into ErrLockLost, and a unique
// violation too when another attempt took the key over meanwhile: both ran
// the same step, the other committed its rows first, and this one's work
// hit them before reaching its fence. Anything else is returned as it is.
func (e *Engine) explainCommitError(ctx context.Context, k *Key, err error) error {
	if errors.Is(err, db.ErrLockNotHeld) {
		return ErrLockLost
	}
	if !errors.Is(err, db.ErrUniqueViolation) {
		return err
	}
	token, lookupErr := queries.GetLockToken(context.WithoutCancel(ctx), e.cfg.Pool, k.ID)
	if lookupErr == nil && token != k.lockToken {
		return ErrLockLost
	}
	return err
}
