package payments_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/recovery/recoverytest"
	"github.com/example/payments/internal/stripeclient"
	"github.com/example/payments/internal/stripesim"
	"github.com/example/payments/internal/stripesim/stripesimtest"
	"github.com/example/payments/internal/users"
)

// Every payment flow, proven exactly-once by recoverytest against the
// simulator over HTTP: killed at every failpoint its declaration names,
// and its Stripe call met by every fault of the simulator, each resumed by
// a retry and by the completer.
func TestProve_everyPaymentFlow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		flow    string
		request func(t *testing.T, b *testBundle, svc *payments.Service) recovery.Request
		want    recoverytest.Want
	}{
		{"create_payment", func(_ *testing.T, b *testBundle, _ *payments.Service) recovery.Request {
			return b.proofRequest("/v1/payments", payments.CreateParams{Amount: 4200, Currency: "eur", PaymentMethod: "pm_card_visa", Capture: true})
		}, recoverytest.Want{Status: 201, JSON: `{"status": "succeeded", "amount_captured": 4200}`}},
		{"capture_payment", func(t *testing.T, b *testBundle, svc *payments.Service) recovery.Request {
			id := b.proofPayment(t, svc, false)
			return b.proofRequest("/v1/payments/"+id+"/capture", payments.ActionParams{Payment: id})
		}, recoverytest.Want{Status: 200, JSON: `{"status": "succeeded", "captured": true}`}},
		{"cancel_payment", func(t *testing.T, b *testBundle, svc *payments.Service) recovery.Request {
			id := b.proofPayment(t, svc, false)
			return b.proofRequest("/v1/payments/"+id+"/cancel", payments.ActionParams{Payment: id})
		}, recoverytest.Want{Status: 200, JSON: `{"status": "canceled"}`}},
		{"refund_payment", func(t *testing.T, b *testBundle, svc *payments.Service) recovery.Request {
			return b.proofRequest("/v1/refunds", payments.RefundParams{Payment: b.proofPayment(t, svc, true), Amount: 1000})
		}, recoverytest.Want{Status: 201, JSON: `{"status": "succeeded", "amount": 1000}`}},
	} {
		t.Run(c.flow, func(t *testing.T) {
			t.Parallel()
			b := proofSetup(t)
			svc, engine := b.service(t, "")
			flow, ok := engine.Flow(c.flow)
			require.True(t, ok)
			recoverytest.Prove(t, recoverytest.Case{
				Pool: b.pool, Flow: flow, Effects: b.stripeEffects(t),
				Request: func() recovery.Request { return c.request(t, b, svc) },
				State:   b.paymentState(t),
				Faults:  stripesimtest.Faults(b.sim),
				Want:    c.want,
			})
		})
	}
}

// proofSetup is setup for a proof: the database and the simulator are
// made in the test's process only, and shared with the processes the proof
// kills (b.sim is nil in those).
func proofSetup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{now: time.Now().UTC().Truncate(time.Second)}
	simURL := recoverytest.Server(t, "simulator", func() http.Handler {
		b.sim = stripesim.New(stripesim.Config{})
		t.Cleanup(b.sim.Close)
		return b.sim.Handler()
	})
	b.pool = recoverytest.Database(t, func(pool *pgxpool.Pool) error { return users.SeedDemoUsers(context.Background(), pool) })
	u, err := users.Authenticate(context.Background(), b.pool, users.DemoUsers[0].APIKey)
	require.NoError(t, err)
	b.userID = u.ID
	b.stripe, err = stripeclient.New(stripeclient.Config{SecretKey: "sk_test_prove", APIBase: simURL})
	require.NoError(t, err)
	return b
}

// proofRequest is a request to path with params as its body.
func (b *testBundle) proofRequest(path string, params any) recovery.Request {
	body, _ := json.Marshal(params)
	return recovery.Request{UserID: b.userID, Method: "POST", Path: path, Body: body, Params: params}
}

// proofPayment makes a payment, captured or authorised, for a flow to act on.
func (b *testBundle) proofPayment(t *testing.T, svc *payments.Service, capture bool) string {
	body := fmt.Sprintf(`{"amount":4200,"currency":"eur","payment_method":"pm_card_visa","capture":%t}`, capture)
	resp, err := svc.Create(context.Background(), payments.KeyedRequest{
		UserID: b.userID, Key: uuid.NewString(), Method: "POST", Path: "/v1/payments", Body: []byte(body),
	}, payments.CreateParams{Amount: 4200, Currency: "eur", PaymentMethod: "pm_card_visa", Capture: capture})
	require.NoError(t, err)
	require.Equal(t, 201, resp.Status, string(resp.Body))
	var p struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &p))
	return p.ID
}

// stripeEffects counts what the simulator holds: PaymentIntents, refunds
// and events (a capture or a cancel is an event).
func (b *testBundle) stripeEffects(t *testing.T) func() int {
	return func() int {
		n := 0
		for _, typ := range []string{"payment_intent", "refund", "event"} {
			objs, err := b.sim.Objects(typ)
			require.NoError(t, err)
			n += len(objs)
		}
		return n
	}
}

// paymentState is the local state an answer speaks of, read anew as a
// client would GET it: the payment (for a refund, the refund and its
// payment, whose amount_refunded it moved).
func (b *testBundle) paymentState(t *testing.T) func(recovery.Response) []byte {
	return func(resp recovery.Response) []byte {
		ctx := context.Background()
		var answer struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Payment string `json:"payment"`
		}
		require.NoError(t, json.Unmarshal(resp.Body, &answer), "%s", resp.Body)
		state := map[string]any{}
		paymentID := answer.ID
		if answer.Object == "refund" {
			refund, err := payments.GetRefund(ctx, b.pool, b.userID, answer.ID)
			require.NoError(t, err)
			state["refund"], paymentID = refund, answer.Payment
		}
		payment, err := payments.Get(ctx, b.pool, b.userID, paymentID)
		require.NoError(t, err)
		state["payment"] = payment
		out, err := json.Marshal(state)
		require.NoError(t, err)
		return out
	}
}
