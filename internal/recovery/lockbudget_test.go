package recovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/recovery"
)

// A key's lock is refreshed only by a commit and by the heartbeat during an
// external call. A phase whose transaction kept failing to serialize was
// retried for 5 s, past a shorter lock timeout: the holder's lock lapsed,
// the completer took the key over, and the request's first attempt was
// answered 409 (found by the chaos suite's fresh-409 rule, with a 2 s lock
// timeout). The engine now gives up within a third of the lock timeout,
// while its lock is still its own, and the request can be retried.
func TestExecute_retriesASerializationFailureOnlyWhileItsLockHolds(t *testing.T) {
	t.Parallel()
	const lockTimeout = 900 * time.Millisecond
	b := setup(t, recovery.Config{LockTimeout: lockTimeout})
	conflicts := recovery.NewFlow("conflicts",
		recovery.From(recovery.Started, recovery.LocalPhase(func(context.Context, *db.Tx, *recovery.Key) (recovery.Outcome, error) {
			return recovery.Next(thingCreated), nil
		}), thingCreated),
		recovery.From(thingCreated, recovery.ExternalPhase("remote",
			func(context.Context, *recovery.Key) (string, error) { return "remote_1", nil },
			func(context.Context, *db.Tx, *recovery.Key, string) (recovery.Outcome, error) {
				return recovery.Outcome{}, &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
			}), recovery.Finished),
	)
	req := b.request(1, "conflicts", `{"name":"lamp"}`)
	req.Flow = conflicts
	b.engine = b.newEngine(t, recovery.Config{LockTimeout: lockTimeout}, conflicts)

	start := time.Now()
	_, err := b.engine.Execute(context.Background(), req)
	require.ErrorIs(t, err, db.ErrSerialization)
	require.Less(t, time.Since(start), lockTimeout, "it gave up before its lock could lapse")
	require.Equal(t, "thing_created", b.recoveryPoint(t, "conflicts"), "resumable where it stopped")
	require.Zero(t, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE needs_attention_at IS NOT NULL OR locked_at IS NOT NULL"),
		"a serialization failure is transient: the key is unlocked, not failed (issue 41)")
}
