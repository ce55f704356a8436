package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/ids"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
)

// The create-payment flow, POST /v1/payments:
//
//	started
//	  │ tx: insert the payment (processing) and its audit record
//	  ▼
//	payment_created
//	  │ Stripe: create and confirm a PaymentIntent, child key "payment_intent"
//	  │ tx: record it as intentDecision says (succeeded, with payment.succeeded
//	  │     and the receipt staged; or requires_capture; or, for a status the
//	  │     service does not act on, nothing: the payment stays processing
//	  │     until a webhook settles it); a decline, 3-D Secure included, is
//	  │     final: the payment is failed, payment.failed is staged, 402 is
//	  │     stored. The payment moved is the one the claim handed off
//	  │     (paymentInserted), moved unread; or, resumed or changed
//	  │     meanwhile, read under a lock (paymentToMove)
//	  ▼
//	payment_intent_created
//	  │ tx: store 201 (the same transaction as the record: no call between)
//	  ▼
//	finished
//
// What a new payment costs: two transactions (the claim's, with the
// payment's insert; the record's, with the answer), each one round trip,
// since neither reads anything back before its COMMIT: the payment is
// handed from one phase to the next (paymentInserted, paymentRecorded)
// instead of read again. internal/payments/roundtrips_test.go pins it.
const (
	PaymentCreated       recovery.RecoveryPoint = "payment_created"
	PaymentIntentCreated recovery.RecoveryPoint = "payment_intent_created"
	stepPaymentIntent                           = "payment_intent" // the Stripe call, its child key and failpoint
)

// CreateParams are the parameters of POST /v1/payments, stored with the key.
type CreateParams struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Capture       bool              `json:"capture"`
	Description   *string           `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// Create runs the create-payment flow for req.
func (s *Service) Create(ctx context.Context, req KeyedRequest, p CreateParams) (recovery.Response, error) {
	return s.execute(ctx, req, s.create, p)
}

// CreatePaymentIntentFunc is the create flow's one Stripe call:
// stripeclient.Client.CreatePaymentIntent, unless WithCreatePaymentIntent.
type CreatePaymentIntentFunc func(ctx context.Context, childKey string, r stripeclient.PaymentIntentRequest) (*stripe.PaymentIntent, error)

func (s *Service) createFlow() *recovery.Flow {
	return s.flow("create_payment",
		recovery.From(recovery.Started, recovery.LocalPhase(s.insertPayment),
			PaymentCreated),
		recovery.From(PaymentCreated, recovery.WithReconcile(
			recovery.ExternalPhase(stepPaymentIntent, s.createPaymentIntent, s.recordPaymentIntent), s.findPaymentIntent),
			PaymentIntentCreated, recovery.Finished), // Finished: a decline, stored
		recovery.From(PaymentIntentCreated, recovery.LocalPhase(s.finishCreate),
			recovery.Finished),
	)
}

// The payment, handed from phase to phase within an attempt (see
// recovery.Handoff: a resumed attempt, or a transaction run again, reads
// it instead).
var (
	// paymentInserted is the payment as the claim's transaction inserted
	// it: the Stripe call takes its id, and the record of Stripe's answer
	// moves it without reading it (applyMoveUnread).
	paymentInserted = recovery.NewHandoff[Payment]("payment as inserted")
	// paymentRecorded is the payment as the record of Stripe's answer left
	// it: the answer, in the same transaction, renders it.
	paymentRecorded = recovery.NewHandoff[Payment]("payment as recorded")
)

// insertPayment: started -> payment_created. Nothing is read back, so the
// whole claim (key, payment, audit record, the key's move) reaches the
// database in one round trip, with its COMMIT.
func (s *Service) insertPayment(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p CreateParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	pay := Payment{
		ID: ids.New("pay"), UserID: k.UserID, Amount: p.Amount, Currency: p.Currency, Status: StatusProcessing,
		PaymentMethod: p.PaymentMethod, Capture: p.Capture, Description: p.Description, Metadata: nonNil(p.Metadata),
		// Created when its request was claimed, to the microsecond that
		// PostgreSQL keeps, so that the handed-off payment is the stored one.
		Created: k.Created.Truncate(time.Microsecond),
	}
	metadata, err := json.Marshal(pay.Metadata)
	if err != nil {
		return recovery.Outcome{}, err
	}
	err = queries.InsertPayment(ctx, tx.Queued(), dbsqlc.InsertPaymentParams{
		ID: pay.ID, UserID: pay.UserID, Amount: pay.Amount, Currency: pay.Currency, Capture: p.Capture,
		PaymentMethod: pay.PaymentMethod, Description: toText(pay.Description), Metadata: metadata, IdempotencyKeyID: keyID(k),
		CreatedAt: pay.Created,
	})
	if err != nil {
		return recovery.Outcome{}, err
	}
	if err := audit(ctx, tx, k, "payment.created", pay.ID, p); err != nil {
		return recovery.Outcome{}, err
	}
	paymentInserted.Give(k, pay)
	return recovery.Next(PaymentCreated), nil
}

// intentResult is what Stripe answered: a PaymentIntent, a decline, or
// another final refusal (an unknown payment method, say).
type intentResult struct {
	intent  *stripe.PaymentIntent
	decline *stripeclient.Decline
	refusal error
}

// createPaymentIntent: the Stripe call of payment_created. The request's
// parameters are the payment's; only its id may need reading.
func (s *Service) createPaymentIntent(ctx context.Context, k *recovery.Key) (intentResult, error) {
	var p CreateParams
	if err := k.DecodeParams(&p); err != nil {
		return intentResult{}, err
	}
	id, err := s.paymentIDOf(ctx, k)
	if err != nil {
		return intentResult{}, err
	}
	pi, err := s.createIntent(ctx, k.ChildKey(stepPaymentIntent), stripeclient.PaymentIntentRequest{
		Amount: p.Amount, Currency: p.Currency, PaymentMethod: p.PaymentMethod, CaptureManually: !p.Capture,
		Description: deref(p.Description),
		// The completer finds this PaymentIntent by these if it must reconcile.
		Metadata: map[string]string{"payment": id, "idempotency_key_id": k.ID.String()},
	})
	return classifyIntent(pi, err)
}

// stripeClockSkew is how far Stripe's clock, which stamps a PaymentIntent's
// created, may be from the engine's, which stamps the key's call windows
// (the database's now(): recovery.CallWindow). Both are kept to true time
// by NTP, which slews a clock that is off by less than 128 ms and steps one
// that is off by more (ntpd's step threshold): two synchronised clocks
// differ by a fraction of a second. Stripe's created is in whole seconds,
// which ListPaymentIntentsByMetadata allows for by taking both bounds to
// their second. Ten seconds leaves room for a host whose synchronisation
// failed a few days ago (an unsynchronised quartz clock drifts some tens of
// parts per million, one to four seconds a day). Stripe's own libraries
// allow 300 s between Stripe's clock and a merchant's on a webhook's
// signature (stripe-go's webhook.DefaultTolerance), but that tolerance
// is mostly for a delivery's delay and its retries, not for clocks. What
// the margin costs: twice its length of everybody's PaymentIntents, read
// once per window (at 100 PaymentIntents a second, 20 pages of 100); what
// a clock further off than that costs: a PaymentIntent of ours made at the
// window's very edge is not found, the engine moves on to a new child key,
// and the reconciler finds the first one in Stripe's event log and refunds
// it as a duplicate charge (duplicate.go).
const stripeClockSkew = 10 * time.Second

// findPaymentIntent: for a key too old to call Stripe again, or whose child
// key Stripe reports spent, the PaymentIntent it made, found by the key's id
// in its metadata (the same for every generation of the child key). It
// reads Stripe's list of PaymentIntents, which shows one as soon as it is
// made, so "none" is true when it answers. The list cannot be filtered by
// metadata, so it is narrowed in time instead: to the minutes in which one
// of the key's own attempts may have had Stripe make it (its call windows,
// which the engine gives: recovery.CallWindow), each widened by
// stripeClockSkew. A key retried for hours reads the minutes of its
// attempts, not hours of everybody's PaymentIntents.
func (s *Service) findPaymentIntent(ctx context.Context, k *recovery.Key) (intentResult, bool, error) {
	windows, err := intentWindows(k)
	if err != nil {
		return intentResult{}, false, err
	}
	for _, w := range windows {
		found, err := s.stripe.ListPaymentIntentsByMetadata(ctx, w.From, w.To, "idempotency_key_id", k.ID.String())
		if err != nil {
			return intentResult{}, false, recovery.Transient(err)
		}
		for _, pi := range found {
			switch {
			case pi.Status == stripe.PaymentIntentStatusRequiresPaymentMethod && pi.LastPaymentError != nil:
				return intentResult{decline: declineOf(pi)}, true, nil
			case pi.Status == stripe.PaymentIntentStatusRequiresPaymentMethod:
				continue // never confirmed: not what this key's call made
			default:
				return intentResult{intent: pi}, true, nil // recordPaymentIntent decides
			}
		}
	}
	return intentResult{}, false, nil
}

// intentWindows are the spans of Stripe's clock in which a PaymentIntent
// of k's calls may have been created: k's call windows, each widened by
// stripeClockSkew on both sides, merged where they then overlap, oldest
// first.
func intentWindows(k *recovery.Key) ([]recovery.CallWindow, error) {
	windows := k.CallWindows()
	if len(windows) == 0 {
		// The engine gives every reconcile at least the window of the
		// attempt running it; without any, there is nothing to narrow the
		// list to, and reading all of it is what this avoids.
		return nil, fmt.Errorf("payments: reconciling key %s without its call windows", k.ID)
	}
	widened := make([]recovery.CallWindow, 0, len(windows))
	for _, w := range windows {
		widened = append(widened, recovery.CallWindow{From: w.From.Add(-stripeClockSkew), To: w.To.Add(stripeClockSkew)})
	}
	return recovery.MergeCallWindows(widened), nil
}

// declineOf is the decline a PaymentIntent's last_payment_error reports.
func declineOf(pi *stripe.PaymentIntent) *stripeclient.Decline {
	d := &stripeclient.Decline{Code: "payment_failed", Message: "The payment failed.", PaymentIntent: pi.ID}
	if e := pi.LastPaymentError; e != nil {
		d.Code, d.DeclineCode, d.Message = string(e.Code), string(e.DeclineCode), e.Msg
	}
	return d
}

// Stripe answers with a PaymentIntent in one of these statuses; what the
// create flow does with each (intentDecision):
//
//	succeeded                 the payment succeeded, with what Stripe received
//	requires_capture          authorised: requires_capture, if the client
//	                          asked for capture=false; with capture=true the
//	                          service does not act on it (see below), since
//	                          Stripe never answers so for an automatic capture
//	requires_action           the card needs 3-D Secure, which this API cannot
//	                          carry out (Stripe answers this only if it ignored
//	                          error_on_requires_action): failed, declined as
//	                          authentication_required, like Stripe's 402
//	requires_payment_method   the confirmation failed: failed, with the error
//	canceled                  canceled (an authorisation Stripe let lapse, found
//	                          by the completer's reconcile days later, say)
//	processing                Stripe has not decided yet: not acted on
//	requires_confirmation     the confirmation did not happen: not acted on
//
// A status the service does not act on is never recorded as another: the
// payment stays processing (the answer says so), and the webhook that
// reports where the PaymentIntent ends up moves it.
type intentDecision int

const (
	intentNotActedOn intentDecision = iota
	intentSucceeded
	intentAuthorised
	intentFailed
	intentCanceled
)

func decideIntent(pi *stripe.PaymentIntent, capture bool) intentDecision {
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		return intentSucceeded
	case stripe.PaymentIntentStatusRequiresCapture:
		if capture {
			return intentNotActedOn
		}
		return intentAuthorised
	case stripe.PaymentIntentStatusRequiresAction,
		stripe.PaymentIntentStatusRequiresPaymentMethod:
		return intentFailed
	case stripe.PaymentIntentStatusCanceled:
		return intentCanceled
	case stripe.PaymentIntentStatusProcessing,
		stripe.PaymentIntentStatusRequiresConfirmation:
		return intentNotActedOn
	default: // a status newer than this code
		return intentNotActedOn
	}
}

// failureOf is the decline recordPaymentIntent answers for a PaymentIntent
// it decided is failed.
func failureOf(pi *stripe.PaymentIntent) *stripeclient.Decline {
	switch pi.Status {
	case stripe.PaymentIntentStatusRequiresAction:
		return &stripeclient.Decline{Code: "authentication_required", DeclineCode: "authentication_required",
			Message: "Your card was declined. This transaction requires authentication.", PaymentIntent: pi.ID}
	default:
		return declineOf(pi)
	}
}

func classifyIntent(pi *stripe.PaymentIntent, err error) (intentResult, error) {
	switch {
	case err == nil:
		return intentResult{intent: pi}, nil
	case stripeclient.Classify(err) == stripeclient.Transient:
		return intentResult{}, UnfinishedStripeCall(err)
	}
	if d, ok := stripeclient.AsDecline(err); ok {
		return intentResult{decline: &d}, nil
	}
	return intentResult{refusal: err}, nil
}

// recordPaymentIntent: payment_created -> payment_intent_created, or finished on a decline.
func (s *Service) recordPaymentIntent(ctx context.Context, tx *db.Tx, k *recovery.Key, res intentResult) (recovery.Outcome, error) {
	move, err := paymentToMove(ctx, tx, k)
	if err != nil {
		return recovery.Outcome{}, err
	}
	if res.intent == nil {
		return failPayment(ctx, tx, k, move, res)
	}
	var p CreateParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	var t transition
	switch decideIntent(res.intent, p.Capture) {
	case intentSucceeded:
		t = transition{to: StatusSucceeded, intent: res.intent.ID, amountCaptured: res.intent.AmountReceived}
	case intentAuthorised:
		t = transition{to: StatusRequiresCapture, intent: res.intent.ID}
	case intentCanceled:
		t = transition{to: StatusCanceled, intent: res.intent.ID}
	case intentFailed:
		return failPayment(ctx, tx, k, move, intentResult{decline: failureOf(res.intent)})
	case intentNotActedOn:
		return leavePayment(ctx, tx, k, res.intent)
	}
	// A webhook may have made the move already; then it staged the event.
	pay, err := move.apply(t)
	if err != nil {
		return recovery.Outcome{}, err
	}
	if pay.StripePaymentIntent != nil && *pay.StripePaymentIntent != res.intent.ID {
		// Stripe made another PaymentIntent for this payment, whose event
		// came first and was recorded (a late 500's request, executed after
		// this attempt's): this one is the second, and if it charged, a
		// duplicate charge to refund (duplicate.go).
		if _, err := applyOtherIntentTx(ctx, tx, pay, res.intent); err != nil {
			return recovery.Outcome{}, err
		}
	}
	if err := audit(ctx, tx, k, "payment."+string(t.to), pay.ID, map[string]string{"payment_intent": res.intent.ID}); err != nil {
		return recovery.Outcome{}, err
	}
	paymentRecorded.Give(k, pay)
	return recovery.Next(PaymentIntentCreated), nil
}

// leavePayment records that Stripe answered a status the service does not
// act on ("processing", say): the payment is not moved (it stays
// processing, unless a webhook moved it meanwhile), but it keeps the
// PaymentIntent at once, so that the webhook, or Stripe's event log, that
// says where the PaymentIntent ends up finds it, and it is one the service
// is unsure of (payments_awaiting_stripe): the reconciler retrieves it
// should the log not have moved it a while later. The answer shows the
// payment as it stands, read under its lock.
func leavePayment(ctx context.Context, tx *db.Tx, k *recovery.Key, pi *stripe.PaymentIntent) (recovery.Outcome, error) {
	row, err := queries.LockPaymentByIdempotencyKey(ctx, tx, keyID(k))
	if err != nil {
		return recovery.Outcome{}, err
	}
	pay, err := fromRow(row)
	if err != nil {
		return recovery.Outcome{}, err
	}
	if pay.Status == StatusProcessing {
		if err := queries.AwaitStripe(ctx, tx, dbsqlc.AwaitStripeParams{PaymentID: pay.ID, StripePaymentIntent: textOrNull(pi.ID)}); err != nil {
			return recovery.Outcome{}, err
		}
		if pay.StripePaymentIntent == nil {
			pay.StripePaymentIntent = &pi.ID
		}
	}
	if err := audit(ctx, tx, k, "payment.not_acted_on", pay.ID,
		map[string]string{"payment_intent": pi.ID, "payment_intent_status": string(pi.Status)}); err != nil {
		return recovery.Outcome{}, err
	}
	paymentRecorded.Give(k, pay)
	return recovery.Next(PaymentIntentCreated), nil
}

// failPayment records a final refusal from Stripe and answers it: 402 for
// a declined card, 400 for anything else Stripe refused.
func failPayment(ctx context.Context, tx *db.Tx, k *recovery.Key, move paymentMove, res intentResult) (recovery.Outcome, error) {
	paymentID := move.pay.ID
	t := transition{to: StatusFailed}
	var answer *problem.Problem
	if d := res.decline; d != nil {
		t.failureCode, t.failureMessage, t.intent = d.DeclineCode, d.Message, d.PaymentIntent
		if t.failureCode == "" {
			t.failureCode = d.Code
		}
		answer = problem.New(http.StatusPaymentRequired, problem.CardDeclined, "%s", d.Message)
		answer.DeclineCode, answer.Payment = t.failureCode, paymentID
	} else {
		t.failureCode, t.failureMessage = "payment_refused", StripeMessage(res.refusal)
		var se *stripe.Error
		if errors.As(res.refusal, &se) && se.Code != "" {
			t.failureCode = string(se.Code)
		}
		answer = problem.New(http.StatusBadRequest, problem.ValidationFailed, "The payment processor refused the payment: %s", t.failureMessage)
		answer.Payment = paymentID
	}
	if _, err := move.apply(t); err != nil {
		return recovery.Outcome{}, err
	}
	if err := audit(ctx, tx, k, "payment.failed", paymentID, map[string]string{"failure_code": t.failureCode}); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Respond(answer.Status, answer.JSON()), nil
}

// paymentMove is the payment a create request moves once Stripe has
// answered, and how: apply makes a move t on it.
type paymentMove struct {
	pay   Payment
	apply func(t transition) (Payment, error)
}

// paymentToMove is the payment the create request k made, ready to move:
// the one the claim's transaction handed off, moved unread
// (applyMoveUnread); or else the database's, read under a lock, moved as
// any locked payment (applyMove).
func paymentToMove(ctx context.Context, tx *db.Tx, k *recovery.Key) (paymentMove, error) {
	if pay, ok := paymentInserted.Get(k); ok {
		return paymentMove{pay: pay, apply: func(t transition) (Payment, error) {
			return applyMoveUnread(ctx, tx, k.ID, pay, t)
		}}, nil
	}
	row, err := queries.LockPaymentByIdempotencyKey(ctx, tx, keyID(k))
	if err != nil {
		return paymentMove{}, err
	}
	pay, err := fromRow(row)
	return paymentMove{pay: pay, apply: func(t transition) (Payment, error) {
		moved, _, err := applyMove(ctx, tx, keyID(k), pay, t)
		return moved, err
	}}, err
}

// finishCreate: payment_intent_created -> finished. The events were staged
// with the move they announce; what is left is the answer.
func (s *Service) finishCreate(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	pay, ok := paymentRecorded.Get(k)
	if !ok {
		var err error
		if pay, err = paymentOf(ctx, tx, k); err != nil {
			return recovery.Outcome{}, err
		}
	}
	return recovery.RespondJSON(http.StatusCreated, pay)
}

// paymentIDOf is the id of the payment that the create request k made:
// the one the claim handed off, or else the database's.
func (s *Service) paymentIDOf(ctx context.Context, k *recovery.Key) (string, error) {
	if pay, ok := paymentInserted.Get(k); ok {
		return pay.ID, nil
	}
	pay, err := paymentOf(ctx, s.pool, k)
	return pay.ID, err
}

// paymentOf reads the payment that the create request k made.
func paymentOf(ctx context.Context, conn dbsqlc.DBTX, k *recovery.Key) (Payment, error) {
	row, err := queries.GetPaymentByIdempotencyKey(ctx, conn, keyID(k))
	if err != nil {
		return Payment{}, err
	}
	return fromRow(row)
}
