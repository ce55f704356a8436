package payments_test

import (
	"context"
	"encoding/json"
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
	_, err := svc.Create(context.Background(), payments.KeyedRequest{
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
// key. The completer alone finds the key spent, finds no PaymentIntent in
// Stripe's list, waits out the grace (its request may still be executing at
// Stripe), moves on to a new child key and finishes the payment: one
// PaymentIntent, a minute and a half after the 500 with the completer's
// 30-second grace (it first looks at 30 s, then backs off 60 s).
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

	b.now = b.now.Add(31 * time.Second) // past the completer's grace
	run, err := c.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, recovery.CompleterRun{Claimed: 1, Failed: 1}, run, "spent, nothing found, and within the grace")
	g, spent := b.generation(t)
	require.Equal(t, 0, g)
	require.True(t, spent, "recorded as spent")

	b.now = b.now.Add(recovery.DefaultSpentKeyGrace + time.Second) // past the completer's backoff, and the grace
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

	b.now = b.now.Add(recovery.DefaultSpentKeyGrace)
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

// "Nothing found" is trusted only after the grace; but a PaymentIntent
// found in Stripe's list is trusted at once: the spent key had acted, and
// its PaymentIntent is recorded, with no new key.
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

	require.NoError(t, b.createVisa(t, svc), "the replayed 500: spent; the list shows the PaymentIntent")
	g, spent := b.generation(t)
	require.Equal(t, 0, g, "no new key")
	require.True(t, spent)
	require.Equal(t, 1, countObjects(t, b.sim, "payment_intent"))
	var status string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM payments").Scan(&status))
	require.Equal(t, "succeeded", status)
}

// serviceWithGrace is service with the engine's SpentKeyGrace set.
func (b *testBundle) serviceWithGrace(t *testing.T, grace time.Duration) *payments.Service {
	t.Helper()
	svc, _ := newService(t, recovery.Config{
		Pool: b.pool, LockTimeout: time.Minute, Now: func() time.Time { return b.now }, SpentKeyGrace: grace,
	}, b.stripe)
	return svc
}

// chargingIntents are the PaymentIntents at the simulator that took money
// (succeeded or authorised), by the key row id in their metadata.
func chargingIntents(t *testing.T, sim *stripesim.Simulator) map[string]int {
	t.Helper()
	objects, err := sim.Objects("payment_intent")
	require.NoError(t, err)
	charging := map[string]int{}
	for _, raw := range objects {
		var pi struct {
			Status   string
			Metadata map[string]string
		}
		require.NoError(t, json.Unmarshal(raw, &pi))
		if pi.Status == "succeeded" || pi.Status == "requires_capture" {
			charging[pi.Metadata["idempotency_key_id"]]++
		}
	}
	return charging
}

// lateStripe arms a late 500 on the next PaymentIntent create: Stripe
// answers 500 and stores it under the child key, and the request's
// PaymentIntent appears half a minute later (on the simulator's clock,
// which the test moves).
func (b *testBundle) lateStripe(t *testing.T) {
	t.Helper()
	require.NoError(t, b.sim.AddFault(stripesim.Fault{
		PathPrefix: "/v1/payment_intents", Method: "POST", Kind: stripesim.FaultLate500, DelayMS: 30_000,
	}))
}

// Stripe answered 500 while the request was still being processed: its
// PaymentIntent appears after the service found the key spent and looked.
// Within the grace, "nothing found" is not believed: the retry after it
// finds the late PaymentIntent and records it. One charge.
func TestStored500_aLate500ChargesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lateStripe(t)
	svc := b.serviceWithGrace(t, 0) // the default
	require.True(t, recovery.IsTransient(b.createVisa(t, svc)), "the 500")

	b.now = b.now.Add(2 * time.Second)
	err := b.createVisa(t, svc)
	require.ErrorIs(t, err, recovery.ErrChildKeySpent, "spent, and nothing in Stripe's list yet")
	require.Equal(t, recovery.DefaultSpentKeyGrace, recovery.RetryAfterOf(err), "come back when the grace ends")
	require.Empty(t, chargingIntents(t, b.sim))

	b.sim.Advance(30 * time.Second) // the 500's request finishes at Stripe
	b.now = b.now.Add(recovery.DefaultSpentKeyGrace)
	require.NoError(t, b.createVisa(t, svc), "the late PaymentIntent is found and recorded")

	g, _ := b.generation(t)
	require.Equal(t, 0, g, "no new child key: none was needed")
	var keyID, status, intent string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT idempotency_key_id::text, status, stripe_payment_intent FROM payments").Scan(&keyID, &status, &intent))
	require.Equal(t, "succeeded", status)
	require.Equal(t, map[string]int{keyID: 1}, chargingIntents(t, b.sim), "one charge")
}

// The same without the grace: the new child key charges at once, and the
// 500's request charges too when it finishes. This is what the grace is
// for, and it shows that the test above can fail.
func TestStored500_aLate500WithoutTheGraceChargesTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.lateStripe(t)
	svc := b.serviceWithGrace(t, -1) // none
	require.True(t, recovery.IsTransient(b.createVisa(t, svc)), "the 500")

	b.now = b.now.Add(2 * time.Second)
	require.NoError(t, b.createVisa(t, svc), "spent, nothing found, moved on to a new child key at once")
	b.sim.Advance(30 * time.Second)

	var keyID string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT idempotency_key_id::text FROM payments").Scan(&keyID))
	require.Equal(t, map[string]int{keyID: 2}, chargingIntents(t, b.sim), "charged twice")
}
