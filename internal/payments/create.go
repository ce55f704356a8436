package payments

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
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
//	  │     stored. The payment is
//	  │     the one the claim carried, moved only if it is unchanged, or
//	  │     (resumed, or changed meanwhile) read under a lock: heldPayment
//	  ▼
//	payment_intent_created
//	  │ tx: store 201
//	  ▼
//	finished
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
func (s *Service) Create(ctx context.Context, req Idempotent, p CreateParams) (recovery.Response, error) {
	return s.execute(ctx, req, s.create, p)
}

func (s *Service) createFlow() *recovery.Flow {
	return &recovery.Flow{Name: "create_payment", Phases: map[recovery.RecoveryPoint]recovery.Phase{
		recovery.Started: recovery.LocalPhase(s.insertPayment),
		PaymentCreated: recovery.WithSearchReconcile(
			recovery.ExternalPhase(stepPaymentIntent, s.createPaymentIntent, s.recordPaymentIntent),
			s.findPaymentIntent),
		PaymentIntentCreated: recovery.LocalPhase(s.finishCreate),
	}}
}

// insertPayment: started -> payment_created. Nothing is read back, so the
// whole claim (key, payment, audit record, the key's move) reaches the
// database in one round trip, with its COMMIT. The payment is carried, as
// written, to the record phase.
func (s *Service) insertPayment(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p CreateParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	pay := Payment{
		ID: newPaymentID(), UserID: k.UserID, Amount: p.Amount, Currency: p.Currency, Status: StatusProcessing,
		PaymentMethod: p.PaymentMethod, Capture: p.Capture, Description: p.Description, Metadata: nonNil(p.Metadata),
		// Created when its request was claimed, to the microsecond that
		// PostgreSQL keeps, so that the carried payment is the stored one.
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
	k.Carry = claimedPayment{pay}
	return recovery.Next(PaymentCreated), nil
}

// claimedPayment is the payment as the claim wrote it, carried to the
// record phase (which then carries the payment as it recorded it, a
// Payment, to the answer).
type claimedPayment struct{ Payment }

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
	pi, err := s.stripe.CreatePaymentIntent(ctx, k.ChildKey(stepPaymentIntent), stripeclient.PaymentIntentRequest{
		Amount: p.Amount, Currency: p.Currency, PaymentMethod: p.PaymentMethod, CaptureManually: !p.Capture,
		Description: deref(p.Description),
		// The completer finds this PaymentIntent by these if it must reconcile.
		Metadata: map[string]string{"payment": id, "idempotency_key_id": k.ID.String()},
	})
	return classifyIntent(pi, err)
}

// findPaymentIntent: for a key too old to call Stripe again, or whose child
// key Stripe reports spent, the PaymentIntent it made, found by the key's id
// in its metadata (the same for every generation of the child key). It
// searches, and Stripe's search lags: the engine waits before trusting that
// nothing was found.
func (s *Service) findPaymentIntent(ctx context.Context, k *recovery.Key) (intentResult, bool, error) {
	found, err := s.stripe.SearchPaymentIntentsByMetadata(ctx, "idempotency_key_id", k.ID.String())
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
	return intentResult{}, false, nil
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
		return intentResult{}, unfinishedCall(err)
	}
	if d, ok := stripeclient.AsDecline(err); ok {
		return intentResult{decline: &d}, nil
	}
	return intentResult{refusal: err}, nil
}

// recordPaymentIntent: payment_created -> payment_intent_created, or finished on a decline.
func (s *Service) recordPaymentIntent(ctx context.Context, tx *db.Tx, k *recovery.Key, res intentResult) (recovery.Outcome, error) {
	held, err := heldPayment(ctx, tx, k)
	if err != nil {
		return recovery.Outcome{}, err
	}
	if res.intent == nil {
		return s.failPayment(ctx, tx, k, held, res)
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
		return s.failPayment(ctx, tx, k, held, intentResult{decline: failureOf(res.intent)})
	case intentNotActedOn:
		return s.leavePayment(ctx, tx, k, held, res.intent)
	}
	// A webhook may have made the move already; then it staged the event.
	pay, err := held.move(ctx, tx, k, t)
	if err != nil {
		return recovery.Outcome{}, err
	}
	if err := audit(ctx, tx, k, "payment."+string(t.to), pay.ID, map[string]string{"payment_intent": res.intent.ID}); err != nil {
		return recovery.Outcome{}, err
	}
	k.Carry = pay
	return recovery.Next(PaymentIntentCreated), nil
}

// leavePayment records that Stripe answered a status the service does not
// act on: the payment is not moved (it stays processing, unless a webhook
// moved it meanwhile), and the answer shows it as it stands.
func (s *Service) leavePayment(ctx context.Context, tx *db.Tx, k *recovery.Key, h held, pi *stripe.PaymentIntent) (recovery.Outcome, error) {
	pay := h.pay
	if h.carried { // the copy may be stale: read it under the lock
		row, err := queries.LockPaymentByIdempotencyKey(ctx, tx, keyID(k))
		if err != nil {
			return recovery.Outcome{}, err
		}
		if pay, err = fromRow(row); err != nil {
			return recovery.Outcome{}, err
		}
	}
	if err := audit(ctx, tx, k, "payment.not_acted_on", pay.ID,
		map[string]string{"payment_intent": pi.ID, "payment_intent_status": string(pi.Status)}); err != nil {
		return recovery.Outcome{}, err
	}
	k.Carry = pay
	return recovery.Next(PaymentIntentCreated), nil
}

// failPayment records a final refusal from Stripe and answers it: 402 for
// a declined card, 400 for anything else Stripe refused.
func (s *Service) failPayment(ctx context.Context, tx *db.Tx, k *recovery.Key, h held, res intentResult) (recovery.Outcome, error) {
	pay := h.pay
	t := transition{to: StatusFailed}
	var answer *problem.Problem
	if d := res.decline; d != nil {
		t.failureCode, t.failureMessage, t.intent = d.DeclineCode, d.Message, d.PaymentIntent
		if t.failureCode == "" {
			t.failureCode = d.Code
		}
		answer = problem.New(http.StatusPaymentRequired, problem.CardDeclined, "%s", d.Message)
		answer.DeclineCode, answer.Payment = t.failureCode, pay.ID
	} else {
		t.failureCode, t.failureMessage = "payment_refused", stripeMessage(res.refusal)
		var se *stripe.Error
		if errors.As(res.refusal, &se) && se.Code != "" {
			t.failureCode = string(se.Code)
		}
		answer = problem.New(http.StatusBadRequest, problem.ValidationFailed, "The payment processor refused the payment: %s", t.failureMessage)
		answer.Payment = pay.ID
	}
	pay, err := h.move(ctx, tx, k, t)
	if err != nil {
		return recovery.Outcome{}, err
	}
	if err := audit(ctx, tx, k, "payment.failed", pay.ID, map[string]string{"failure_code": t.failureCode}); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Respond(answer.Status, answer.JSON()), nil
}

// held is the payment a create request moves once Stripe has answered.
type held struct {
	pay     Payment
	carried bool // carried from the claim, not locked
}

// heldPayment is the payment the create request k made, to move: the one
// its claim carried, as written, when this attempt made it (no read, no
// lock: the move applies only if the payment is unchanged, see
// moveTx), or else the database's, read under a lock. The
// claimed payment is used once: a transaction that runs again, after a
// serialization failure, locks the payment.
func heldPayment(ctx context.Context, tx *db.Tx, k *recovery.Key) (held, error) {
	if c, ok := k.Carry.(claimedPayment); ok {
		k.Carry = nil
		return held{pay: c.Payment, carried: true}, nil
	}
	row, err := queries.LockPaymentByIdempotencyKey(ctx, tx, keyID(k))
	if err != nil {
		return held{}, err
	}
	pay, err := fromRow(row)
	return held{pay: pay}, err
}

// move makes the move t, if the payment's life allows it, and returns the
// payment as it then stands.
func (h held) move(ctx context.Context, tx *db.Tx, k *recovery.Key, t transition) (Payment, error) {
	pay, _, err := moveTx(ctx, tx, keyID(k), h.pay, t, h.carried)
	return pay, err
}

// finishCreate: payment_intent_created -> finished. The events were staged
// with the move they announce; what is left is the answer.
func (s *Service) finishCreate(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	pay, err := s.paymentOf(ctx, tx, k)
	if err != nil {
		return recovery.Outcome{}, err
	}
	return respond(http.StatusCreated, pay)
}

// paymentIDOf is the id of the payment that the create request k made: the
// one an earlier phase of this attempt carried, or else the database's.
func (s *Service) paymentIDOf(ctx context.Context, k *recovery.Key) (string, error) {
	switch c := k.Carry.(type) {
	case claimedPayment:
		return c.ID, nil
	case Payment:
		return c.ID, nil
	}
	pay, err := s.paymentOf(ctx, s.pool, k)
	return pay.ID, err
}

// paymentOf is the payment that the create request k made: the one the
// record phase of this attempt carried, or else the database's.
func (s *Service) paymentOf(ctx context.Context, conn dbsqlc.DBTX, k *recovery.Key) (Payment, error) {
	if pay, ok := k.Carry.(Payment); ok {
		return pay, nil
	}
	row, err := queries.GetPaymentByIdempotencyKey(ctx, conn, keyID(k))
	if err != nil {
		return Payment{}, err
	}
	return fromRow(row)
}
