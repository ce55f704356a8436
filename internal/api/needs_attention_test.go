package api_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripesim"
)

// Rule 7: a key unfinished past Stripe's idempotency window with nothing
// found at Stripe answers 409 idempotency_key_needs_attention, without
// Retry-After (retrying cannot help: an operator must re-drive it), and
// keeps answering so; it once answered 500 internal.
func TestIdempotency_keyPastStripesWindowNeedsAttention(t *testing.T) {
	t.Parallel()
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	b := setup(t, setupOpts{engine: recovery.Config{Now: func() time.Time { return *now.Load() }}})

	// Stripe fails before making the PaymentIntent: the key waits at payment_created.
	b.addFault(t, stripesim.FaultError500, 0)
	resp, data := b.post(t, aliceKey, pathPayments, "old-key", visaBody)
	requireProblem(t, resp, data, http.StatusServiceUnavailable, "payment_processor_unavailable")
	require.Contains(t, string(data), `"detail":"The payment processor could not be reached. Nothing is lost: `,
		"the payment flows' remote is Stripe, in the contract's words (recovery.Remote: payments.Stripe)")

	later := start.Add(25 * time.Hour) // Stripe may have forgotten the child key by now
	now.Store(&later)
	for range 2 {
		resp, data = b.post(t, aliceKey, pathPayments, "old-key", visaBody)
		requireProblem(t, resp, data, http.StatusConflict, "idempotency_key_needs_attention")
		require.Empty(t, resp.Header.Get("Retry-After"), "retrying cannot help")
		require.Contains(t, string(data), "payments keys retry")
	}
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 1, "the creation was not sent to Stripe again")
}

// Issue 41: a phase that fails with an error no retry can cure (here the
// payment's insert violates a constraint of the service's own: a trigger
// raising unique_violation, as a flow's clashing insert would) is the
// service's fault, not the client's: 500 internal, once per request, whose
// detail says the key waits for an operator. Every retry gets the same,
// and nothing runs again (it once answered 503 "collided ... retry", and
// the completer retried it for ever); the operator's retry, once the cause
// is fixed, finishes it, and the client's next retry gets the payment.
func TestIdempotency_aPhaseThatFailsForGoodAnswers500UntilAnOperatorRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION refuse_1313() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.amount = 1313 THEN
				RAISE EXCEPTION 'payment % clashes with another', NEW.id USING ERRCODE = 'unique_violation';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_1313 BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION refuse_1313();`)
	require.NoError(t, err)
	body := `{"amount":1313,"currency":"usd","payment_method":"pm_card_visa"}`

	var first []byte
	for i := range 3 {
		resp, data := b.post(t, aliceKey, pathPayments, "clashing", body)
		requireProblem(t, resp, data, http.StatusInternalServerError, "internal")
		require.Empty(t, resp.Header.Get("Retry-After"), "retrying cannot help")
		require.Contains(t, string(data), "payments keys retry", "it says the key waits for an operator")
		require.NotContains(t, string(data), "clashes with another", "the error itself stays in the log and with the key")
		if i == 0 {
			first = data
		}
		require.Equal(t, first, data, "every retry gets the same answer")
	}
	require.Empty(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), "nothing ran past the failed phase")
	var id uuid.UUID
	var why string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id, attention_error FROM idempotency_keys
		WHERE idempotency_key = 'clashing' AND needs_attention_at IS NOT NULL AND locked_at IS NULL`).Scan(&id, &why))
	require.Contains(t, why, "clashes with another", "the error is on record for the operator")

	_, err = b.pool.Exec(ctx, "DROP TRIGGER refuse_1313 ON payments")
	require.NoError(t, err)
	resp, err := recovery.NewCompleter(recovery.CompleterConfig{Engine: b.engine}).RetryNow(ctx, id)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status)
	r, data := b.post(t, aliceKey, pathPayments, "clashing", body)
	require.Equal(t, http.StatusCreated, r.StatusCode, string(data))
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Len(t, b.simRequests(http.MethodPost, "/v1/payment_intents"), 1)
}
