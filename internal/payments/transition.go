package payments

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/stagedjobs"
)

// A payment's life, and the event each move announces to the merchant:
//
//	processing ──────────────> succeeded          payment.succeeded (+ receipt)
//	    │  ├─────────────────> failed             payment.failed
//	    │  └─────────────────> canceled           payment.canceled (Stripe canceled it
//	    │                                           before the flow recorded it)
//	    └──> requires_capture ─> succeeded        payment.captured (+ receipt)
//	                  │  └─────> canceled         payment.canceled
//	                  └────────> failed           payment.failed (the authorisation lapsed)
//
// A flow (create, capture, cancel) and a Stripe webhook may both learn of
// the same change, in either order. Whichever applies it first makes the
// move and stages its event, in its own transaction and under the payment's
// row lock; the other finds the move already made and stages nothing. So
// each change yields exactly one event.
var moves = map[[2]Status]string{
	{StatusProcessing, StatusSucceeded}:       "payment.succeeded",
	{StatusProcessing, StatusFailed}:          "payment.failed",
	{StatusProcessing, StatusRequiresCapture}: "",
	{StatusProcessing, StatusCanceled}:        "payment.canceled",
	{StatusRequiresCapture, StatusSucceeded}:  "payment.captured",
	{StatusRequiresCapture, StatusCanceled}:   "payment.canceled",
	{StatusRequiresCapture, StatusFailed}:     "payment.failed",
}

// transition is a move to make and what Stripe said with it.
type transition struct {
	to             Status
	intent         string // the PaymentIntent, when it is new to us
	amountCaptured int64  // for a move to succeeded
	failureCode    string // for a move to failed
	failureMessage string
}

// applyMove makes the move t on pay, which the caller holds locked in tx,
// if the payment's life allows it, and stages the event that announces it
// (and a receipt when money was captured). by is the request making the
// change; nil for a Stripe webhook. It returns the payment as it now
// stands and whether it moved.
func applyMove(ctx context.Context, tx *db.Tx, by *uuid.UUID, pay Payment, t transition) (Payment, bool, error) {
	event, allowed := moves[[2]Status{pay.Status, t.to}]
	if !allowed {
		return pay, false, nil
	}
	// The move is computed here, from pay, and written as it is, queued.
	pay = t.applyTo(pay)
	err := queries.TransitionPayment(ctx, tx.Queued(), dbsqlc.TransitionPaymentParams{
		ID: pay.ID, Status: string(pay.Status), StripePaymentIntent: toText(pay.StripePaymentIntent),
		AmountCaptured: pay.AmountCaptured, FailureCode: toText(pay.FailureCode), FailureMessage: toText(pay.FailureMessage),
	})
	if err != nil {
		return pay, false, err
	}
	return pay, true, stageMoveEvents(ctx, tx, by, event, pay)
}

// applyMoveUnread is applyMove for a payment the caller has not read in tx
// (the unread move): pay is the payment as an earlier transaction of the
// request left it, handed off to this one (see create.go). It saves the
// locked read, and with it a round trip: the transaction reads nothing
// before its COMMIT. The move is written only if the payment is still as
// pay says; if it is not (a webhook moved it meanwhile), the database
// raises a serialization failure, the transaction runs again, and, hand-offs
// being dropped when a transaction runs again, the caller then reads the
// payment under a lock and uses applyMove. The move must be one pay
// allows: deciding not to move would rest on a copy that may be stale.
func applyMoveUnread(ctx context.Context, tx *db.Tx, by uuid.UUID, pay Payment, t transition) (Payment, error) {
	event, allowed := moves[[2]Status{pay.Status, t.to}]
	if !allowed {
		return pay, bug("an unread payment that is %s cannot move to %s", pay.Status, t.to)
	}
	was := pay
	pay = t.applyTo(pay)
	err := queries.TransitionPaymentIfUnchanged(ctx, tx.Queued(), dbsqlc.TransitionPaymentIfUnchangedParams{
		ID: pay.ID, Status: string(pay.Status), StripePaymentIntent: toText(pay.StripePaymentIntent),
		AmountCaptured: pay.AmountCaptured, FailureCode: toText(pay.FailureCode), FailureMessage: toText(pay.FailureMessage),
		WasStatus: string(was.Status), WasStripePaymentIntent: toText(was.StripePaymentIntent),
		WasAmountCaptured: was.AmountCaptured, WasAmountRefunded: was.AmountRefunded,
		WasFailureCode: toText(was.FailureCode), WasFailureMessage: toText(was.FailureMessage),
	})
	if err != nil {
		return pay, err
	}
	return pay, stageMoveEvents(ctx, tx, &by, event, pay)
}

// stageMoveEvents stages the event announcing a move to pay's status, if
// the move has one, and the receipt when money was captured.
func stageMoveEvents(ctx context.Context, tx *db.Tx, by *uuid.UUID, event string, pay Payment) error {
	if event == "" {
		return nil
	}
	jobs := []stagedjobs.Job{eventJob(pay.UserID, event, pay)}
	if pay.Status == StatusSucceeded {
		jobs = append(jobs, receiptJob(pay))
	}
	return stage(ctx, tx, by, jobs...)
}

// applyTo returns pay after the move t.
func (t transition) applyTo(pay Payment) Payment {
	pay.Status = t.to
	if t.intent != "" {
		pay.StripePaymentIntent = &t.intent
	}
	if t.to == StatusSucceeded {
		pay.AmountCaptured = t.amountCaptured
	}
	if t.failureCode != "" {
		pay.FailureCode = &t.failureCode
	}
	if t.failureMessage != "" {
		pay.FailureMessage = &t.failureMessage
	}
	return pay
}

func eventJob(userID int64, eventType string, object any) stagedjobs.Job {
	raw, err := json.Marshal(object)
	if err != nil {
		// Payments and refunds always marshal; a failure here is a bug.
		panic(fmt.Sprintf("marshalling %T: %v", object, err))
	}
	return stagedjobs.Job{Kind: stagedjobs.MerchantEvent, Args: stagedjobs.NewEventArgs(userID, eventType, raw)}
}

func receiptJob(pay Payment) stagedjobs.Job {
	return stagedjobs.Job{Kind: stagedjobs.ReceiptEmail, Args: stagedjobs.ReceiptArgs{
		UserID: pay.UserID, Payment: pay.ID, Amount: pay.AmountCaptured, Currency: pay.Currency, Reason: "payment",
	}}
}

// stage stages jobs for the request keyID, or for no request (a webhook).
func stage(ctx context.Context, tx *db.Tx, keyID *uuid.UUID, jobs ...stagedjobs.Job) error {
	if keyID == nil {
		return stagedjobs.StageUnkeyedTx(ctx, tx.Queued(), jobs...)
	}
	return stagedjobs.StageTx(ctx, tx.Queued(), *keyID, jobs...)
}

func textOrNull(s string) pgtype.Text {
	return pgtype.Text{String: s, Valid: s != ""}
}

// lockPayment locks a payment for a change, by id.
func lockPayment(ctx context.Context, tx *db.Tx, id string) (Payment, error) {
	row, err := queries.GetPaymentByIDForUpdate(ctx, tx, id)
	if err != nil {
		return Payment{}, err
	}
	return fromRow(row)
}
