package recovery

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
)

// A claim whose transaction still failed to serialize when its retries ran
// out answers as a same-key loser when the key is, by then, another
// request's: 409 in use while that request holds it, its replay once it
// finished, 422 for a different request; a key nobody made keeps the
// serialization failure (503: no other request holds it, rule 5).
func TestClaim_answerAfterConflictsIsTheSameKeyLosersAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO users (email) VALUES ('one@example.com')`)
	require.NoError(t, err)
	e, err := New(Config{Pool: pool})
	require.NoError(t, err)
	body := []byte(`{"amount":1}`)
	fingerprint, err := Fingerprint("POST", "/v1/things", body)
	require.NoError(t, err)
	insert := func(key, point string, locked bool, code any, fp []byte) {
		t.Helper()
		_, err := pool.Exec(ctx, `
			INSERT INTO idempotency_keys (user_id, idempotency_key, flow, request_method, request_path, request_params,
				request_fingerprint, recovery_point, locked_at, lock_expires_at, lock_token, response_code, response_body, expires_at)
			SELECT id, $1, 'things', 'POST', '/v1/things', '{}', $5, $2,
				CASE WHEN $3 THEN now() END, CASE WHEN $3 THEN now() + interval '90 seconds' END, 1,
				$4::int, CASE WHEN $4::int IS NOT NULL THEN '{"done":true}'::bytea END,
				CASE WHEN $4::int IS NOT NULL THEN now() + interval '1 day' END
			FROM users`, key, point, locked, code, fp)
		require.NoError(t, err)
	}
	insert("held", "started", true, nil, fingerprint)
	insert("done", "finished", false, 201, fingerprint)
	insert("other", "started", true, nil, make([]byte, 32))
	insert("unheld", "started", false, nil, fingerprint)

	conflicts := fmt.Errorf("%w (40 attempts)", db.ErrSerialization)
	answer := func(key string) (*Response, error) {
		c, err := e.newClaimRequest(Request{UserID: 1, Key: key, Method: "POST", Path: "/v1/things", Body: body, Flow: &Flow{Name: "things"}})
		require.NoError(t, err)
		return e.answerAfterConflicts(ctx, c, conflicts)
	}
	_, err = answer("held")
	require.ErrorIs(t, err, ErrKeyInUse)
	replay, err := answer("done")
	require.NoError(t, err)
	require.Equal(t, &Response{Status: 201, Body: []byte(`{"done":true}`), Replayed: true}, replay)
	_, err = answer("other")
	require.ErrorIs(t, err, ErrKeyReused)
	for _, key := range []string{"unheld", "new"} {
		replay, err = answer(key)
		require.Nil(t, replay)
		require.ErrorIs(t, err, db.ErrSerialization, key)
	}
}
