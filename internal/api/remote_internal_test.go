package api

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
)

// Issue 41: a flow names its remote side and what a client is told while
// it cannot be reached (recovery.Remote). A team's flow whose bank answers
// 502 (transient: the flow marks it so) is answered 503 in the bank's
// words, under the documented code payment_processor_unavailable, with
// Retry-After; the payment flows keep Stripe's exact wording. The engine
// runs on a real database; the bank is the flow's call.
func TestProblemFor_aTransientFailureIsToldInTheWordsOfTheFlowsRemote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO users (email) VALUES ('team@example.com')`)
	require.NoError(t, err)
	flow := func(name string, remote recovery.Remote) *recovery.Flow {
		f := recovery.NewFlow(name,
			recovery.From(recovery.Started, recovery.ExternalPhase("transfer",
				func(context.Context, *recovery.Key) (string, error) {
					return "", recovery.Transient(errors.New("POST /transfers: 502 Bad Gateway"))
				},
				func(context.Context, *db.Tx, *recovery.Key, string) (recovery.Outcome, error) {
					return recovery.Respond(http.StatusCreated, []byte(`{}`)), nil
				}), recovery.Finished))
		f.Remote = remote
		return f
	}
	payout := flow("create_payout", recovery.Remote{Name: "bank", Unavailable: "The bank could not be reached."})
	stripeLike := flow("charge", payments.Stripe)
	engine, err := recovery.New(recovery.Config{Pool: pool}, payout, stripeLike)
	require.NoError(t, err)

	for _, tc := range []struct {
		flow   *recovery.Flow
		detail string
	}{
		{payout, "The bank could not be reached. Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped."},
		{stripeLike, "The payment processor could not be reached. Nothing is lost: retry with the same Idempotency-Key and the request resumes where it stopped."},
	} {
		_, err := engine.Execute(ctx, recovery.Request{UserID: 1, Key: tc.flow.Name, Method: "POST", Path: "/v1/" + tc.flow.Name,
			Body: []byte(`{}`), Flow: tc.flow})
		require.True(t, recovery.IsTransient(err), "%v", err)
		remote, ok := recovery.RemoteOf(err)
		require.True(t, ok)
		require.Equal(t, tc.flow.Remote, remote)
		p := problemFor(err)
		require.Equal(t, http.StatusServiceUnavailable, p.Status)
		require.Equal(t, problem.PaymentProcessorUnavailable, p.Code, "a documented code, the same for every remote")
		require.Equal(t, tc.detail, p.Detail)
		require.Positive(t, p.RetryAfter)
	}
}
