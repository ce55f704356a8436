package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
)

// createVisa sends the create request with the Idempotency-Key "spent" once,
// as a client that never retries would.
func (b *testBundle) createVisa(t *testing.T, svc *payments.Service) error {
	t.Helper()
	body := []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)
	_, err := svc.Create(context.Background(), payments.Idempotent{
		UserID: b.userID, Key: "spent", Method: "POST", Path: "/v1/payments", Body: body,
	}, payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
	return err
}

// keyStateOf is keyState for the key named key.
func (b *testBundle) keyStateOf(t *testing.T, key string) (point string, code *int32, attention bool) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT recovery_point, response_code, needs_attention_at IS NOT NULL FROM idempotency_keys WHERE idempotency_key = $1", key).
		Scan(&point, &code, &attention))
	return point, code, attention
}

// generation is the recorded generation of the "spent" key's PaymentIntent
// child key, and whether it is known spent; -1 when nothing is recorded.
func (b *testBundle) generation(t *testing.T) (int, bool) {
	t.Helper()
	var g int
	var spent bool
	err := b.pool.QueryRow(context.Background(), `
		SELECT g.generation, g.spent_at IS NOT NULL FROM child_key_generations g
		JOIN idempotency_keys k ON k.id = g.idempotency_key_id
		WHERE k.idempotency_key = 'spent' AND g.step = 'payment_intent'`).Scan(&g, &spent)
	if err != nil {
		return -1, false
	}
	return g, spent
}

// The client sends once and gets 503; Stripe stored the 500 under the child
// key. The completer alone finds the key spent, waits out Stripe's search
// lag, moves on to a new child key and finishes the payment: one
// PaymentIntent.
func TestStored500_theCompleterFinishesWithoutAnyRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, engine := b.service(t, "")
	c := b.completer(svc, engine)
	ctx := context.Background()
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultStoredError500}))

	err := b.createVisa(t, svc)
	require.True(t, recovery.IsTransient(err), "%v", err)
	require.NotErrorIs(t, err, recovery.ErrChildKeySpent, "a first 500 may pass")

	b.now = b.now.Add(time.Minute)
	run, err := c.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Failed: 1}, run, "spent, and nothing to find yet")
	g, spent := b.generation(t)
	require.Equal(t, 0, g)
	require.True(t, spent, "recorded as spent")

	b.now = b.now.Add(recovery.DefaultSearchLag)
	run, err = c.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Finished: 1}, run)
	g, spent = b.generation(t)
	require.Equal(t, 1, g)
	require.False(t, spent)

	require.Equal(t, 1, countObjects(t, b.sim, "payment_intent"), "one PaymentIntent")
	point, code, attention := b.keyStateOf(t, "spent")
	require.Equal(t, "finished", point)
	require.EqualValues(t, 201, *code)
	require.False(t, attention)
	var status string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT status FROM payments").Scan(&status))
	require.Equal(t, "succeeded", status)
}

// The generation is the database's: an attempt that moved to a new child key
// and died before recording Stripe's answer leaves the next attempt, in
// another process, using the new key, never the spent one. Stripe then
// replays the PaymentIntent it made with it.
func TestStored500_everyProcessUsesTheNewChildKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultStoredError500}))
	first, _ := b.service(t, "")
	require.True(t, recovery.IsTransient(b.createVisa(t, first)))
	err := b.createVisa(t, first)
	require.ErrorIs(t, err, recovery.ErrChildKeySpent, "found spent, nothing found yet")
	require.True(t, recovery.IsTransient(err))

	b.now = b.now.Add(recovery.DefaultSearchLag)
	dying, _ := b.service(t, "after_stripe:payment_intent=error")
	require.Error(t, b.createVisa(t, dying), "found spent, renewed, charged with the new key, died before recording")
	g, _ := b.generation(t)
	require.Equal(t, 1, g)
	require.Equal(t, 1, countObjects(t, b.sim, "payment_intent"))

	another, _ := b.service(t, "")
	require.NoError(t, b.createVisa(t, another))
	reqs := b.sim.Requests()
	last := reqs[len(reqs)-1]
	require.Equal(t, "/v1/payment_intents", last.Path)
	require.True(t, last.Replayed, "Stripe replayed what the new key made")
	require.Equal(t, reqs[0].IdempotencyKey+"-g1", last.IdempotencyKey)
	require.Equal(t, 1, countObjects(t, b.sim, "payment_intent"), "one PaymentIntent")
}

// A search lags, so "nothing found" is trusted only after SearchLag; but a
// search that finds the PaymentIntent is trusted at once: the spent key had
// acted, and its PaymentIntent is recorded, with no new key.
func TestStored500_aPaymentIntentTheSpentKeyMadeIsRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	svc, _ := b.service(t, "after_commit:payment_created=error")
	require.Error(t, b.createVisa(t, svc))
	var keyID, paymentID string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT idempotency_key_id::text, id FROM payments").Scan(&keyID, &paymentID))

	// Stripe made the PaymentIntent, and then stored a 500 under the key
	// (the simulator does the two apart: a PaymentIntent with the key's
	// metadata, then the stored 500 on the service's call).
	_, err := b.stripe.CreatePaymentIntent(context.Background(), "made-before-the-500", stripeclient.PaymentIntentRequest{
		Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa",
		Metadata: map[string]string{"payment": paymentID, "idempotency_key_id": keyID},
	})
	require.NoError(t, err)
	require.NoError(t, b.sim.AddFault(stripesim.Fault{PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultStoredError500}))
	svc, _ = b.service(t, "")
	require.True(t, recovery.IsTransient(b.createVisa(t, svc)), "the 500")

	require.NoError(t, b.createVisa(t, svc), "the replayed 500: spent; the search finds the PaymentIntent")
	g, spent := b.generation(t)
	require.Equal(t, 0, g, "no new key")
	require.True(t, spent)
	require.Equal(t, 1, countObjects(t, b.sim, "payment_intent"))
	var status string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM payments").Scan(&status))
	require.Equal(t, "succeeded", status)
}
