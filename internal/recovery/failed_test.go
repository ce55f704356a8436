package recovery_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
)

// The clash flow writes a name the request gives into a table of unique
// names, twice: in its first phase, in the claim's transaction, and again
// (with "-recorded" after it) when it records its remote call's answer.
//
//	started --(tx: insert name)--> clash_saved --(call the remote; tx: insert name-recorded, answer 201)--> finished
const clashSaved recovery.RecoveryPoint = "clash_saved"

// clashBundle is b with the clash flow on its engine, and how often each
// of the flow's transactions ran.
type clashBundle struct {
	*testBundle
	flow              *recovery.Flow
	inserts, recorded atomic.Int32
}

func setupClash(t *testing.T) *clashBundle {
	t.Helper()
	b := &clashBundle{testBundle: setup(t, recovery.Config{})}
	_, err := b.pool.Exec(context.Background(),
		`CREATE TABLE clashes (name text PRIMARY KEY CHECK (name <> 'forbidden'))`)
	require.NoError(t, err)
	insert := func(ctx context.Context, tx *db.Tx, name string) error {
		_, err := tx.Exec(ctx, "INSERT INTO clashes (name) VALUES ($1)", name)
		return err
	}
	b.flow = recovery.NewFlow("clash",
		recovery.From(recovery.Started, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			b.inserts.Add(1)
			var p thingParams
			if err := k.DecodeParams(&p); err != nil {
				return recovery.Outcome{}, err
			}
			return recovery.Next(clashSaved), insert(ctx, tx, p.Name)
		}), clashSaved),
		recovery.From(clashSaved, recovery.ExternalPhase("remote", b.remote.call,
			func(ctx context.Context, tx *db.Tx, k *recovery.Key, remoteID string) (recovery.Outcome, error) {
				b.recorded.Add(1)
				var p thingParams
				if err := k.DecodeParams(&p); err != nil {
					return recovery.Outcome{}, err
				}
				if err := insert(ctx, tx, p.Name+"-recorded"); err != nil {
					return recovery.Outcome{}, err
				}
				return recovery.Respond(201, []byte(`{"remote_id":"`+remoteID+`"}`)), nil
			}), recovery.Finished),
	)
	b.engine = b.newEngine(t, recovery.Config{}, b.flow)
	return b
}

func (b *clashBundle) execute(key, name string) (recovery.Response, error) {
	req := b.request(1, key, `{"name":"`+name+`"}`)
	req.Flow = b.flow
	return b.engine.Execute(context.Background(), req)
}

// failedKey is what the key's row says: where it stands, whether it needs
// attention and why, and whether it is locked.
func (b *clashBundle) failedKey(t *testing.T, key string) (point string, attention bool, why *string, locked bool) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT recovery_point, needs_attention_at IS NOT NULL, attention_error, locked_at IS NOT NULL
		FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&point, &attention, &why, &locked))
	return point, attention, why, locked
}

// Issue 41: a unique violation in a flow's own insert is no conflict that
// a retry can get past. It used to answer 503 "collided ... retry with the
// same key", and the completer retried it for ever. Now the key fails
// visibly, once: marked as needing attention with the error; every retry
// gets the same failure without running the phase again; the completer
// leaves it; and an operator's retry, once the cause is fixed, re-drives
// it. Here the insert is the first phase's, in the claim's transaction,
// which rolls back: the key's row is made to record the failure.
func TestExecute_aUniqueViolationInTheClaimsPhaseFailsTheKeyOnce(t *testing.T) {
	t.Parallel()
	b := setupClash(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, "INSERT INTO clashes (name) VALUES ('taken')")
	require.NoError(t, err)

	_, err = b.execute("clash-1", "taken")
	require.ErrorIs(t, err, recovery.ErrFailed)
	require.ErrorIs(t, err, db.ErrUniqueViolation, "with the phase's error")
	require.False(t, recovery.IsTransient(err))
	ran := b.inserts.Load()
	require.Positive(t, ran)
	point, attention, why, locked := b.failedKey(t, "clash-1")
	require.Equal(t, "started", point)
	require.True(t, attention, "marked as needing attention")
	require.NotNil(t, why)
	require.Contains(t, *why, "23505", "the error on record, for the operator")
	require.False(t, locked)

	_, err = b.execute("clash-1", "taken")
	require.ErrorIs(t, err, recovery.ErrFailed, "a retry gets the same answer")
	require.Equal(t, ran, b.inserts.Load(), "without running the phase again")

	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Nanosecond})
	run, err := completer.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Claimed, "the completer leaves a failed key alone")
	require.Equal(t, ran, b.inserts.Load())

	// The operator fixes the cause, and re-drives the key.
	_, err = b.pool.Exec(ctx, "DELETE FROM clashes WHERE name = 'taken'")
	require.NoError(t, err)
	resp, err := completer.RetryNow(ctx, b.keyID(t, 1, "clash-1"))
	require.NoError(t, err)
	require.Equal(t, 201, resp.Status)
	point, attention, why, _ = b.failedKey(t, "clash-1")
	require.Equal(t, "finished", point)
	require.False(t, attention)
	require.Nil(t, why, "the error is cleared with the mark")
	again, err := b.execute("clash-1", "taken")
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, 201, again.Status)
}

// The same, for a phase after the external call (the record of the
// remote's answer): the key is marked at the recovery point it reached,
// the remote is not called again by the retries, and the operator's retry
// calls it with the same child key, so it acted once.
func TestExecute_aUniqueViolationInALaterPhaseFailsTheKeyOnce(t *testing.T) {
	t.Parallel()
	b := setupClash(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, "INSERT INTO clashes (name) VALUES ('late-recorded')")
	require.NoError(t, err)

	_, err = b.execute("clash-2", "late")
	require.ErrorIs(t, err, recovery.ErrFailed)
	require.ErrorIs(t, err, db.ErrUniqueViolation)
	point, attention, why, locked := b.failedKey(t, "clash-2")
	require.Equal(t, string(clashSaved), point)
	require.True(t, attention)
	require.NotNil(t, why)
	require.Contains(t, *why, "23505")
	require.False(t, locked)
	calls, recorded := b.remote.calls.Load(), b.recorded.Load()
	require.EqualValues(t, 1, calls)

	for range 2 {
		_, err = b.execute("clash-2", "late")
		require.ErrorIs(t, err, recovery.ErrFailed)
	}
	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Nanosecond})
	run, err := completer.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Claimed)
	require.Equal(t, calls, b.remote.calls.Load(), "nothing ran again: no call")
	require.Equal(t, recorded, b.recorded.Load(), "and no record")

	_, err = b.pool.Exec(ctx, "DELETE FROM clashes WHERE name = 'late-recorded'")
	require.NoError(t, err)
	resp, err := completer.RetryNow(ctx, b.keyID(t, 1, "clash-2"))
	require.NoError(t, err)
	require.Equal(t, 201, resp.Status)
	require.EqualValues(t, 1, b.remote.executed.Load(), "the remote acted once: the same child key")
}

// A check violation is no more curable than a unique one; an operator's
// retry of a key whose cause is not fixed fails it again, and it stays
// marked, with the error.
func TestExecute_aCheckViolationFailsTheKeyAndAnOperatorsRetryCanFailItAgain(t *testing.T) {
	t.Parallel()
	b := setupClash(t)
	ctx := context.Background()
	_, err := b.execute("clash-3", "forbidden")
	require.ErrorIs(t, err, recovery.ErrFailed)
	_, attention, why, _ := b.failedKey(t, "clash-3")
	require.True(t, attention)
	require.Contains(t, *why, "23514", "check_violation")

	completer := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine, Grace: time.Nanosecond})
	_, err = completer.RetryNow(ctx, b.keyID(t, 1, "clash-3"))
	require.ErrorIs(t, err, recovery.ErrFailed, "the cause is still there")
	point, attention, why, locked := b.failedKey(t, "clash-3")
	require.Equal(t, "started", point)
	require.True(t, attention, "marked again")
	require.Contains(t, *why, "23514")
	require.False(t, locked)
}

// A statement the server cuts short by a limit of its own (here a
// statement_timeout, as an operator may set in postgresql.conf or the
// connection string) is no fault of the request's: the key stays at its
// recovery point (the one before the external call, whose answer the
// timed-out transaction was recording), unlocked and not marked, and the
// next attempt finishes it. Only what no retry can cure fails a key.
func TestExecute_aStatementTimeoutLeavesTheKeyResumable(t *testing.T) {
	t.Parallel()
	b := setup(t, recovery.Config{})
	var slow atomic.Bool
	slow.Store(true)
	const ready recovery.RecoveryPoint = "ready"
	flow := recovery.NewFlow("slow",
		recovery.From(recovery.Started, recovery.LocalPhase(func(context.Context, *db.Tx, *recovery.Key) (recovery.Outcome, error) {
			return recovery.Next(ready), nil
		}), ready),
		recovery.From(ready, recovery.ExternalPhase("remote", func(context.Context, *recovery.Key) (string, error) {
			return "done", nil
		}, func(ctx context.Context, tx *db.Tx, k *recovery.Key, _ string) (recovery.Outcome, error) {
			if slow.Load() {
				if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '20ms'"); err != nil {
					return recovery.Outcome{}, err
				}
				if _, err := tx.Exec(ctx, "SELECT pg_sleep(5)"); err != nil {
					return recovery.Outcome{}, err
				}
			}
			return recovery.Respond(201, []byte(`{}`)), nil
		}), recovery.Finished),
	)
	engine := b.newEngine(t, recovery.Config{}, flow)
	req := b.request(1, "slow-1", `{"name":"slow"}`)
	req.Flow = flow
	_, err := engine.Execute(context.Background(), req)
	require.Error(t, err)
	require.True(t, db.IsTemporary(err), "%v", err)
	require.NotErrorIs(t, err, recovery.ErrFailed)
	var point string
	var attention, locked bool
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT recovery_point, needs_attention_at IS NOT NULL, locked_at IS NOT NULL
		FROM idempotency_keys WHERE idempotency_key = 'slow-1'`).Scan(&point, &attention, &locked))
	require.Equal(t, string(ready), point, "at the recovery point it reached")
	require.False(t, attention, "not marked for an operator")
	require.False(t, locked, "free for the retry")

	slow.Store(false)
	resp, err := engine.Execute(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, 201, resp.Status)
}
