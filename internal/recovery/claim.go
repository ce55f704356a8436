package recovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// claim finds or creates the key row and takes its lock, in one transaction
// that also commits the local phases that follow. It returns the locked key,
// or the stored response of a finished one. A key returned with an error
// was claimed and committed, and must be unlocked.
func (e *Engine) claim(ctx context.Context, req Request) (*Key, *Response, error) {
	fingerprint, err := Fingerprint(req.Method, req.Path, req.Body)
	if err != nil {
		return nil, nil, err
	}
	// A key the filter has never seen goes straight to the insert. One it
	// may have seen is most often a retry: a finished one is answered from
	// its stored response without a transaction.
	definitelyNew := !e.cfg.KeyFilter.CheckAndAdd(req.UserID, req.Key)
	if !definitelyNew {
		if replay, err := e.findFinished(ctx, req, fingerprint); replay != nil || err != nil {
			return nil, replay, err
		}
	}
	params, err := json.Marshal(req.Params) // stored with a new key; a replay never needs it
	if err != nil {
		return nil, nil, fmt.Errorf("encoding request params: %w", err)
	}
	c, err := e.claimAndCommit(ctx, req, fingerprint, params, definitelyNew)
	if err != nil || c.k == nil {
		// The claim's transaction rolled back: nothing of it holds a lock.
		return nil, c.replay, err
	}
	k := c.k
	// From here the key is ours and committed: an error must leave it
	// unlocked for the next attempt (Execute sees to it).
	if k.lockToken == 1 {
		if err := e.cfg.Failpoints.Fire("after_commit:" + string(Started)); err != nil {
			return k, nil, err
		}
	}
	return k, nil, e.settle(k, c.reached, c.out)
}

// claimed is what a claim's transaction did: it locked a key and reached
// recovery points with the outcome out, or found a finished key's response.
type claimed struct {
	k       *Key
	replay  *Response
	reached []RecoveryPoint
	out     Outcome
}

// claimAndCommit runs the claim's transaction, and runs it again, carefully,
// when the key turns out to be another request's: an existing key always
// gets the careful answer (its replay, 422, 409 or its resumption), never
// what the first phase of a new one would have run into.
//
// Two first requests with one key race to insert it, or the filter said
// "new" for a key another instance made: the insert, sent ahead of the
// first phase's work, fails on the unique index, and the careful claim
// finds the other row. A claim that took the filter's word can also fail
// before its insert was sent (a failpoint before the commit of statements
// that were all queued, say); then one read tells whether the key exists.
func (e *Engine) claimAndCommit(ctx context.Context, req Request, fingerprint, params []byte, definitelyNew bool) (claimed, error) {
	filterSaidMaybe := !definitelyNew && e.cfg.KeyFilter != nil
	c, err := e.claimTx(ctx, req, fingerprint, params, !definitelyNew, filterSaidMaybe)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, db.ErrUniqueViolation), definitelyNew && e.keyExists(ctx, req):
		// The key is another request's: the careful claim answers.
		return e.claimTx(ctx, req, fingerprint, params, true, false)
	default:
		return c, err
	}
}

// claimTx is one try of the claim's transaction, careful (the key looked up
// first) or not (the key inserted at once). filterSaidMaybe tells that the
// key filter sent the claim down the careful path.
func (e *Engine) claimTx(ctx context.Context, req Request, fingerprint, params []byte, careful, filterSaidMaybe bool) (claimed, error) {
	var c claimed
	err := db.WithTx(ctx, e.cfg.Pool, e.txOptions(), func(ctx context.Context, tx *db.Tx) error {
		var err error
		c, err = e.claimInTx(ctx, tx, req, fingerprint, params, careful, filterSaidMaybe)
		return err
	})
	return c, err
}

// keyExists tells whether req's key has a row. An error counts as "no": the
// caller then returns the error it had.
func (e *Engine) keyExists(ctx context.Context, req Request) bool {
	exists, err := queries.IdempotencyKeyExists(ctx, e.cfg.Pool, dbsqlc.IdempotencyKeyExistsParams{
		UserID: req.UserID, IdempotencyKey: req.Key,
	})
	return err == nil && exists
}

// claimInTx claims the key in tx, carefully (looked up first) or not (a new
// key), and runs the local phases that follow, to be committed with it.
func (e *Engine) claimInTx(ctx context.Context, tx *db.Tx, req Request, fingerprint, params []byte, careful, filterSaidMaybe bool) (claimed, error) {
	var c claimed
	var err error
	if careful {
		c.k, c.replay, err = e.carefulClaim(ctx, tx, req, fingerprint, params, filterSaidMaybe)
	} else {
		c.k, err = e.insertKey(ctx, tx, req, fingerprint, params)
	}
	if err != nil || c.k == nil {
		return c, err
	}
	k := c.k
	if k.lockToken == 1 { // a new key: this commit creates it
		if err := e.cfg.Failpoints.Fire("before_commit:" + string(Started)); err != nil {
			return c, err
		}
	}
	phase, local := req.Flow.isLocal(k.RecoveryPoint)
	if !local {
		return c, nil
	}
	first, err := phase.commit(ctx, tx, k, nil)
	if err != nil {
		return c, err
	}
	c.reached, c.out, err = e.commitTx(ctx, tx, req.Flow, k, first)
	return c, err
}

// findFinished returns the stored response of req's key if it is finished
// (ErrKeyReused if req differs from the request that used it), or nil.
// Finished keys do not change, so no lock is taken: it is one read.
func (e *Engine) findFinished(ctx context.Context, req Request, fingerprint []byte) (*Response, error) {
	row, err := queries.FindFinishedKey(ctx, e.cfg.Pool, dbsqlc.FindFinishedKeyParams{
		UserID: req.UserID, IdempotencyKey: req.Key, Now: e.now(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	case !bytes.Equal(row.RequestFingerprint, fingerprint):
		return nil, ErrKeyReused
	}
	return &Response{Status: int(row.ResponseCode.Int32), Body: row.ResponseBody, Replayed: true}, nil
}

// carefulClaim looks the key up, then makes a new one, replays, refuses or
// locks. filterSaidMaybe tells that the key filter sent the claim
// here, so a key that turns out new is one of its false positives.
func (e *Engine) carefulClaim(ctx context.Context, tx *db.Tx, req Request, fingerprint, params []byte, filterSaidMaybe bool) (*Key, *Response, error) {
	row, err := queries.ClaimLookup(ctx, tx, dbsqlc.ClaimLookupParams{
		UserID: req.UserID, IdempotencyKey: req.Key, Now: e.now(), ExternalWindowSeconds: e.cfg.ExternalWindow.Seconds(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if filterSaidMaybe {
			e.cfg.KeyFilter.ReportFalsePositive()
		}
		k, err := e.insertKey(ctx, tx, req, fingerprint, params)
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
		k, err := e.insertKey(ctx, tx, req, fingerprint, params)
		return k, nil, err
	}
	if !bytes.Equal(existing.RequestFingerprint, fingerprint) {
		return nil, nil, ErrKeyReused
	}
	if finished {
		return nil, &Response{Status: int(existing.ResponseCode.Int32), Body: existing.ResponseBody, Replayed: true}, nil
	}
	if row.LockLive {
		return nil, nil, ErrKeyInUse
	}
	locked, err := queries.LockIdempotencyKey(ctx, tx, dbsqlc.LockIdempotencyKeyParams{
		ID: existing.ID, Now: e.now(), LockLifetimeSeconds: e.lockLifetime(),
	})
	if err != nil {
		return nil, nil, err
	}
	k := toKey(locked)
	k.pastExternalWindow = row.PastExternalWindow
	return k, nil, nil
}

// insertKey makes req's key, new and locked by this request (lock token 1),
// and queues its row's insert, so that it goes ahead of the first phase's
// statements: if the key exists after all, the unique index fails the
// transaction before the phase's work runs (see claimAndCommit).
func (e *Engine) insertKey(ctx context.Context, tx *db.Tx, req Request, fingerprint, params []byte) (*Key, error) {
	k := &Key{
		ID: uuid.New(), UserID: req.UserID, Key: req.Key, Flow: req.Flow.Name,
		Method: req.Method, Path: req.Path, Params: params,
		RecoveryPoint: Started, Locked: true, Created: e.clock(),
		lockToken: 1,
	}
	return k, queries.InsertIdempotencyKey(ctx, tx.Queued(), dbsqlc.InsertIdempotencyKeyParams{
		ID: k.ID, UserID: k.UserID, IdempotencyKey: k.Key, Flow: k.Flow,
		RequestMethod: k.Method, RequestPath: k.Path, RequestParams: k.Params, RequestFingerprint: fingerprint,
		Now: e.now(), LockLifetimeSeconds: e.lockLifetime(),
	})
}
