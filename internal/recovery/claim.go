package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/ids"
	"github.com/example/payments/internal/telemetry"
)

// The claim, the first step of every request: in one transaction, the key's
// row is inserted (a new key, locked by this request) or found and locked
// (an existing one, unless it is finished: its stored response is
// replayed; or used for another request: ErrKeyReused; or locked by a live
// holder: ErrKeyInUse). The row is always the transaction's first write, so
// the unique index on (user, key) decides before any phase's work runs.
//
// The claim's transaction then goes on with the local phases that follow
// (the shared commit, commit.go): for a new payment, the claim and the
// payment's insert are one transaction and one round trip.

// rowSearch is how a claim goes about finding the key's row.
type rowSearch int

const (
	// insertWithoutLookup: the key filter has never seen the key, so the claim
	// inserts its row without looking it up (see KeyFilter). If the key
	// exists after all, the insert fails on the unique index and the
	// claim runs again, lookUpAfterInsertFailed.
	insertWithoutLookup rowSearch = iota
	// lookUpBeforeInsert: the filter may have seen the key (or there is no
	// filter): the claim looks the row up, under a row lock, first.
	lookUpBeforeInsert
	// lookUpAfterInsertFailed: a claim that inserted the key's row found
	// the key taken: another request's (a race between two first requests,
	// or a key another instance's filter saw first). An insertWithoutLookup claim
	// gets here, and so does a lookUpBeforeInsert claim that found no row, inserted
	// one, and lost the insert to a concurrent first request (the unique
	// index decided after its lookup). Either way the key is looked up again
	// and gets the careful answer: its replay, 409 in use, 422, or its
	// resumption, never the unique index's error.
	lookUpAfterInsertFailed
)

// claimRequest is a request on its way to a claim.
type claimRequest struct {
	Request
	fingerprint []byte
	params      []byte // the request's parameters as stored with a new key
	search      rowSearch
	// traceParent is the request's span, stored with a new key (NULL when
	// the request is not traced): a resumed attempt's trace links to it.
	traceParent pgtype.Text
}

// claimed is what a claim's transaction did: it locked a key for an
// attempt, and committed what committed holds; or it found a finished
// key's response.
type claimed struct {
	attempt   *attempt
	replay    *Response
	committed committed
}

// claim claims req's key, and returns the attempt that now holds it, or
// the stored response of a finished key. An attempt returned with an
// error was claimed and committed, and must be unlocked.
func (e *Engine) claim(ctx context.Context, req Request) (*attempt, *Response, error) {
	c, err := e.newClaimRequest(req)
	if err != nil {
		return nil, nil, err
	}
	if tp := telemetry.TraceParent(ctx); tp != "" {
		c.traceParent = pgtype.Text{String: tp, Valid: true}
	}
	if c.search == lookUpBeforeInsert {
		// Most often a retry: a finished one is answered from its stored
		// response with one read, without a transaction or a lock.
		if replay, err := e.findFinished(ctx, c); replay != nil || err != nil {
			return nil, replay, err
		}
	}
	got, err := e.claimTx(ctx, c)
	if err != nil && e.keyTaken(ctx, c, err) {
		c.search = lookUpAfterInsertFailed
		got, err = e.claimTx(ctx, c)
	}
	if err != nil && got.replay == nil && errors.Is(err, db.ErrSerialization) {
		got.replay, err = e.answerAfterConflicts(ctx, c, err)
	}
	switch {
	case got.replay != nil:
		return nil, got.replay, nil
	case err != nil && db.IsUnavailable(err) && got.attempt != nil:
		// The COMMIT's answer may have been lost with the connection, or
		// the COMMIT may still be waiting for a synchronous standby: the
		// key may be locked by this attempt now, or later. Unlock it (in
		// the background, as the database takes writes again), matching
		// only this claim's lock (unlockUncertainClaim): a new key's row
		// by the id this claim chose and token 1, an existing key's by
		// its token and the time this claim locked it. (With an injected
		// clock, tests only, the claim's statements stamp different times
		// and an existing key's lock lapses instead.)
		e.unlockUncertainClaim(ctx, got.attempt)
		return nil, nil, err
	case err != nil && got.attempt != nil && failsTheKey(ctx, err):
		// The key was claimed, and a phase in the claim's transaction
		// failed with an error no retry can cure: the transaction rolled
		// back, so the failure is recorded on its own (failClaim).
		return nil, nil, e.failClaim(ctx, c, got.attempt, err)
	case err != nil:
		return nil, nil, err // the claim's transaction rolled back: nothing holds a lock
	}
	return got.attempt, nil, e.applyCommit(got.attempt, got.committed)
}

// failClaim records the failure of a claim whose transaction rolled back
// because a phase in it failed with err, an error no retry can cure
// (failsTheKey), as Engine.fail records a later phase's: the key needs
// attention, with the error. A key this claim made has no row, since its
// insert rolled back too: the row is made now, unlocked at started. An
// existing key is marked while its lock token is the one it had before
// this claim (which rolled back its own). Either way it returns ErrFailed
// with err, and every retry gets it again without running the phase. If
// the record cannot be made (the key is another request's by now: it made
// the row first, or claimed it since), the answer is the same, and a retry
// meets the failure again.
func (e *Engine) failClaim(ctx context.Context, c *claimRequest, a *attempt, err error) error {
	ctx = context.WithoutCancel(ctx) // the record must be written, whatever the caller's context
	a.log.ErrorContext(ctx, "phase failed with an error no retry can cure: the key waits for an operator",
		slog.String("recovery_point", string(a.key.RecoveryPoint)), slog.String("error", err.Error()))
	var markErr error
	if a.key.insertedByThisClaim {
		_, markErr = queries.InsertFailedIdempotencyKey(ctx, e.cfg.Pool, dbsqlc.InsertFailedIdempotencyKeyParams{
			ID: a.key.ID, UserID: c.UserID, IdempotencyKey: c.Key, Flow: c.Flow.Name,
			RequestMethod: c.Method, RequestPath: c.Path, RequestParams: c.params, RequestFingerprint: c.fingerprint,
			Now: e.queryNow(), TraceParent: c.traceParent, AttentionError: attentionError(err),
		})
	} else {
		_, markErr = queries.MarkKeyFailed(ctx, e.cfg.Pool, dbsqlc.MarkKeyFailedParams{
			ID: a.key.ID, LockToken: a.key.lockToken - 1, AttentionError: attentionError(err), Now: e.queryNow(),
		})
	}
	if markErr != nil {
		// Not recorded: the key stays as it was, resumable, and the next
		// attempt meets the failure again and records it.
		return transientIfUnavailable(fmt.Errorf("%w (recording it failed: %w)", err, markErr))
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// answerAfterConflicts answers a claim whose transaction kept failing to
// serialize until its retry budget ran out (db.ErrSerialization, 503 to
// the client: no other request holds the key, rule 5), unless, by now,
// another request does hold it or has finished it: then this request is
// a same-key loser, and gets what such a loser gets, 409 in use or the
// replay (or 422 for another request's key), never a 5xx. It reads the
// key without a lock; this request's own transaction rolled back, so a
// live lock on the key is another request's.
func (e *Engine) answerAfterConflicts(ctx context.Context, c *claimRequest, err error) (*Response, error) {
	row, lookupErr := queries.GetIdempotencyKeyState(ctx, e.cfg.Pool, dbsqlc.GetIdempotencyKeyStateParams{
		UserID: c.UserID, IdempotencyKey: c.Key, Now: e.queryNow(),
	})
	switch {
	case lookupErr != nil: // no such key (or no answer): the conflicts were with other keys'
		return nil, err
	case !bytes.Equal(row.IdempotencyKey.RequestFingerprint, c.fingerprint):
		return nil, ErrKeyReused
	case row.IdempotencyKey.RecoveryPoint == string(Finished):
		k := row.IdempotencyKey
		return &Response{Status: int(k.ResponseCode.Int32), Body: k.ResponseBody, Replayed: true}, nil
	case row.LockLive:
		return nil, ErrKeyInUse
	}
	return nil, err
}

// newClaimRequest fingerprints req and chooses, by the key filter, how the claim searches for the key's row.
func (e *Engine) newClaimRequest(req Request) (*claimRequest, error) {
	fingerprint, err := Fingerprint(req.Method, req.Path, req.Body)
	if err != nil {
		return nil, err
	}
	params, err := json.Marshal(req.Params)
	if err != nil {
		return nil, fmt.Errorf("encoding request params: %w", err)
	}
	c := &claimRequest{Request: req, fingerprint: fingerprint, params: params, search: lookUpBeforeInsert}
	if !e.cfg.KeyFilter.CheckAndAdd(req.UserID, req.Key) {
		c.search = insertWithoutLookup
	}
	return c, nil
}

// keyTaken tells whether a claim that failed with err, and that may have
// inserted the key's row, failed because the key is another request's:
// its insert hit the unique index (any claim but one that already looked
// up again), or, for an insertWithoutLookup claim (which may have failed before
// its statements were even sent: a failpoint before a commit whose
// statements were all queued, say), the key's row exists. Either way the
// key gets the careful answer (its replay, 422, 409 or its resumption),
// never what a new key's first phase ran into.
//
// A serialization failure is not among them: db.WithTx runs the claim
// again, and the new try, with a new snapshot, finds the row the other
// request committed (and answers from it) or inserts it.
func (e *Engine) keyTaken(ctx context.Context, c *claimRequest, err error) bool {
	switch {
	case c.search == lookUpAfterInsertFailed:
		return false
	case errors.Is(err, db.ErrUniqueViolation):
		return true
	case c.search != insertWithoutLookup:
		return false
	}
	exists, lookupErr := queries.IdempotencyKeyExists(ctx, e.cfg.Pool, dbsqlc.IdempotencyKeyExistsParams{
		UserID: c.UserID, IdempotencyKey: c.Key,
	})
	return lookupErr == nil && exists
}

// claimTx is one try of the claim's transaction: the key's row first, then
// the local phases that follow it.
func (e *Engine) claimTx(ctx context.Context, c *claimRequest) (claimed, error) {
	var got claimed
	err := db.WithTx(ctx, e.cfg.Pool, e.txOptions(), func(ctx context.Context, tx *db.Tx) error {
		got = claimed{}
		k, replay, err := e.claimKey(ctx, tx, c)
		if err != nil || replay != nil {
			got.replay = replay
			return err
		}
		got.attempt = e.newAttempt(c.Flow, k)
		var start committed
		if k.insertedByThisClaim {
			start.points = []RecoveryPoint{Started} // this commit creates the key
		}
		got.committed, err = e.runLocalPhases(ctx, tx, got.attempt, start)
		return err
	})
	return got, err
}

// claimKey inserts the key's row, or looks it up and then makes a new one,
// replays, refuses or locks, as c.search says.
func (e *Engine) claimKey(ctx context.Context, tx *db.Tx, c *claimRequest) (*Key, *Response, error) {
	if c.search == insertWithoutLookup {
		k, err := e.insertKey(ctx, tx, c)
		return k, nil, err
	}
	row, err := queries.ClaimLookup(ctx, tx, dbsqlc.ClaimLookupParams{
		UserID: c.UserID, IdempotencyKey: c.Key, Now: e.queryNow(), ExternalWindowSeconds: e.cfg.ExternalWindow.Seconds(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if c.search == lookUpBeforeInsert && e.cfg.KeyFilter != nil {
			e.cfg.KeyFilter.ReportFalsePositive() // the filter said "maybe seen" for a new key
		}
		k, err := e.insertKey(ctx, tx, c)
		return k, nil, err
	case err != nil:
		return nil, nil, err
	}
	existing := row.IdempotencyKey
	finished := existing.RecoveryPoint == string(Finished)
	if row.Expired && finished {
		// Past its TTL the key is new again. An unfinished key is never
		// dropped: its work may include a charge, so it is resumed instead.
		if err := queries.DeleteExpiredIdempotencyKey(ctx, tx, existing.ID); err != nil {
			return nil, nil, err
		}
		k, err := e.insertKey(ctx, tx, c)
		return k, nil, err
	}
	if !bytes.Equal(existing.RequestFingerprint, c.fingerprint) {
		return nil, nil, ErrKeyReused
	}
	if finished {
		return nil, &Response{Status: int(existing.ResponseCode.Int32), Body: existing.ResponseBody, Replayed: true}, nil
	}
	if existing.AttentionError.Valid {
		// A phase failed with an error no retry can cure (Engine.fail):
		// the same answer again, without running it, until an operator
		// re-drives the key (which clears the error).
		return nil, nil, fmt.Errorf("%w: %s", ErrFailed, existing.AttentionError.String)
	}
	if row.LockLive {
		return nil, nil, newKeyInUseError(row)
	}
	locked, err := queries.LockIdempotencyKey(ctx, tx, dbsqlc.LockIdempotencyKeyParams{
		ID: existing.ID, Now: e.queryNow(), LockLifetimeSeconds: e.lockLifetime(), CallWindowTailSeconds: e.callWindowTail(),
	})
	if err != nil {
		return nil, nil, err
	}
	k := toKey(locked)
	k.pastExternalWindow = row.PastExternalWindow
	return k, nil, nil
}

// insertKey makes c's key, new and locked by this request (lock token 1),
// and queues its row's insert, so that it goes ahead of the first phase's
// statements: if the key exists after all, the unique index fails the
// transaction before the phase's work runs. The insert is made when the
// transaction sends it (db.Tx.QueueLater): if the key's move of this
// transaction comes first (queueKeyMove), the row is inserted at the
// recovery point it moves to, and is written once.
func (e *Engine) insertKey(ctx context.Context, tx *db.Tx, c *claimRequest) (*Key, error) {
	k := &Key{
		ID: ids.NewUUID(), UserID: c.UserID, Key: c.Key, Flow: c.Flow.Name,
		Method: c.Method, Path: c.Path, Params: c.params,
		RecoveryPoint: Started, Locked: true, Created: e.wallClock(),
		lockToken: 1, insertedByThisClaim: true,
	}
	insert := &unsentInsert{at: Started}
	k.unsent = insert
	params := dbsqlc.InsertIdempotencyKeyParams{
		ID: k.ID, UserID: k.UserID, IdempotencyKey: k.Key, Flow: k.Flow,
		RequestMethod: k.Method, RequestPath: k.Path, RequestParams: k.Params, RequestFingerprint: c.fingerprint,
		Now: e.queryNow(), LockLifetimeSeconds: e.lockLifetime(), TraceParent: c.traceParent,
	}
	tx.QueueLater(func(q db.QueuedTx) error {
		k.unsent = nil // sent now: a later move is an update
		params.RecoveryPoint = string(insert.at)
		return queries.InsertIdempotencyKey(ctx, q, params)
	})
	return k, nil
}

// unsentInsert is a new key's insert not sent yet: the recovery point its
// row will be inserted at.
type unsentInsert struct{ at RecoveryPoint }

// findFinished returns the stored response of c's key if it is finished
// (ErrKeyReused if c differs from the request that used it), or nil.
// Finished keys do not change, so no lock is taken: it is one read.
func (e *Engine) findFinished(ctx context.Context, c *claimRequest) (*Response, error) {
	row, err := queries.FindFinishedKey(ctx, e.cfg.Pool, dbsqlc.FindFinishedKeyParams{
		UserID: c.UserID, IdempotencyKey: c.Key, Now: e.queryNow(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	case !bytes.Equal(row.RequestFingerprint, c.fingerprint):
		return nil, ErrKeyReused
	}
	return &Response{Status: int(row.ResponseCode.Int32), Body: row.ResponseBody, Replayed: true}, nil
}
