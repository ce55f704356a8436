package payments_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/stripeclient"
)

// The record phase moves the payment its claim carried without reading it
// again. Here Stripe's webhook outruns the flow: the simulator's answer to
// the PaymentIntent is held back until the webhook's event has moved the
// payment (and staged payment.succeeded). The flow's carried copy is then
// stale; its move must not apply, and the merchant must hear of the payment
// once.
func TestCreate_aWebhookThatMovesThePaymentFirstLeavesOneEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var webhook payments.EventOutcome
	// Between the simulator and the service: the webhook's effect, applied
	// as the webhooks receiver applies it, before the answer is let through.
	outrun := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		b.sim.Handler().ServeHTTP(rec, r)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" && rec.Code == http.StatusOK {
			var pi stripe.PaymentIntent
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &pi))
			require.NoError(t, db.WithTx(r.Context(), b.pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
				var err error
				webhook, err = payments.ApplyIntentEventTx(ctx, tx, "payment_intent.succeeded", &pi, time.Now())
				return err
			}))
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(outrun.Close)
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_outrun", APIBase: outrun.URL})
	require.NoError(t, err)
	b.stripe = stripe
	svc, _ := b.service(t, "")

	body := []byte(`{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}`)
	resp, err := svc.Create(ctx, payments.KeyedRequest{UserID: b.userID, Key: "outrun", Method: "POST", Path: "/v1/payments", Body: body},
		payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	require.Equal(t, payments.EventApplied, webhook, "the webhook moved the payment before the flow recorded it")

	var answer struct{ ID, Status string }
	require.NoError(t, json.Unmarshal(resp.Body, &answer))
	require.Equal(t, "succeeded", answer.Status)
	var status, intent string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT status, stripe_payment_intent FROM payments WHERE id = $1", answer.ID).Scan(&status, &intent))
	require.Equal(t, "succeeded", status)
	require.NotEmpty(t, intent)
	var events int
	require.NoError(t, b.pool.QueryRow(ctx,
		"SELECT count(*) FROM staged_jobs WHERE args->>'type' = 'payment.succeeded'").Scan(&events))
	require.Equal(t, 1, events, "one change, one event")
}

// Were Stripe to answer a 3-D Secure card with a PaymentIntent waiting in
// requires_action (it ignored error_on_requires_action, which a proxy here
// strips), the payment is failed as authentication_required: never
// requires_capture, whatever capture asked.
func TestCreate_aPaymentIntentRequiringActionIsFailedNotAuthorised(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	strip := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			require.NoError(t, r.ParseForm())
			r.PostForm.Del("error_on_requires_action")
			body := r.PostForm.Encode()
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			r.Form, r.PostForm = nil, nil
		}
		b.sim.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(strip.Close)
	stripe, err := stripeclient.New(stripeclient.Config{SecretKey: "sk_test_strip", APIBase: strip.URL})
	require.NoError(t, err)
	b.stripe = stripe
	svc, _ := b.service(t, "")

	for i, capture := range []bool{true, false} {
		body := []byte(fmt.Sprintf(`{"amount":1500,"currency":"usd","payment_method":"pm_card_authenticationRequired","capture":%t}`, capture))
		resp, err := svc.Create(ctx, payments.KeyedRequest{UserID: b.userID, Key: fmt.Sprintf("3ds-%d", i), Method: "POST", Path: "/v1/payments", Body: body},
			payments.CreateParams{Amount: 1500, Currency: "usd", PaymentMethod: "pm_card_authenticationRequired", Capture: capture})
		require.NoError(t, err)
		require.Equal(t, http.StatusPaymentRequired, resp.Status, string(resp.Body))
		var answer struct {
			DeclineCode string `json:"decline_code"`
			Payment     string `json:"payment"`
		}
		require.NoError(t, json.Unmarshal(resp.Body, &answer))
		require.Equal(t, "authentication_required", answer.DeclineCode)
		var status string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT status FROM payments WHERE id = $1", answer.Payment).Scan(&status))
		require.Equal(t, "failed", status, "capture=%t", capture)
	}
	objects, err := b.sim.Objects("payment_intent")
	require.NoError(t, err)
	for _, raw := range objects {
		var pi struct{ Status string }
		require.NoError(t, json.Unmarshal(raw, &pi))
		require.Equal(t, "requires_action", pi.Status, "the proxy did strip the parameter")
	}
}
