package recovery_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/recovery"
)

// What a phase hands on (recovery.Handoff) reaches the phases after it in
// the same attempt, and only while it can be trusted: a transaction that
// runs again after a serialization failure, and a resumed attempt, start
// without it.
func TestHandoff_reachesLaterPhasesOfTheAttemptAndNeverARetriedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO users (email) VALUES ('one@example.com')`)
	require.NoError(t, err)

	name := recovery.NewHandoff[string]("name")
	var (
		seenByCall   []bool // did the call find the hand-off, per call
		seenByRecord []bool // did the record find it, per try of its transaction
		failRecord   = 1    // serialization failures the record's transaction still has to raise
		failCall     = 1    // transient failures the call still has to return
	)
	flow := recovery.NewFlow("handoff",
		recovery.From(recovery.Started, recovery.LocalPhase(func(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
			name.Give(k, "lamp")
			return recovery.Next("named"), nil
		}), "named"),
		recovery.From("named", recovery.ExternalPhase("remote",
			func(ctx context.Context, k *recovery.Key) (string, error) {
				_, ok := name.Get(k)
				seenByCall = append(seenByCall, ok)
				if failCall > 0 {
					failCall--
					return "", recovery.Transient(context.DeadlineExceeded)
				}
				return "remote_1", nil
			},
			func(ctx context.Context, tx *db.Tx, k *recovery.Key, _ string) (recovery.Outcome, error) {
				_, ok := name.Get(k)
				seenByRecord = append(seenByRecord, ok)
				if failRecord > 0 {
					failRecord--
					return recovery.Outcome{}, &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
				}
				return recovery.Respond(200, []byte(`{}`)), nil
			}), recovery.Finished),
	)
	engine := newEngine(t, recovery.Config{Pool: pool}, flow)
	req := recovery.Request{UserID: 1, Key: "k", Method: "POST", Path: "/v1/x", Body: []byte(`{}`), Params: struct{}{}, Flow: flow}

	_, err = engine.Execute(ctx, req) // the call fails: the attempt ends after the claim's commit
	require.True(t, recovery.IsTransient(err), "%v", err)
	resp, err := engine.Execute(ctx, req) // a resumed attempt
	require.NoError(t, err)
	require.Equal(t, 200, resp.Status)

	require.Equal(t, []bool{true, false}, seenByCall, "the first attempt's call got it from the claim's commit; the resumed attempt's did not")
	require.Equal(t, []bool{false, false}, seenByRecord, "the resumed attempt never had it, retried or not")

	// Within one attempt: the record's first try has it, its retry does not.
	failCall, failRecord, seenByCall, seenByRecord = 0, 1, nil, nil
	req.Key = "k2"
	resp, err = engine.Execute(ctx, req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.Status)
	require.Equal(t, []bool{true}, seenByCall)
	require.Equal(t, []bool{true, false}, seenByRecord, "the transaction that ran again started without it")
}
