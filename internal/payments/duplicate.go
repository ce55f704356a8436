package payments

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
	"github.com/example/payments/internal/ids"
	"github.com/example/payments/internal/recovery"
	"github.com/example/payments/internal/stripeclient"
)

// Stripe's evidence is never dropped (docs/API.md section 2). After a
// stored 500 the service may, past its grace, charge under a new child
// key; should Stripe still execute the first attempt later, Stripe holds
// two PaymentIntents that charged the customer for one payment. The one the
// payment recorded stays; the other is a duplicate charge, which the
// service refunds in full, once, with the flow refund_duplicate_charge:
//
//	(an event about a PaymentIntent whose metadata names the payment, not
//	 the one recorded, that succeeded)
//	  │ tx, the event's: the payment's duplicate_charges gets the
//	  │     PaymentIntent (refund_pending), and a key of the payment's
//	  │     owner named after the PaymentIntent ("payments:duplicate_charge:pi_...",
//	  │     DuplicateChargeKey) is inserted for the flow, at started, held by
//	  │     nobody: the completer drives it
//	  ▼
//	started
//	  │ Stripe: refund the duplicate PaymentIntent in full, child key
//	  │ "refund_duplicate" (of the key row: one per PaymentIntent)
//	  │ tx: the entry becomes refunded (payment.duplicate_refunded staged),
//	  │     refund_pending (Stripe answered pending; its later
//	  │     charge.refund.updated settles it) or refund_failed
//	  ▼
//	duplicate_refunded
//	  │ tx: store 200 with the payment
//	  ▼
//	finished
//
// Once: the entry and the key are written under the payment's row lock,
// in the transaction that applies the event, so the event delivered twice,
// read from Stripe's log as well, or applied by two instances at once
// finds the entry and does nothing; and the key's name is unique per user,
// its child key per key, so the refund is asked of Stripe under one
// idempotency key however often the flow is driven.
const (
	DuplicateRefunded       recovery.RecoveryPoint = "duplicate_refunded"
	stepRefundDuplicate                            = "refund_duplicate" // the Stripe call, its child key and failpoint
	duplicateKeyPrefix                             = "payments duplicate_charge "
	refundDuplicateFlow                            = "refund_duplicate_charge"
	refundDuplicatePath                            = "/internal/duplicate_charges/refund"
	duplicateChargeMetadata                        = "duplicate_charge" // on the refund: the PaymentIntent it refunds
)

// DuplicateCharge is a PaymentIntent Stripe made for a payment beyond the
// one recorded: the API's duplicate_charges entry.
type DuplicateCharge struct {
	StripePaymentIntent string                `json:"stripe_payment_intent"`
	Amount              int64                 `json:"amount"`
	Status              DuplicateChargeStatus `json:"status"`
}

// DuplicateChargeStatus is where the refund of a duplicate charge stands.
type DuplicateChargeStatus string

// The statuses of a duplicate charge.
const (
	DuplicateRefundPending DuplicateChargeStatus = "refund_pending"
	DuplicateRefundedFully DuplicateChargeStatus = "refunded"
	DuplicateRefundFailed  DuplicateChargeStatus = "refund_failed"
)

// DuplicateChargeKey is the name of the key whose flow refunds the
// duplicate PaymentIntent pi. It holds spaces, which no client's key may
// (docs/API.md: 1 to 255 visible ASCII characters, %x21-7E): a merchant
// that sent a key of the same name would otherwise take its place, and the
// duplicate charge would never be refunded.
func DuplicateChargeKey(pi string) string { return duplicateKeyPrefix + pi }

// duplicateParams are the flow's parameters, stored with its key.
type duplicateParams struct {
	Payment             string `json:"payment"`
	StripePaymentIntent string `json:"stripe_payment_intent"`
	Amount              int64  `json:"amount"`
}

func (s *Service) refundDuplicateFlow() *recovery.Flow {
	return s.flow(refundDuplicateFlow,
		recovery.From(recovery.Started, recovery.WithReconcile(
			recovery.ExternalPhase(stepRefundDuplicate, s.refundDuplicateCharge, s.recordDuplicateRefund), s.findDuplicateRefund),
			DuplicateRefunded),
		recovery.From(DuplicateRefunded, recovery.LocalPhase(s.finishDuplicateRefund),
			recovery.Finished),
	)
}

// noteDuplicateChargeTx records that Stripe's PaymentIntent pi, which is
// not the one pay (locked by the caller in tx) recorded, charged the
// customer for it, and starts its refund, unless it is known already. It
// tells whether it was new.
func noteDuplicateChargeTx(ctx context.Context, tx *db.Tx, pay Payment, pi *stripe.PaymentIntent) (bool, error) {
	for _, d := range pay.DuplicateCharges {
		if d.StripePaymentIntent == pi.ID {
			return false, nil
		}
	}
	amount := pi.AmountReceived
	charges := append(pay.DuplicateCharges, DuplicateCharge{StripePaymentIntent: pi.ID, Amount: amount, Status: DuplicateRefundPending})
	raw, err := json.Marshal(charges)
	if err != nil {
		return false, err
	}
	if err := queries.SetDuplicateCharges(ctx, tx.Queued(), dbsqlc.SetDuplicateChargesParams{ID: pay.ID, DuplicateCharges: raw}); err != nil {
		return false, err
	}
	params, err := json.Marshal(duplicateParams{Payment: pay.ID, StripePaymentIntent: pi.ID, Amount: amount})
	if err != nil {
		return false, err
	}
	fingerprint, err := recovery.Fingerprint(http.MethodPost, refundDuplicatePath, params)
	if err != nil {
		return false, err
	}
	return true, queries.InsertUnheldKey(ctx, tx.Queued(), dbsqlc.InsertUnheldKeyParams{
		ID: ids.NewUUID(), UserID: pay.UserID, IdempotencyKey: DuplicateChargeKey(pi.ID), Flow: refundDuplicateFlow,
		RequestMethod: http.MethodPost, RequestPath: refundDuplicatePath, RequestParams: params, RequestFingerprint: fingerprint,
	})
}

// duplicateResult is Stripe's answer to the refund of a duplicate charge.
type duplicateResult struct {
	refund  *stripe.Refund
	refusal string // Stripe refused it (nothing left to refund, say)
	// refunded: the refusal says the charge was refunded already
	// (someone refunded it in Stripe's dashboard): the customer has the
	// money back all the same.
	refunded bool
}

// refundDuplicateCharge: the Stripe call of started.
func (s *Service) refundDuplicateCharge(ctx context.Context, k *recovery.Key) (duplicateResult, error) {
	var p duplicateParams
	if err := k.DecodeParams(&p); err != nil {
		return duplicateResult{}, err
	}
	// Never the payment's own PaymentIntent: only one that is not the
	// recorded one is a duplicate (noteDuplicateChargeTx), and a payment's
	// PaymentIntent, once recorded, never changes. Checked all the same.
	pay, err := Get(ctx, s.pool, k.UserID, p.Payment)
	if err != nil {
		return duplicateResult{}, err
	}
	if pay.StripePaymentIntent == nil || *pay.StripePaymentIntent == p.StripePaymentIntent {
		return duplicateResult{}, bug("payment %s: %s is not a duplicate of its PaymentIntent", pay.ID, p.StripePaymentIntent)
	}
	sr, err := s.stripe.CreateRefund(ctx, k.ChildKey(stepRefundDuplicate), stripeclient.RefundRequest{
		PaymentIntent: p.StripePaymentIntent, Reason: string(stripe.RefundReasonDuplicate),
		Metadata: map[string]string{duplicateChargeMetadata: p.StripePaymentIntent, "payment": p.Payment, "idempotency_key_id": k.ID.String()},
	})
	var se *stripe.Error
	switch {
	case err == nil:
		return duplicateResult{refund: sr}, nil
	case stripeclient.Classify(err) == stripeclient.Transient:
		return duplicateResult{}, UnfinishedStripeCall(err)
	case errors.As(err, &se) && se.Code == stripe.ErrorCodeChargeAlreadyRefunded:
		return duplicateResult{refusal: se.Msg, refunded: true}, nil
	default:
		return duplicateResult{refusal: StripeMessage(err)}, nil
	}
}

// findDuplicateRefund: for a key past Stripe's window, or whose child key
// Stripe reports spent, the refund it made, among the duplicate
// PaymentIntent's refunds (Stripe's list is consistent; narrowed by the
// PaymentIntent, it needs no call windows).
func (s *Service) findDuplicateRefund(ctx context.Context, k *recovery.Key) (duplicateResult, bool, error) {
	var p duplicateParams
	if err := k.DecodeParams(&p); err != nil {
		return duplicateResult{}, false, err
	}
	refunds, err := s.stripe.ListRefunds(ctx, p.StripePaymentIntent)
	if err != nil {
		return duplicateResult{}, false, recovery.Transient(err)
	}
	for _, sr := range refunds {
		if sr.Metadata[duplicateChargeMetadata] == p.StripePaymentIntent {
			return duplicateResult{refund: sr}, true, nil
		}
	}
	return duplicateResult{}, false, nil
}

// recordDuplicateRefund: started -> duplicate_refunded.
func (s *Service) recordDuplicateRefund(ctx context.Context, tx *db.Tx, k *recovery.Key, res duplicateResult) (recovery.Outcome, error) {
	var p duplicateParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	pay, err := lockPayment(ctx, tx, p.Payment)
	if err != nil {
		return recovery.Outcome{}, err
	}
	status := DuplicateRefundFailed
	switch {
	case res.refund != nil:
		status = duplicateStatus(res.refund)
	case res.refunded:
		status = DuplicateRefundedFully
	}
	if _, err := moveDuplicateTx(ctx, tx, pay, p.StripePaymentIntent, status); err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.Next(DuplicateRefunded), nil
}

// finishDuplicateRefund: duplicate_refunded -> finished.
func (s *Service) finishDuplicateRefund(ctx context.Context, tx *db.Tx, k *recovery.Key) (recovery.Outcome, error) {
	var p duplicateParams
	if err := k.DecodeParams(&p); err != nil {
		return recovery.Outcome{}, err
	}
	pay, err := Get(ctx, tx, k.UserID, p.Payment)
	if err != nil {
		return recovery.Outcome{}, err
	}
	return recovery.RespondJSON(http.StatusOK, pay)
}

// duplicateStatus is the status of a duplicate charge whose refund Stripe
// reports as sr.
func duplicateStatus(sr *stripe.Refund) DuplicateChargeStatus {
	switch sr.Status {
	case stripe.RefundStatusSucceeded:
		return DuplicateRefundedFully
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		return DuplicateRefundFailed
	default:
		return DuplicateRefundPending
	}
}

// duplicateMoves are the moves of a duplicate charge's refund, as a
// refund's (refund_moves.go): only forward, so a late report of an earlier
// status is no move. refund.succeeded's twin, payment.duplicate_refunded,
// announces the money back with the customer.
var duplicateMoves = map[[2]DuplicateChargeStatus]string{
	{DuplicateRefundPending, DuplicateRefundedFully}: "payment.duplicate_refunded",
	{DuplicateRefundPending, DuplicateRefundFailed}:  "",
	{DuplicateRefundedFully, DuplicateRefundFailed}:  "",
}

// moveDuplicateTx moves the duplicate charge pi of pay (locked by the
// caller in tx) to status, if its life allows it, and stages the event
// that announces it. It tells whether it moved.
func moveDuplicateTx(ctx context.Context, tx *db.Tx, pay Payment, pi string, status DuplicateChargeStatus) (bool, error) {
	i := -1
	for j, d := range pay.DuplicateCharges {
		if d.StripePaymentIntent == pi {
			i = j
		}
	}
	if i < 0 {
		return false, bug("payment %s has no duplicate charge %s", pay.ID, pi)
	}
	event, allowed := duplicateMoves[[2]DuplicateChargeStatus{pay.DuplicateCharges[i].Status, status}]
	if !allowed {
		return false, nil
	}
	charges := append([]DuplicateCharge(nil), pay.DuplicateCharges...)
	charges[i].Status = status
	raw, err := json.Marshal(charges)
	if err != nil {
		return false, err
	}
	if err := queries.SetDuplicateCharges(ctx, tx.Queued(), dbsqlc.SetDuplicateChargesParams{ID: pay.ID, DuplicateCharges: raw}); err != nil {
		return false, err
	}
	pay.DuplicateCharges = charges
	if event == "" {
		return true, nil
	}
	return true, stage(ctx, tx, nil, eventJob(pay.UserID, event, pay))
}

// applyDuplicateRefundTx applies an event about the refund of a duplicate
// charge (its metadata names the PaymentIntent it refunds and our
// payment): Stripe settling a pending one, or failing one later.
func applyDuplicateRefundTx(ctx context.Context, tx *db.Tx, sr *stripe.Refund) (EventOutcome, error) {
	pay, err := lockPayment(ctx, tx, sr.Metadata["payment"])
	if errors.Is(err, pgx.ErrNoRows) {
		return EventUnmatched, nil
	}
	if err != nil {
		return "", err
	}
	pi := sr.Metadata[duplicateChargeMetadata]
	known := false
	for _, d := range pay.DuplicateCharges {
		known = known || d.StripePaymentIntent == pi
	}
	if !known {
		return EventUnmatched, nil
	}
	moved, err := moveDuplicateTx(ctx, tx, pay, pi, duplicateStatus(sr))
	if err != nil || !moved {
		return EventNoChange, err
	}
	return EventApplied, nil
}
