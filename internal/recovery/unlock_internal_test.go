package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// The background unlock (issue 39) is fenced by the attempt's lock token:
// run late, after another attempt took the key (a new token), it leaves
// that attempt's lock alone. For a claim whose commit was uncertain it
// goes on until the claim's lock is there, and releases it then (a new
// key's by its id and token 1, an existing key's by its token and the time
// the claim took it); a claim that never landed is given up when the lock
// would have lapsed, and never releases the next claim's lock.
func TestKeepUnlocking_isFencedAndWaitsForAnUncertainClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO users (email) VALUES ('one@example.com')`)
	require.NoError(t, err)
	e, err := New(Config{Pool: pool})
	require.NoError(t, err)
	insertLocked := func(id uuid.UUID, key string, token int64) {
		t.Helper()
		_, err := pool.Exec(ctx, `
			INSERT INTO idempotency_keys (id, user_id, idempotency_key, flow, request_method, request_path, request_params,
				request_fingerprint, recovery_point, locked_at, lock_expires_at, lock_token)
			SELECT $1, id, $2, 'things', 'POST', '/v1/things', '{}', decode(repeat('00', 32), 'hex'), 'started', now(), now() + interval '90 seconds', $3
			FROM users`, id, key, token)
		require.NoError(t, err)
	}
	locked := func(id uuid.UUID) (bool, int64) {
		var isLocked bool
		var token int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT locked_at IS NOT NULL, lock_token FROM idempotency_keys WHERE id = $1`, id).Scan(&isLocked, &token))
		return isLocked, token
	}
	attemptOn := func(id uuid.UUID, token int64) *attempt {
		return e.newAttempt(&Flow{Name: "things"}, &Key{ID: id, Flow: "things", lockToken: token})
	}
	newKeyClaim := func(id uuid.UUID) *attempt { // a claim that inserted the key's row
		a := attemptOn(id, 1)
		a.key.insertedByThisClaim = true
		return a
	}

	// Another attempt holds the key now (token 2): this attempt's late
	// unlock (token 1) matches nothing and ends.
	taken := uuid.New()
	insertLocked(taken, "taken", 2)
	e.keepUnlocking(ctx, attemptOn(taken, 1), time.Now().Add(5*time.Second), false)
	isLocked, token := locked(taken)
	require.True(t, isLocked, "the other attempt's lock stands")
	require.EqualValues(t, 2, token)

	// An uncertain claim that never landed: tried until the lock would
	// have lapsed, then given up.
	began := time.Now()
	e.keepUnlocking(ctx, newKeyClaim(uuid.New()), time.Now().Add(700*time.Millisecond), true)
	require.Less(t, time.Since(began), 2*time.Second)

	// An uncertain claim whose commit lands later (a commit that waited
	// for a synchronous standby): unlocked once it is there.
	late := uuid.New()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.keepUnlocking(ctx, newKeyClaim(late), time.Now().Add(10*time.Second), true)
	}()
	time.Sleep(300 * time.Millisecond) // the row is not there for the first tries
	insertLocked(late, "late", 1)
	landed := time.Now()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the uncertain claim's key was not unlocked within 5 s of landing")
	}
	isLocked, _ = locked(late)
	require.False(t, isLocked)
	require.Less(t, time.Since(landed), 2*time.Second, "within a back-off step (at most 1 s) and a try")

	// An uncertain claim of an existing key took token 2 at some time; the
	// row holds token 2 taken at another time (the next claim's: the
	// uncertain one never landed). Its unlock leaves that lock alone; the
	// claim that did take the row's lock is unlocked.
	existing := uuid.New()
	insertLocked(existing, "existing", 2)
	var lockedAt pgtype.Timestamptz
	require.NoError(t, pool.QueryRow(ctx, `SELECT locked_at FROM idempotency_keys WHERE id = $1`, existing).Scan(&lockedAt))
	uncertain := func(at time.Time) *attempt {
		a := attemptOn(existing, 2)
		a.key.lockedAt = pgtype.Timestamptz{Time: at, Valid: true}
		return a
	}
	e.keepUnlocking(ctx, uncertain(lockedAt.Time.Add(-time.Millisecond)), time.Now().Add(700*time.Millisecond), true)
	isLocked, _ = locked(existing)
	require.True(t, isLocked, "another claim's lock, with the same token, stands")
	e.keepUnlocking(ctx, uncertain(lockedAt.Time), time.Now().Add(5*time.Second), true)
	isLocked, _ = locked(existing)
	require.False(t, isLocked, "the uncertain claim's own lock is released")
}
