package payments_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
)

// Issue 20, item 10: a key that another instance finished is "definitely
// new" to this instance's key filter. The claim ran the first phase and
// wrote the key row last, so what that phase ran into was the answer: here
// an error before its commit, an internal error (500) where the replay, or
// 422 for another body, is right. The claim now writes the key row first:
// the unique index decides, and an existing key gets the careful answer.
func TestCreate_aKeyAnotherInstanceFinishedGetsTheCarefulAnswer(t *testing.T) {
	t.Parallel()
	const body = `{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`
	for name, tc := range map[string]struct {
		body    string
		wantErr error // nil: the replay
	}{
		"the same request is replayed":  {body: body},
		"another request is 422 reused": {body: `{"amount":2500,"currency":"usd","payment_method":"pm_card_visa"}`, wantErr: recovery.ErrKeyReused},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			one, _ := b.instance(t, instanceConfig{})
			two, _ := b.instance(t, instanceConfig{failpoints: "before_commit:payment_created=error"})
			first, err := b.create(ctx, one, "k1", body)
			require.NoError(t, err)
			require.Equal(t, 201, first.Status)

			resp, err := b.create(ctx, two, "k1", tc.body)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
				require.True(t, resp.Replayed)
				require.Equal(t, first.Body, resp.Body)
			}
			require.Equal(t, 1, b.paymentIntentCreations())
		})
	}
}

// Item 10 again, with a first phase that waits: a refund locks its payment
// first. A key another instance finished waited for whoever held that lock
// (an unrelated request, a webhook) before it was found; it is now
// answered at once, since the key row is written before the refund's work.
func TestRefund_aKeyAnotherInstanceFinishedDoesNotWaitForThePaymentsLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	one, _ := b.instance(t, instanceConfig{})
	two, _ := b.instance(t, instanceConfig{})
	created, err := b.create(ctx, one, "pay", `{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.NoError(t, err)
	var pay struct{ ID string }
	require.NoError(t, json.Unmarshal(created.Body, &pay))
	refund := payments.RefundParams{Payment: pay.ID, Amount: 500}
	first, err := b.refund(ctx, one, "re1", refund)
	require.NoError(t, err)
	require.Equal(t, 201, first.Status)

	// Someone holds the payment's row lock for longer than the test waits.
	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "SELECT 1 FROM payments WHERE id = $1 FOR UPDATE", pay.ID)
	require.NoError(t, err)

	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := b.refund(waitCtx, two, "re1", refund)
	require.NoError(t, err, "answered without waiting for the payment's lock")
	require.True(t, resp.Replayed)
	require.Equal(t, first.Body, resp.Body)
	require.Equal(t, 1, countObjects(t, b.sim, "refund"))
}
