package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/payments"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stagedjobs"
)

// The A-own floor: recovery.Engine.Execute running a flow that issues the
// SQL of the create-payment flow (internal/payments/create.go) statement
// for statement, queued where it queues, but whose external phase calls
// nobody: it makes up a PaymentIntent. This no-op is for this benchmark only, a floor with no
// HTTP and no Stripe; tests never replace Stripe with it. If create.go's SQL
// changes, this must follow (A-own and B should show the same statements
// and round trips per request in the report: 12 and 2, the figures
// internal/payments/roundtrips_test.go pins; B's API key lookups are cached).

var queries = dbsqlc.New()

const (
	ownPaymentCreated       recovery.RecoveryPoint = "payment_created"
	ownPaymentIntentCreated recovery.RecoveryPoint = "payment_intent_created"
)

// createBody is the request body of every new payment in B, D and E.
const createBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`

var ownParams = payments.CreateParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa", Capture: true}

func ownFlow(pool *pgxpool.Pool) *recovery.Flow {
	// ownNoopIntent is createPaymentIntent without Stripe: the payment is
	// the one the claim carried (read again only on a resumed attempt, as
	// the real call does), the parameters decoded, the call not made.
	ownNoopIntent := func(ctx context.Context, k *recovery.Key) (string, error) {
		var p payments.CreateParams
		if err := k.DecodeParams(&p); err != nil {
			return "", err
		}
		if _, ok := k.Carry.(ownClaimed); !ok {
			if _, err := queries.GetPaymentByIdempotencyKey(ctx, pool, &k.ID); err != nil {
				return "", err
			}
		}
		return "pi_" + randomHex(), nil
	}
	return &recovery.Flow{Name: "bench_create_payment", Phases: map[recovery.RecoveryPoint]recovery.Phase{
		recovery.Started:        recovery.LocalPhase(ownInsertPayment),
		ownPaymentCreated:       recovery.ExternalPhase("payment_intent", ownNoopIntent, ownRecordIntent),
		ownPaymentIntentCreated: recovery.LocalPhase(ownFinish),
	}}
}

// ownInsertPayment is insertPayment: the payment and its audit record; the
// payment, as written, is carried.
func ownInsertPayment(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p payments.CreateParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	pay := dbsqlc.Payment{
		ID: "pay_" + randomHex(), UserID: k.UserID, Amount: p.Amount, Currency: p.Currency, Status: "processing",
		Capture: p.Capture, PaymentMethod: p.PaymentMethod, Metadata: []byte("{}"), IdempotencyKeyID: &k.ID,
		CreatedAt: k.Created.Truncate(time.Microsecond),
	}
	err := queries.InsertPayment(ctx, tx.Queued(), dbsqlc.InsertPaymentParams{
		ID: pay.ID, UserID: pay.UserID, Amount: pay.Amount, Currency: pay.Currency, Capture: pay.Capture,
		PaymentMethod: pay.PaymentMethod, Metadata: pay.Metadata, IdempotencyKeyID: pay.IdempotencyKeyID, CreatedAt: pay.CreatedAt,
	})
	if err != nil {
		return recovery.Outcome{}, err
	}
	if err := ownAudit(ctx, tx, k, "payment.created", pay.ID, p); err != nil {
		return recovery.Outcome{}, err
	}
	k.Carry = ownClaimed(pay)
	return recovery.Next(ownPaymentCreated), nil
}

// ownClaimed is the payment as the claim wrote it (create.go's claimedPayment).
type ownClaimed dbsqlc.Payment

// ownRecordIntent is recordPaymentIntent for a succeeded PaymentIntent: the
// carried payment moved to succeeded if it is unchanged (else, on the run
// again, found and locked), the merchant event and the receipt staged, the
// audit record written.
func ownRecordIntent(ctx context.Context, tx *db.Tx, k *recovery.Key, intent string) (recovery.Outcome, error) {
	claimed, carried := k.Carry.(ownClaimed)
	k.Carry = nil
	was := dbsqlc.Payment(claimed)
	if !carried {
		var err error
		if was, err = queries.LockPaymentByIdempotencyKey(ctx, tx, &k.ID); err != nil {
			return recovery.Outcome{}, err
		}
	}
	pay := was
	pay.Status, pay.StripePaymentIntent, pay.AmountCaptured = "succeeded", pgtype.Text{String: intent, Valid: true}, pay.Amount
	var err error
	if carried {
		err = queries.TransitionCarriedPayment(ctx, tx.Queued(), dbsqlc.TransitionCarriedPaymentParams{
			ID: pay.ID, Status: pay.Status, StripePaymentIntent: pay.StripePaymentIntent, AmountCaptured: pay.AmountCaptured,
			WasStatus: was.Status, WasStripePaymentIntent: was.StripePaymentIntent,
			WasAmountCaptured: was.AmountCaptured, WasAmountRefunded: was.AmountRefunded,
		})
	} else {
		err = queries.TransitionPayment(ctx, tx.Queued(), dbsqlc.TransitionPaymentParams{
			ID: pay.ID, Status: pay.Status, StripePaymentIntent: pay.StripePaymentIntent, AmountCaptured: pay.AmountCaptured,
		})
	}
	if err != nil {
		return recovery.Outcome{}, err
	}
	object, err := json.Marshal(pay)
	if err != nil {
		return recovery.Outcome{}, err
	}
	jobs := []stagedjobs.Job{
		{Kind: stagedjobs.MerchantEvent, Args: stagedjobs.NewEventArgs(pay.UserID, "payment.succeeded", object)},
		{Kind: stagedjobs.ReceiptEmail, Args: stagedjobs.ReceiptArgs{
			UserID: pay.UserID, Payment: pay.ID, Amount: pay.AmountCaptured, Currency: pay.Currency, Reason: "payment",
		}},
	}
	if err := stagedjobs.StageTx(ctx, tx.Queued(), k.ID, jobs...); err != nil {
		return recovery.Outcome{}, err
	}
	if err := ownAudit(ctx, tx, k, "payment.succeeded", pay.ID, map[string]string{"payment_intent": intent}); err != nil {
		return recovery.Outcome{}, err
	}
	k.Carry = pay
	return recovery.Next(ownPaymentIntentCreated), nil
}

// ownFinish is finishCreate: the carried payment stored as the answer.
func ownFinish(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	pay, ok := k.Carry.(dbsqlc.Payment)
	if !ok {
		var err error
		if pay, err = queries.GetPaymentByIdempotencyKey(ctx, tx, &k.ID); err != nil {
			return recovery.Outcome{}, err
		}
	}
	body, err := json.Marshal(pay)
	if err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Respond(http.StatusCreated, body), nil
}

func ownAudit(ctx context.Context, tx *db.Tx, k *recovery.Key, action, paymentID string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return queries.InsertAuditRecord(ctx, tx.Queued(), dbsqlc.InsertAuditRecordParams{
		UserID: k.UserID, Action: action, ResourceType: "payment", ResourceID: paymentID, Data: raw, IdempotencyKeyID: &k.ID,
	})
}

// ownRequest runs one new request with a new key through the engine.
func ownRequest(ctx context.Context, engine *recovery.Engine, flow *recovery.Flow, users []benchUser, rng *rand.Rand) (string, error) {
	u := users[rng.IntN(len(users))]
	resp, err := engine.Execute(ctx, recovery.Request{
		UserID: u.id, Key: uuid.NewString(), Method: http.MethodPost, Path: "/v1/payments",
		Body: []byte(createBody), Params: ownParams, Flow: flow,
	})
	if err != nil {
		return "", err
	}
	if resp.Replayed {
		return fmt.Sprintf("%d replayed", resp.Status), nil
	}
	return fmt.Sprint(resp.Status), nil
}

func randomHex() string {
	u := uuid.New()
	return fmt.Sprintf("%x", u[:12])
}
