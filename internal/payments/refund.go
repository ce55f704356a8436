package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/problem"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stagedjobs"
	"github.com/example/payments/internal/stripeclient"
)

// The refund flow, POST /v1/refunds, for a captured payment:
//
//	started
//	  │ tx: lock the payment; unless it is captured and the amount is at most
//	  │     what is left to refund, the answer is final: 400 refund_not_allowed
//	  │     stored (400 payment_disputed for a payment whose dispute is
//	  │     open); else insert the refund (pending: this reserves its amount)
//	  │     and its audit record
//	  │     (a payment still processing fails the phase with
//	  │     ErrPaymentProcessing: 409, and nothing is stored)
//	  ▼
//	refund_created
//	  │ Stripe: refund the PaymentIntent, child key "refund"
//	  │ tx: record it (succeeded: the payment's amount_refunded follows,
//	  │     refund.succeeded and the receipt staged; or pending, settled
//	  │     later by charge.refund.updated or the reconciler: see
//	  │     refund_moves.go); a refusal is final: the refund is failed,
//	  │     refund.failed is staged, 400 refund_not_allowed stored
//	  │     (payment_disputed for Stripe's charge_disputed)
//	  ▼
//	stripe_refund_created
//	  │ tx: store 201 with the refund
//	  ▼
//	finished
//
// What is left to refund is what was captured less the greater of the
// payment's amount_refunded and the sum of its pending and succeeded
// refunds (the latter, since amount_refunded is the sum of the succeeded
// ones). Both are read under the payment's row lock, and the new refund
// is inserted under it, so two refunds with different keys racing for the
// last of a payment can never both get it: the second waits for the lock
// and then counts the first. A failed refund, even one that had succeeded,
// holds nothing.
const (
	RefundCreated       recovery.RecoveryPoint = "refund_created"
	StripeRefundCreated recovery.RecoveryPoint = "stripe_refund_created"
	stepRefund                                 = "refund" // the Stripe call, its child key and failpoint
)

// RefundParams are the parameters of POST /v1/refunds, stored with the key.
type RefundParams struct {
	Payment string `json:"payment"`
	// Amount to refund; 0 refunds what is left when the flow starts.
	Amount int64 `json:"amount,omitempty"`
	// Reason is duplicate, fraudulent, requested_by_customer, or "" for none.
	Reason string `json:"reason,omitempty"`
}

// Refund runs the refund flow for req.
func (s *Service) Refund(ctx context.Context, req KeyedRequest, p RefundParams) (recovery.Response, error) {
	return s.execute(ctx, req, s.refund, p)
}

func (s *Service) refundFlow() *recovery.Flow {
	return s.flow("refund_payment",
		recovery.From(recovery.Started, recovery.LocalPhase(s.insertRefund),
			RefundCreated, recovery.Finished), // Finished: refund_not_allowed, stored
		recovery.From(RefundCreated, recovery.WithReconcile(
			recovery.ExternalPhase(stepRefund, s.createStripeRefund, s.recordStripeRefund), s.findStripeRefund),
			StripeRefundCreated, recovery.Finished), // Finished: a refusal, stored
		recovery.From(StripeRefundCreated, recovery.LocalPhase(s.finishRefund),
			recovery.Finished),
	)
}

// insertRefund: started -> refund_created, or finished when the payment's
// state does not allow the refund.
func (s *Service) insertRefund(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p RefundParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	row, err := queries.GetPaymentForUpdate(ctx, tx, dbsqlc.GetPaymentForUpdateParams{ID: p.Payment, UserID: k.UserID})
	if err != nil {
		return recovery.Outcome{}, err
	}
	pay, err := fromRow(row)
	if err != nil {
		return recovery.Outcome{}, err
	}
	reserved, err := queries.ReservedRefundAmount(ctx, tx, pay.ID)
	if err != nil {
		return recovery.Outcome{}, err
	}
	// A payment still processing may yet be captured: no refusal may be
	// stored for it. Failing here rolls back the claim's transaction, so a
	// new key is not even stored; it is transient, since a retry once the
	// payment is known runs.
	if err := CheckKnown(pay); err != nil {
		return recovery.Outcome{}, recovery.Transient(err)
	}
	left := pay.AmountCaptured - max(pay.AmountRefunded, reserved)
	amount := p.Amount
	if amount == 0 {
		amount = left
	}
	switch {
	case pay.Status != StatusSucceeded || !pay.Captured():
		return refundNotAllowed("Payment %s is %s and has no captured money to refund.%s", pay.ID, pay.Status, cancelHint(pay))
	case pay.Dispute.Open():
		return paymentDisputed("Payment %s is disputed (dispute %s, %s): it cannot be refunded while the customer's bank decides.",
			pay.ID, pay.Dispute.ID, pay.Dispute.Status)
	case left <= 0:
		return refundNotAllowed("Payment %s has nothing left to refund: its refunds hold all %d captured.", pay.ID, pay.AmountCaptured)
	case amount > left:
		return refundNotAllowed("Refund amount %d is more than the %d left to refund on payment %s.", amount, left, pay.ID)
	}
	re, err := queries.InsertRefund(ctx, tx, dbsqlc.InsertRefundParams{
		ID: newRefundID(), UserID: k.UserID, PaymentID: pay.ID, Amount: amount, Reason: textOrNull(p.Reason), IdempotencyKeyID: keyID(k),
	})
	if err != nil {
		return recovery.Outcome{}, err
	}
	if err := auditRefund(ctx, tx, k, "refund.created", fromRefundRow(re), p); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Next(RefundCreated), nil
}

// refundResult is Stripe's answer to a refund: the refund it made, or its
// final refusal (more than is left on the charge, say).
type refundResult struct {
	refund  *stripe.Refund
	refusal string
	// disputed: Stripe refused it because the charge was disputed
	// (charge_disputed), a dispute the service did not know of yet.
	disputed bool
}

// createStripeRefund: the Stripe call of refund_created. The amount is the
// refund row's, fixed when the flow started, so every attempt sends the
// same parameters under the same child key.
func (s *Service) createStripeRefund(ctx context.Context, k *recovery.Key) (refundResult, error) {
	re, err := refundOf(ctx, s.pool, k)
	if err != nil {
		return refundResult{}, err
	}
	pay, err := Get(ctx, s.pool, k.UserID, re.Payment)
	if err != nil {
		return refundResult{}, err
	}
	if pay.StripePaymentIntent == nil { // never so for a captured payment; checked all the same
		return refundResult{refusal: fmt.Sprintf("Payment %s has no PaymentIntent to refund.", pay.ID)}, nil
	}
	sr, err := s.stripe.CreateRefund(ctx, k.ChildKey(stepRefund), stripeclient.RefundRequest{
		PaymentIntent: *pay.StripePaymentIntent, Amount: re.Amount, Reason: deref(re.Reason),
		Metadata: map[string]string{"refund": re.ID, "idempotency_key_id": k.ID.String()},
	})
	switch {
	case err == nil:
		return refundResult{refund: sr}, nil
	case stripeclient.Classify(err) == stripeclient.Transient:
		return refundResult{}, UnfinishedStripeCall(err)
	case k.ChildKeyGeneration(stepRefund) > 0:
		// Refused under a later child key: an earlier attempt, whose 500
		// Stripe executed late, may have taken what was left, and then
		// this refusal is of our second attempt, not of our refund. Stripe's
		// refund for this request, if there is one, is the outcome; a
		// refusal recorded over it would say failed where Stripe refunded.
		if found, ok, ferr := s.findStripeRefund(ctx, k); ferr != nil || ok {
			return found, ferr
		}
	}
	var se *stripe.Error
	disputed := errors.As(err, &se) && se.Code == stripe.ErrorCodeChargeDisputed
	return refundResult{refusal: StripeMessage(err), disputed: disputed}, nil
}

// findStripeRefund: for a key too old to call Stripe again, or whose child
// key Stripe reports spent, the refund it made: among the refunds of the
// payment's PaymentIntent, the one whose metadata carries this key's id
// (the same for every generation of the child key). Stripe lists a refund
// as soon as it is made, so nothing found means nothing made. The list is
// narrowed by the PaymentIntent already (a handful of refunds at most):
// unlike the create flow's list of every PaymentIntent, it needs no call
// windows (recovery.CallWindow) to stay small.
func (s *Service) findStripeRefund(ctx context.Context, k *recovery.Key) (refundResult, bool, error) {
	re, err := refundOf(ctx, s.pool, k)
	if err != nil {
		return refundResult{}, false, err
	}
	pay, err := Get(ctx, s.pool, k.UserID, re.Payment)
	if err != nil || pay.StripePaymentIntent == nil {
		return refundResult{}, false, err
	}
	refunds, err := s.stripe.ListRefunds(ctx, *pay.StripePaymentIntent)
	if err != nil {
		return refundResult{}, false, recovery.Transient(err)
	}
	for _, sr := range refunds {
		if sr.Metadata["idempotency_key_id"] == k.ID.String() {
			return refundResult{refund: sr}, true, nil
		}
	}
	return refundResult{}, false, nil
}

// recordStripeRefund: refund_created -> stripe_refund_created, or finished
// when Stripe refused the refund.
func (s *Service) recordStripeRefund(ctx context.Context, tx *db.Tx, k *recovery.Key, res refundResult) (recovery.Outcome, error) {
	re, err := refundOf(ctx, tx, k)
	if err != nil {
		return recovery.Outcome{}, err
	}
	// Payment first, then refund: the order the flow's first phase takes them in.
	pay, err := lockPayment(ctx, tx, re.Payment)
	if err != nil {
		return recovery.Outcome{}, err
	}
	row, err := queries.LockRefund(ctx, tx, re.ID)
	if err != nil {
		return recovery.Outcome{}, err
	}
	re = fromRefundRow(row)
	if res.refund == nil {
		return failRefund(ctx, tx, k, pay, re, res.refusal, res.disputed)
	}
	if isSecondRefund(re, res.refund) {
		// Stripe's answer is a second refund: the first, made by an
		// earlier attempt of this request that Stripe executed late, was
		// recorded first (by its event). The answer becomes a refund of
		// origin duplicate, and ours answers as it stands.
		if _, err := applyStripeRefundTx(ctx, tx, pay, res.refund); err != nil {
			return recovery.Outcome{}, err
		}
		return recovery.Next(StripeRefundCreated), nil
	}
	// A webhook may have made the move already (then it staged the event),
	// or a later one: a pending answer does not undo a settled refund. A
	// pending refund is announced when Stripe settles it, not now.
	re, _, err = moveRefundTx(ctx, tx, keyID(k), pay, re, fromStripeRefund(res.refund))
	if err != nil {
		return recovery.Outcome{}, err
	}
	if err := auditRefund(ctx, tx, k, "refund."+string(re.Status), re, map[string]string{"stripe_refund": res.refund.ID}); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Next(StripeRefundCreated), nil
}

// failRefund records Stripe's final refusal: the refund is failed, which
// frees its amount, and the answer is 400 refund_not_allowed.
func failRefund(ctx context.Context, tx *db.Tx, k *recovery.Key, pay Payment, re Refund, refusal string, disputed bool) (recovery.Outcome, error) {
	re, _, err := moveRefundTx(ctx, tx, keyID(k), pay, re, refundMove{to: RefundFailed, failureReason: refusal})
	if err != nil {
		return recovery.Outcome{}, err
	}
	if err := auditRefund(ctx, tx, k, "refund.failed", re, map[string]string{"failure_reason": refusal}); err != nil {
		return recovery.Outcome{}, err
	}
	if disputed {
		return paymentDisputed("The payment processor refused refund %s of payment %s: the payment was disputed (%s)", re.ID, re.Payment, refusal)
	}
	return refundNotAllowed("The payment processor refused refund %s of payment %s: %s", re.ID, re.Payment, refusal)
}

// paymentDisputed is the final answer to a refund of a disputed payment:
// the customer's bank is taking the money back, and Stripe refuses refunds
// meanwhile (charge_disputed).
func paymentDisputed(format string, args ...any) (recovery.Outcome, error) {
	answer := problem.New(http.StatusBadRequest, problem.PaymentDisputed, format, args...)
	return recovery.Respond(answer.Status, answer.JSON()), nil
}

// finishRefund: stripe_refund_created -> finished. The events were staged
// with the change they announce; what is left is the answer.
func (s *Service) finishRefund(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	re, err := refundOf(ctx, tx, k)
	if err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.RespondJSON(http.StatusCreated, re)
}

// refundNotAllowed is the final answer to a refund the payment's state, or
// Stripe, does not allow.
func refundNotAllowed(format string, args ...any) (recovery.Outcome, error) {
	answer := problem.New(http.StatusBadRequest, problem.RefundNotAllowed, format, args...)
	return recovery.Respond(answer.Status, answer.JSON()), nil
}

// cancelHint tells the client what to do instead with an authorisation.
func cancelHint(pay Payment) string {
	if pay.Status == StatusRequiresCapture {
		return " Cancel it to release the authorisation."
	}
	return ""
}

// refundOf finds the refund that the refund request k made.
func refundOf(ctx context.Context, db dbsqlc.DBTX, k *recovery.Key) (Refund, error) {
	row, err := queries.GetRefundByIdempotencyKey(ctx, db, keyID(k))
	if err != nil {
		return Refund{}, err
	}
	return fromRefundRow(row), nil
}

// refundReceiptJob is the customer's receipt for a succeeded refund.
func refundReceiptJob(pay Payment, re Refund) stagedjobs.Job {
	return stagedjobs.Job{Kind: stagedjobs.ReceiptEmail, Args: stagedjobs.ReceiptArgs{
		UserID: pay.UserID, Payment: pay.ID, Amount: re.Amount, Currency: pay.Currency, Reason: "refund", Refund: re.ID,
	}}
}

// auditRefund records an action of the request k on a refund, inside tx,
// queued like audit's.
func auditRefund(ctx context.Context, tx *db.Tx, k *recovery.Key, action string, re Refund, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return queries.InsertAuditRecord(ctx, tx.Queued(), dbsqlc.InsertAuditRecordParams{
		UserID: k.UserID, Action: action, ResourceType: "refund", ResourceID: re.ID, Data: raw, IdempotencyKeyID: keyID(k),
	})
}
