package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
)

// The background unlock (issue 39) is fenced by the attempt's lock token:
// run late, after another attempt took the key (a new token), it leaves
// that attempt's lock alone. For a claim whose commit was uncertain it
// goes on until the key's row lands, and unlocks it then; a claim that
// never landed is given up when the lock would have lapsed.
func TestKeepUnlocking_isFencedAndWaitsForAnUncertainClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO users (email) VALUES ('one@example.com')`)
	require.NoError(t, err)
	e := New(Config{Pool: pool})
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
	attempt := func(id uuid.UUID, token int64) *attempt {
		return e.newAttempt(&Flow{Name: "things"}, &Key{ID: id, Flow: "things", lockToken: token})
	}

	// Another attempt holds the key now (token 2): this attempt's late
	// unlock (token 1) matches nothing and ends.
	taken := uuid.New()
	insertLocked(taken, "taken", 2)
	e.keepUnlocking(ctx, attempt(taken, 1), time.Now().Add(5*time.Second), false)
	isLocked, token := locked(taken)
	require.True(t, isLocked, "the other attempt's lock stands")
	require.EqualValues(t, 2, token)

	// An uncertain claim that never landed: tried until the lock would
	// have lapsed, then given up.
	began := time.Now()
	e.keepUnlocking(ctx, attempt(uuid.New(), 1), time.Now().Add(700*time.Millisecond), true)
	require.Less(t, time.Since(began), 2*time.Second)

	// An uncertain claim whose commit lands later (a commit that waited
	// for a synchronous standby): unlocked once it is there.
	late := uuid.New()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.keepUnlocking(ctx, attempt(late, 1), time.Now().Add(10*time.Second), true)
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
}
